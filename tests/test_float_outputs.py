"""Model outputs kept float32 (quantize.float_tensors): a lookup-table activation that is a model output, and a
concat that joins one into a model output, write float32 values instead of int8 ones. The values are the
function's own at each int8 input (cpu.FloatLut), within 2^-20 of the largest value of onnxruntime's float
evaluation of the QDQ model (which has no Q/DQ there), and the joined int8 inputs are dequantized bit for bit
as onnxruntime's DequantizeLinear does."""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess

import numpy as np
import pytest
from onnx import helper
from onnx.numpy_helper import to_array as onnx_numpy

import onnx2gemmini as o2g
from onnx2gemmini.compare import FLOAT_UNIT, run_diff
from onnx2gemmini.fidelity import NO_FLOORS
from onnx2gemmini.data import Dataset
from onnx2gemmini.emit.c import check_dtype
from onnx2gemmini.emit.checks import Check
from onnx2gemmini.emit.report import build_report
from onnx2gemmini.errors import UnsupportedError
from onnx2gemmini.ops.activations import FINITE, FUNCTIONS, float_table
from onnx2gemmini.ort_session import session
from onnx2gemmini.plan import CpuOp
from onnx2gemmini.quant import quantize
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.tolerance import EXACT, FLOAT_REORDERING
from tests.emit.c_models import float_outputs
from tests.helpers import OPSET, infer_outputs, random_dataset

ATTRS = {"LeakyRelu": {"alpha": 0.1}, "Elu": {"alpha": 0.5}, "HardSigmoid": {"alpha": 0.25, "beta": 0.4}}


def unary_output(op: str, shape=(2, 24)):
    node = helper.make_node(op, ["x"], ["y"], name=op.lower(), **ATTRS.get(op, {}))
    return infer_outputs([node], {"x": list(shape)}, opset=20 if op == "Gelu" else OPSET)


@pytest.mark.parametrize("op", sorted(FINITE))
def test_an_activation_that_is_a_model_output_writes_float32(op):
    model = unary_output(op)
    compiled = o2g.compile(model, calib=random_dataset(model, 4, 0, -6.0, 6.0))
    out = compiled.plan.tensors[compiled.plan.outputs[0]]
    [lut] = [s for s in compiled.plan.steps if isinstance(s, CpuOp) and s.op == "lut_f32"]
    assert out.dtype == "float32" and out.scale is None and compiled.quant.float_tensors == {"y"}
    # the table is the function itself at the 256 int8 inputs, rounded once to float32
    x_scale = compiled.plan.tensors[lut.inputs[0]].scale
    attrs = {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}
    assert lut.params.table == float_table(FUNCTIONS[op], attrs, x_scale)
    data = random_dataset(model, 3, 1, -6.0, 6.0)
    result = run_diff(compiled, data, floors=NO_FLOORS)
    assert result["verdict"]["passed"], result["verdict"]["failures"]
    assert result["outputs"]["y"]["int8_vs_ort_qdq"]["max_lsb"] <= 1  # within 2^-20 of the table's largest value
    sample = data.sample(0)
    q = np.clip(np.rint(sample["x"] / np.float32(x_scale)), -128, 127).astype(np.int64)
    np.testing.assert_array_equal(compiled.run(sample)["y"], np.asarray(lut.params.table, np.float32)[q + 128])


def test_the_comparison_unit_catches_a_wrong_table():
    """Negative control of the float comparison: a table off by 2^-16 of its largest value (16 units) fails."""
    model = unary_output("Sigmoid")
    compiled = o2g.compile(model, calib=random_dataset(model, 4, 0, -6.0, 6.0))
    steps = list(compiled.plan.steps)
    k, lut = next((k, s) for k, s in enumerate(steps) if isinstance(s, CpuOp) and s.op == "lut_f32")
    bound = max(abs(v) for v in lut.params.table)
    table = tuple(float(np.float32(v + bound * 16 * FLOAT_UNIT)) for v in lut.params.table)
    steps[k] = dataclasses.replace(lut, params=dataclasses.replace(lut.params, table=table))
    broken = dataclasses.replace(compiled, plan=dataclasses.replace(compiled.plan, steps=tuple(steps)))
    result = run_diff(broken, random_dataset(model, 2, 1, -6.0, 6.0), floors=NO_FLOORS)
    assert not result["verdict"]["passed"] and "LSB > 1" in result["verdict"]["failures"][0]


