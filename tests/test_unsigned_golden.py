"""unsigned_golden.py: the QDQ golden with uint8 activations computes the signed golden's values bit for bit
(every tensor, for every op it is used with), only where onnxruntime's u8 x s8 sums are exact, and the
held-out choice of ranges made through it is the one the signed golden makes."""
import json

import numpy as np
import onnx
import pytest

import onnx2gemmini as o2g
from onnx2gemmini import ort_session, unsigned_golden
from onnx2gemmini.golden import build_qdq
from onnx2gemmini.quant import selection
from onnx2gemmini.unsigned_golden import VERIFIED_OPS, equivalent, exact_here, golden_session, unsigned_activations
from tests.emit.c_models import MODELS, chain, weights
from tests.helpers import random_dataset
from tests.test_cli import CALIB, MODEL
from tests.test_ort_session import QDQ_INT8, needs_qemu, on_cpu_without_vnni

# Between them, every op of VERIFIED_OPS.
COVERING = ["conv_relu_pool3_pad1", "gemm_transB", "add_resadd_relu", "averagepool_count_pad", "global_average_rect",
            "concat_requantized", "float_outputs", "conv_sorted_channels_silu_prelu", "squeeze_excite_lut_binary",
            "attention_matmuls", "gather_layernorm_broadcast_add", "deberta_mask_rows_query_key",
            "roberta_position_ids", "dense_block", "div_by_constant", "lrn", "lstm_bidirectional_peephole",
            "gru_reverse_linear_before_reset", "pad_value_channels", "resize_linear_nhwc",
            "resize_cubic_nhwc_exclude_outside", "resize_nearest_nhwc", "reduce_mean_rect_cpu", "reduce_sum_channels",
            "reduce_max_axes_apart_nhwc", "flatten_after_conv", "conv_transpose_stride2", "squeezed"]


def squeezed():
    """MatMul, Unsqueeze, Relu, Squeeze: a transformer's axis moves around quantized values."""
    axes = np.array([1], np.int64)
    return chain([("MatMul", ["a", "B"], ["m"], {}), ("Unsqueeze", ["m", "axes"], ["u"], {}),
                  ("Relu", ["u"], ["r"], {}), ("Squeeze", ["r", "axes"], ["y"], {})],
                 {"a": [3, 16]}, {"B": weights(4, 16, 8), "axes": axes})


BUILDERS = {**MODELS, "squeezed": squeezed}


def golden(name):
    model = BUILDERS[name]()
    compiled = o2g.compile(model, calib=random_dataset(model, 3, 0))
    return model, build_qdq(compiled.graph, compiled.quant)


def every_tensor(qdq, form, entries):
    """A session on `form` returning the outputs and every dequantized activation."""
    constants = {t.name for t in qdq.graph.initializer}
    names = [o.name for o in qdq.graph.output] + [n.output[0] for n in qdq.graph.node if
                                                   n.op_type == "DequantizeLinear" and n.input[0] not in constants]
    return names, ort_session.session(form, outputs=names, entries=entries)


def differing(model, qdq, samples=4) -> list[str]:
    names, signed = every_tensor(qdq, qdq, None)
    _, unsigned = every_tensor(qdq, unsigned_activations(qdq), {})
    data = random_dataset(model, samples, 5)
    bad = set()
    for i in range(samples):
        feed = data.sample(i)
        bad |= {n for n, a, b in zip(names, signed.run(names, feed), unsigned.run(names, feed))
                if not np.array_equal(a, b, equal_nan=True)}
    return sorted(bad)


@pytest.mark.parametrize("name", COVERING)
def test_verified_ops_compute_the_same_values_in_both_forms(name):
    model, qdq = golden(name)
    assert equivalent(qdq)
    if not exact_here():  # x86 without VNNI: the unsigned form saturates; the signed golden runs instead
        assert ort_session.has_entries(golden_session(qdq).get_session_options(), dict([QDQ_INT8]))
        return
    assert differing(model, qdq) == []


def test_every_verified_op_is_covered():
    seen = set()
    for name in COVERING:
        seen |= {n.op_type for n in golden(name)[1].graph.node}
    assert VERIFIED_OPS <= seen, VERIFIED_OPS - seen


def test_an_average_pool_with_a_varying_divisor_is_not_run_unsigned():
    """Negative control: QLinearAveragePool rounds differently in the unsigned form when the border windows
    divide by fewer values; such a model runs the signed golden."""
    model, qdq = golden("averagepool")
    assert not equivalent(qdq)
    assert ort_session.has_entries(golden_session(qdq).get_session_options(), dict([QDQ_INT8]))
    if exact_here():
        assert differing(model, qdq, 8) == ["y"]


def test_an_unverified_op_runs_signed():
    _, qdq = golden("conv3x3")
    assert equivalent(qdq)
    qdq.graph.node.append(onnx.helper.make_node("Erf", ["y"], ["e"]))
    assert not equivalent(qdq)


def test_the_unsigned_form_holds_the_same_quantization():
    _, qdq = golden("conv_relu")
    form = unsigned_activations(qdq)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in form.graph.initializer}
    constants = {t.name for t in qdq.graph.initializer}
    for node in form.graph.node:
        if node.op_type == "QuantizeLinear" or (node.op_type == "DequantizeLinear" and node.input[0] not in constants):
            assert inits[node.input[2]].dtype == np.uint8 and np.all(inits[node.input[2]] == 128)
        elif node.op_type == "DequantizeLinear":  # weights and biases keep their zero points
            assert inits[node.input[2]].dtype in (np.int8, np.int32) and not np.any(inits[node.input[2]])


def test_the_held_out_choice_is_the_same_through_either_golden(monkeypatch):
    signed = lambda qdq, arena=True: ort_session.session(qdq, arena=arena)  # noqa: E731
    made = []
    real = unsigned_golden.unsigned_activations
    monkeypatch.setattr(unsigned_golden, "unsigned_activations", lambda qdq: made.append(1) or real(qdq))
    fast = o2g.compile(MODEL, calib=CALIB, num_calib=16).calibration
    assert len(made) >= 16 if exact_here() else not made  # every candidate and fold judged unsigned here
    monkeypatch.setattr(selection, "golden_session", signed)
    slow = o2g.compile(MODEL, calib=CALIB, num_calib=16).calibration
    assert fast["folds"] == 4 and len(fast["candidates"]) == 4
    assert json.dumps(fast) == json.dumps(slow)


@needs_qemu
def test_the_unsigned_form_is_not_exact_on_a_cpu_without_vnni():
    """There u8 x s8 pair sums saturate int16: the probe fails in the unsigned form, so the signed golden runs."""
    run = on_cpu_without_vnni("-c", "from onnx2gemmini.unsigned_golden import exact_here; print(exact_here())")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == "False"
