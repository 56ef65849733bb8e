"""LSTM and GRU against onnxruntime: the input projection one Gemmini matmul, the recurrence the float32
CPU kernel within its stated tolerance of onnxruntime's own LSTM/GRU on the same int8 projection; the
rewrite itself against onnxruntime's float run of the original node."""
import numpy as np
import onnx
import pytest
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini import kernels
from onnx2gemmini.ort_session import session
from onnx2gemmini.compiler import prepare
from onnx2gemmini.cpu.recurrent import GATES, RECURRENCE
from onnx2gemmini.golden import build_float
from onnx2gemmini.numerics import accumulator_lsb, bias_scale
from onnx2gemmini.plan import CpuOp, Matmul
from tests.helpers import assert_matches_ort, compile_and_diff, infer_outputs, random_dataset, rng


def rnn_model(op="LSTM", seq=5, batch=2, size=6, hidden=8, direction="forward", bias=True, initial=False,
              peephole=False, layout=0, linear_before_reset=0, outputs=("y", "y_h", "y_c"), opset=14, **attrs):
    """x -> LSTM/GRU with random constant weights; `outputs` names Y, Y_h(, Y_c), "" for an unused one."""
    r = rng(7)
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[op.lower()]
    inits = {"W": r.normal(0, 0.4, (dirs, gates * hidden, size)).astype(np.float32),
             # trained recurrences are contractive (|R| ~ 1/sqrt(hidden)); far larger weights make the
             # trajectory chaotic, and any float32 difference then grows without bound
             "R": r.normal(0, min(0.4, 2 / np.sqrt(hidden)), (dirs, gates * hidden, hidden)).astype(np.float32)}
    if bias:
        inits["B"] = r.normal(0, 0.3, (dirs, 2 * gates * hidden)).astype(np.float32)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    states = ("h0", "c0") if op == "LSTM" else ("h0",)
    if initial:
        inits.update({s: r.normal(0, 0.5, state).astype(np.float32) for s in states})
    if peephole:
        inits["P"] = r.normal(0, 0.3, (dirs, 3 * hidden)).astype(np.float32)
    inputs = ["x", "W", "R", "B" if bias else "", "", *(states if initial else ("",) * len(states))]
    inputs += ["P"] if peephole else []
    while not inputs[-1]:
        inputs.pop()
    attrs = {"hidden_size": hidden, "direction": direction, **attrs}
    if layout:
        attrs["layout"] = layout
    if op == "GRU":
        attrs["linear_before_reset"] = linear_before_reset
    outs = list(outputs[:len(states) + 1])
    x_shape = [batch, seq, size] if layout else [seq, batch, size]
    node = helper.make_node(op, inputs, outs, name="rnn", **attrs)
    return infer_outputs([node], {"x": x_shape}, inits, opset=opset, outputs=tuple(o for o in outs if o))