def test_4d_and_unbounded_outputs_stay_int8():
    """A 4-D map is stored NHWC and reaches the output through an int8 transpose; Exp may overflow float32."""
    for model in (unary_output("Sigmoid", (1, 2, 4, 4)), unary_output("Exp")):
        compiled = o2g.compile(model, calib=random_dataset(model, 2, 0))
        assert compiled.quant.float_tensors == frozenset()
        assert compiled.plan.tensors[compiled.plan.outputs[0]].dtype == "int8"


def test_a_concat_joining_scores_dequantizes_the_boxes_exactly():
    model = float_outputs(token=True)
    compiled = o2g.compile(model, calib=random_dataset(model, 8, 0))
    assert compiled.quant.float_tensors == {"scores", "y", "t"}
    plan = compiled.plan
    assert [plan.tensors[t].dtype for t in plan.outputs] == ["float32", "float32"]
    data = random_dataset(model, 3, 1)
    result = run_diff(compiled, data, floors=NO_FLOORS)
    assert result["verdict"]["passed"], result["verdict"]["failures"]
    concat = next(l for l in result["layers"] if l["op"] == "Concat")
    assert concat["mismatches_vs_ort_qdq"] == 0  # DequantizeLinear's one float32 multiply, and copies
    # the box rows are the int8 boxes times their scale and the token rows the constant, bit for bit
    emulator = Emulator(plan)
    buffers = emulator.run(compiled.feeds(data.sample(0)), keep=True)
    boxes = next(t for t in plan.tensors.values() if t.onnx_name == "boxes")
    y = emulator.get(buffers, plan.outputs[0])
    box_values = emulator.get(buffers, boxes.id).astype(np.float32) * np.float32(boxes.scale)
    np.testing.assert_array_equal(y[:, :4], box_values)
    np.testing.assert_array_equal(y[:, 7:], model_constant(model, "token"))
    report = build_report(compiled, {"total_s": 0.0})
    assert [(o["dtype"], o["scale"]) for o in report["model"]["outputs"]] == [("float32", 1.0)] * 2


def model_constant(model, name: str) -> np.ndarray:
    return next(onnx_numpy(t) for t in model.graph.initializer if t.name == name)


def test_without_float_outputs_the_same_model_is_int8(monkeypatch):
    monkeypatch.setattr(quantize, "float_tensors", lambda *args: frozenset())
    model = float_outputs()
    compiled = o2g.compile(model, calib=random_dataset(model, 8, 0))
    assert [compiled.plan.tensors[t].dtype for t in compiled.plan.outputs] == ["int8", "int8"]
    assert run_diff(compiled, random_dataset(model, 2, 1), floors=NO_FLOORS)["verdict"]["passed"]


