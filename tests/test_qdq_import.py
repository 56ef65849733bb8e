"""Models that arrive quantized (QDQ): compiled with their own scales, bit-exact with onnxruntime on them
(per-channel weights as one Gemmini call per run of equal scales); what Gemmini cannot express
(asymmetric activations, per-channel activations) is refused naming the tensor."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

import onnx2gemmini as o2g
from onnx2gemmini.ort_session import session as ort_session
from onnx2gemmini.golden import build_qdq
from onnx2gemmini.load import load

ROOT = Path(__file__).resolve().parents[1] / "models"


class _Reader(CalibrationDataReader):
    def __init__(self, n=20):
        data = np.load(ROOT / "digits_calib.npz")["input"][:n]
        self._it = iter([{"input": x[None]} for x in data])

    def get_next(self):
        return next(self._it, None)


def ort_quantized(tmp_path, **options) -> Path:
    static = tmp_path / "static.onnx"
    onnx.save(load(ROOT / "digits_cnn.onnx").model, static)
    out = tmp_path / "q.onnx"
    settings = dict(quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    per_channel=False, extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    settings.update(options)
    quantize_static(str(static), str(out), _Reader(), **settings)
    return out


def int8_outputs(compiled, n=100):
    x = np.load(ROOT / "digits_eval.npz")["input"][:n]
    return np.stack([compiled.run_int8({"input": x[i:i + 1]})["logits"] for i in range(n)])


def assert_bit_exact_with_onnxruntime(path, n=100):
    """Our int8 outputs equal onnxruntime's run of the user's quantized model, sample by sample."""
    compiled = o2g.compile(path)
    assert compiled.quant.method == "from the model" and not compiled.warnings
    scale = compiled.plan.tensors[compiled.plan.outputs[0]].scale
    sess = ort_session(path)
    x = np.load(ROOT / "digits_eval.npz")["input"][:n]
    ref = np.stack([np.rint(sess.run(None, {"input": x[i:i + 1]})[0] / np.float32(scale)) for i in range(n)])
    np.testing.assert_array_equal(int8_outputs(compiled, n), ref.astype(np.int8))
    return compiled


def test_onnxruntime_qdq_model_is_compiled_bit_exact(tmp_path):
    assert_bit_exact_with_onnxruntime(ort_quantized(tmp_path))


def test_qoperator_model_is_compiled_bit_exact(tmp_path):
    path = ort_quantized(tmp_path, quant_format=QuantFormat.QOperator)
    assert any(n.op_type == "QLinearConv" for n in onnx.load(path).graph.node)
    assert_bit_exact_with_onnxruntime(path)


def test_our_own_qdq_model_round_trips(tmp_path):
    first = o2g.compile(ROOT / "digits_cnn.onnx", calib=ROOT / "digits_calib.npz")
    path = tmp_path / "model.qdq.onnx"
    onnx.save(build_qdq(first.graph, first.quant), path)
    second = o2g.compile(path)
    np.testing.assert_array_equal(int8_outputs(first, 50), int8_outputs(second, 50))


@pytest.mark.parametrize("quant_format", [QuantFormat.QDQ, QuantFormat.QOperator], ids=["qdq", "qoperator"])
def test_per_channel_weights_are_mapped_exactly(tmp_path, quant_format):
    path = ort_quantized(tmp_path, per_channel=True, quant_format=quant_format)
    compiled = assert_bit_exact_with_onnxruntime(path)
    # one Gemmini call per run of output channels sharing a scale, each writing its channels in place
    for name, wq in compiled.quant.weights.items():
        calls = [s for s in compiled.plan.steps if s.node == name and s.kind in ("conv", "matmul")]
        assert len(calls) == len(wq.groups()) > 1, name
        assert all(compiled.plan.tensors[s.output if s.kind == "conv" else s.C].slice_of for s in calls)


def test_per_channel_weights_on_another_axis_are_refused(tmp_path):
    """Scales along a conv's input channels cannot become separate calls: refused naming the weights."""
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.ones((4, 4, 1, 1), np.int8), "wq"),
             numpy_helper.from_array(np.array([0.1, 0.2, 0.3, 0.4], np.float32), "ws"),
             numpy_helper.from_array(np.zeros(4, np.int8), "wz"),
             numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.int8(0), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=1),
             helper.make_node("Conv", ["xd", "w"], ["c"], name="conv"),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "axis1.onnx")
    with pytest.raises(o2g.UnsupportedError, match="per-channel scales along axis 1") as err:
        o2g.compile(tmp_path / "axis1.onnx")
    assert "tensor 'w'" in str(err.value)


def test_asymmetric_activations_are_refused_naming_the_tensor(tmp_path):
    path = ort_quantized(tmp_path, activation_type=QuantType.QUInt8, extra_options={"WeightSymmetric": True})
    with pytest.raises(o2g.UnsupportedError, match="zero point") as err:
        o2g.compile(path)
    assert "tensor '" in str(err.value)