CASES = {
    # id: rnn_model arguments
    "lstm_forward": {},
    "lstm_reverse_no_bias": {"direction": "reverse", "bias": False},
    "lstm_bidirectional_initial": {"direction": "bidirectional", "initial": True},
    "lstm_peephole_batch3": {"peephole": True, "initial": True, "batch": 3, "seq": 9},
    "lstm_long_wide": {"seq": 24, "batch": 1, "size": 20, "hidden": 32, "direction": "bidirectional"},
    "lstm_one_step_one_unit": {"seq": 1, "batch": 1, "hidden": 1},
    "lstm_layout1": {"layout": 1, "direction": "bidirectional", "initial": True, "peephole": True},
    "lstm_only_y_h": {"outputs": ("", "y_h", "")},
    "lstm_opset7": {"opset": 7, "direction": "bidirectional"},
    "gru_forward": {"op": "GRU"},
    "gru_reverse_initial": {"op": "GRU", "direction": "reverse", "initial": True},
    "gru_bidirectional_lbr": {"op": "GRU", "direction": "bidirectional", "linear_before_reset": 1, "batch": 3},
    "gru_lbr_no_bias": {"op": "GRU", "linear_before_reset": 1, "bias": False, "seq": 12, "hidden": 16},
    "gru_layout1": {"op": "GRU", "layout": 1, "initial": True, "linear_before_reset": 1},
    "gru_only_y": {"op": "GRU", "outputs": ("y", "")},
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_recurrence_matches_onnxruntime(case):
    model = rnn_model(**CASES[case])
    compiled, result = assert_matches_ort(model, samples=4)
    steps = compiled.plan.steps
    matmuls = [s for s in steps if isinstance(s, Matmul)]
    recurrent = [s for s in steps if isinstance(s, CpuOp) and s.op == "recurrent"]
    assert len(matmuls) == 1 and len(recurrent) == 1, [getattr(s, "op", s.kind) for s in steps]
    kwargs = CASES[case]
    seq, batch = kwargs.get("seq", 5), kwargs.get("batch", 2)
    dirs = 2 if kwargs.get("direction") == "bidirectional" else 1
    op = kwargs.get("op", "LSTM")
    assert (matmuls[0].I, matmuls[0].J) == (seq * batch, dirs * GATES[op.lower()] * kwargs.get("hidden", 8))
    rnn = next(l for l in result["layers"] if l["name"] == "rnn")
    assert rnn["tolerance_lsb"] == RECURRENCE.lsb and rnn["compared"] > 0
    for name, out in result["outputs"].items():  # int8 close to the float model's outputs
        assert out["fp32_vs_int8"]["cosine"] > 0.98, (name, out)


@pytest.mark.parametrize("case", ["lstm_bidirectional_initial", "lstm_peephole_batch3", "gru_bidirectional_lbr",
                                  "gru_reverse_initial"])
def test_rewrite_computes_the_original_node(case):
    """The projection MatMul and the node reading it through the 0/1 selection are the original node: the
    float model of the rewritten graph against onnxruntime's run of the model as given."""
    model = rnn_model(**CASES[case])
    _, graph, _, changes = prepare(model)
    assert [n.op_type for n in graph.nodes] == ["MatMul", CASES[case].get("op", "LSTM")], changes
    data = random_dataset(model, 3, 5)
    names = [o.name for o in model.graph.output]
    ours, theirs = session(build_float(graph)), session(model)
    for i in range(data.num_samples):
        sample = data.sample(i)
        for a, b in zip(ours.run(names, sample), theirs.run(names, sample)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


PROJECTED = {"seq": 12, "size": 20, "hidden": 16, "direction": "bidirectional"}  # rnn_model arguments


@pytest.mark.parametrize("config", ["default", "lean"])
def test_projection_keeps_its_accumulators_where_the_configuration_reads_them(config):
    """Where the accumulator reads out at full width (the default configuration), the projection is a
    full_C matmul writing int32 accumulators at s_x*s_w, bit-exact against onnxruntime's product of the
    same int8 operands; the lean configuration cannot read them out and keeps an int8 projection."""
    compiled, result = assert_matches_ort(rnn_model(**PROJECTED), samples=4, config=config)
    (projection,) = [s for s in compiled.plan.steps if isinstance(s, Matmul)]
    tensor = compiled.plan.tensors[projection.C]
    full = config == "default"
    assert projection.full_C == full and tensor.dtype == ("int32" if full else "int8")
    layer = next(l for l in result["layers"] if l["name"] == projection.node)
    assert layer["tolerance_lsb"] == 0 and layer["mismatches_vs_ort_qdq"] == 0
    if full:
        x = next(n for n in compiled.graph.nodes if n.name == projection.node).inputs[0]
        assert tensor.scale == bias_scale(compiled.quant.scales[x], compiled.quant.weights[projection.node].scale)


def test_accumulators_are_closer_to_fp32_than_an_int8_projection():
    """The same model and data: the full_C projection loses only its operands' rounding; int8 output adds
    its own step (measured on this model: 41.1 dB against 37.4 dB, and 36.4 against 33.6 dB at Y)."""
    sqnr = {}
    for config in ("default", "lean"):
        _, result = compile_and_diff(rnn_model(**PROJECTED), 4, config=config)
        sqnr[config] = {l["name"]: l["sqnr_db"] for l in result["layers"]}
    assert sqnr["default"]["rnn__projection"] > sqnr["lean"]["rnn__projection"] + 2, sqnr
    assert sqnr["default"]["rnn"] > sqnr["lean"]["rnn"] + 1, sqnr


def test_an_accumulator_one_unit_off_fails_the_check(monkeypatch):
    """The negative control of the accumulator comparison: the emulator's full_C result one unit high in
    one value fails diff at the projection."""
    from onnx2gemmini import kernels
    real = kernels.matmul

    def one_off(*args, **kwargs):
        out = real(*args, **kwargs)
        if kwargs.get("full_C", args[7] if len(args) > 7 else False):
            out = out.copy()
            out.flat[0] += 1
        return out
    monkeypatch.setattr(kernels, "matmul", one_off)
    _, result = compile_and_diff(rnn_model(**PROJECTED), samples=2)
    layer = next(l for l in result["layers"] if l["name"] == "rnn__projection")
    assert layer["max_lsb_vs_ort_qdq"] == 1 and not result["verdict"]["passed"]


def test_accumulators_beyond_float32_get_their_rounding_budget():
    """Accumulators that can pass 2^22 come back from onnxruntime's float32 output rounded: the layer's
    tolerance is floor(bound * 2^-23 + 1/2) units, and the comparison stays within it."""
    compiled, result = assert_matches_ort(rnn_model(seq=3, batch=1, size=4096, hidden=4), samples=2)
    (projection,) = [s for s in compiled.plan.steps if isinstance(s, Matmul)]
    bound = kernels.accumulator_bound(compiled.plan.constants[projection.B].reshape(projection.K, projection.J),
                                      compiled.plan.constants.get(projection.D))
    layer = next(l for l in result["layers"] if l["name"] == projection.node)
    assert bound >= 2**22 and layer["tolerance_lsb"] == accumulator_lsb(bound) >= 1
    assert accumulator_lsb(2**22 - 1) == 0 and accumulator_lsb(3 * 2**23) == 3


def test_a_wrong_recurrence_fails_the_check(monkeypatch):
    """The layer check sees the recurrence: a kernel that drops the recurrence bias fails diff."""
    from onnx2gemmini.cpu import recurrent
    real = recurrent.Recurrent.run
    monkeypatch.setattr(recurrent.Recurrent, "run",
                        lambda self, inputs, shapes: real(self, [inputs[0], inputs[1], inputs[2] * 0, *inputs[3:]],
                                                          shapes))
    _, result = compile_and_diff(rnn_model(), samples=2)
    assert not result["verdict"]["passed"]


REFUSED = {
    # id: (rnn_model arguments, the reason's words)
    "clip": ({"clip": 3.0}, "clip"),
    "input_forget": ({"input_forget": 1}, "input_forget"),
    "relu_activation": ({"activations": ["Sigmoid", "Relu", "Tanh"]}, "activations.*only the default"),
    "gru_hardsigmoid": ({"op": "GRU", "activations": ["HardSigmoid", "Tanh"]}, "activations"),
    "hidden_too_large": ({"hidden": 1025, "seq": 1, "batch": 1, "size": 2}, "hidden_size 1025 > 1024"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_unsupported_attributes_are_refused(case):
    kwargs, reason = REFUSED[case]
    op = kwargs.get("op", "LSTM")
    with pytest.raises(o2g.UnsupportedError, match=f"rnn \\({op}: .*{reason}"):
        o2g.compile(rnn_model(**kwargs))


def _with_input(model: onnx.ModelProto, index: int, name: str, node: onnx.NodeProto | None = None,
                init: np.ndarray | None = None) -> onnx.ModelProto:
    """`model` with the recurrent node's input `index` bound to `name` (made by `node`, or a constant)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    rnn = model.graph.node[-1]
    while len(rnn.input) <= index:
        rnn.input.append("")
    rnn.input[index] = name
    if node is not None:
        model.graph.node.insert(0, node)
    if init is not None:
        model.graph.initializer.append(onnx.numpy_helper.from_array(init, name))
    return model


def test_short_sequence_lens_are_refused():
    model = _with_input(rnn_model(), 4, "lens", init=np.array([5, 3], np.int32))
    with pytest.raises(o2g.UnsupportedError, match=r"rnn \(LSTM: sequence_lens \[5, 3\] shorter"):
        o2g.compile(model)


def test_full_sequence_lens_are_the_sequence():
    assert_matches_ort(_with_input(rnn_model(), 4, "lens", init=np.array([5, 5], np.int32)), samples=2)


def test_initial_state_computed_at_run_time():
    """initial_h = x[0] (a Slice of the input): computed, not constant; the kernel reads it dequantized from
    int8, as the golden's DequantizeLinear before onnxruntime's GRU (a streaming model's state input is the
    same case: tests/test_stream.py)."""
    model = rnn_model(op="GRU", batch=2, size=8, hidden=8)
    slicer = helper.make_node("Slice", ["x", "s0", "s1"], ["h_run"], name="first_step")
    model = _with_input(model, 5, "h_run", slicer)
    for name, value in (("s0", [0]), ("s1", [1])):
        model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(value, np.int64), name))
    assert_matches_ort(model, samples=2)