def scored_head():
    """A detector head as YOLOv8 exports it: boxes in pixels (0..64) joined on axis 1 with class scores,
    sigmoid(x[0] + noise - 8): mostly near 0.001 where there is nothing, higher where channel 0 marks an object."""
    r = np.random.default_rng(5)
    wb = r.normal(0, 20.0, (8, 4)).astype(np.float32)
    wc = np.concatenate([np.ones((1, 3)), r.normal(0, 0.3, (7, 3))]).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["xt", "Wb"], ["b"]), helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Transpose", ["br"], ["boxes"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["xt", "Wc"], ["c0"]), helper.make_node("Add", ["c0", "bc"], ["c"]),
             helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 1]),
             helper.make_node("Sigmoid", ["ct"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores"], ["y"], axis=1)]
    return infer_outputs(nodes, {"x": [1, 8, 64]}, {"Wb": wb, "Wc": wc, "bc": np.full(3, -8.0, np.float32)})


def scenes(n: int, seed: int, strength: float) -> np.ndarray:
    """Inputs with up to three objects each (channel 0 raised by up to `strength` at their positions)."""
    r = np.random.default_rng(seed)
    x = r.normal(0, 1, (n, 1, 8, 64)).astype(np.float32)
    for k in range(n):
        x[k, 0, 0, r.integers(0, 64, r.integers(0, 4))] += r.uniform(0, strength)
    return x


def test_small_class_scores_keep_their_precision_as_float32(monkeypatch):
    """The calibration sees a few confident detections (scores to ~0.9), the evaluation mostly scores below
    0.1: as int8 at the sigmoid's calibrated scale the small scores keep a few levels each; as float32 they
    keep what the int8 logits hold. Negative control: the same model with int8 outputs."""
    model = scored_head()
    calib = Dataset({"x": scenes(32, 0, 10.0)}, None, "synthetic")
    evaluation = Dataset({"x": scenes(16, 1, 2.5)}, None, "synthetic")
    scores = np.concatenate([session(model).run(None, evaluation.sample(i))[0][:, 4:] for i in range(16)])
    assert np.mean(scores < 0.1) > 0.95 and np.median(scores) < 0.02

    def class_sqnr() -> float:
        result = run_diff(o2g.compile(model, calib=calib), evaluation, floors=NO_FLOORS)
        assert result["verdict"]["passed"], result["verdict"]["failures"]
        boxes, classes = result["outputs"]["y"]["segments"]
        assert (classes["start"], classes["stop"]) == (4, 7)
        return classes["sqnr_db"]

    as_float = class_sqnr()
    monkeypatch.setattr(quantize, "float_tensors", lambda *args: frozenset())
    as_int8 = class_sqnr()
    print(f"class scores: {as_float:.2f} dB as float32, {as_int8:.2f} dB as int8")
    assert as_float >= 10.0 and not as_int8 >= 10.0, (as_float, as_int8)


def test_the_c_self_test_checks_float32_outputs(tmp_path):
    """The emitted program passes its self-test exactly; with one float32 table changed by one ulp everywhere it
    fails, naming the float32 tensor (negative control of the float comparison in selftest.c)."""
    if shutil.which("cc") is None or shutil.which("make") is None:
        pytest.skip("needs cc and make")
    model = float_outputs()
    o2g.compile(model, calib=random_dataset(model, 4, 0)).write(tmp_path / "out")
    c_dir = tmp_path / "out" / "c"
    run = subprocess.run(["make", "-s", "selftest"], cwd=c_dir, capture_output=True, text=True)
    assert run.returncode == 0 and "PASS (exact)" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    source = (c_dir / "model.c").read_text()
    start = source.index("static const float ")
    end = source.index("};", start)
    bumped = re.sub(r"(0x[0-9a-f.]+p[-+]?\d+)f", lambda m: float(np.nextafter(np.float32(float.fromhex(m[1])),
                                                                              np.float32(np.inf))).hex() + "f",
                    source[start:end])
    (c_dir / "model.c").write_text(source[:start] + bumped + source[end:])
    run = subprocess.run(["make", "-s", "selftest"], cwd=c_dir, capture_output=True, text=True)
    assert run.returncode != 0 and "(float32)" in run.stdout and "FAIL:" in run.stdout, run.stdout[-2000:]


def test_a_float32_check_with_a_tolerance_is_refused():
    """selftest.c compares float32 values for equality: a float32 tensor checked with a stated tolerance (a
    kernel that could differ from the emulator) is refused rather than compared wrongly."""
    model = float_outputs()
    plan = o2g.compile(model, calib=random_dataset(model, 4, 0)).plan
    out = plan.outputs[0]
    assert check_dtype(plan, Check(len(plan.steps) - 1, out, EXACT)) == np.float32
    with pytest.raises(UnsupportedError, match="checked with a tolerance"):
        check_dtype(plan, Check(len(plan.steps) - 1, out, FLOAT_REORDERING))
