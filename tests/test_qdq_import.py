"""Models that arrive quantized (QDQ): compiled with their own scales, bit-exact with onnxruntime on them;
what Gemmini cannot express (per-channel, asymmetric) is refused naming the tensor."""
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

import onnx2gemmini as o2g
from onnx2gemmini.emit.qdq import build_qdq
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
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.load(ROOT / "digits_eval.npz")["input"][:n]
    ref = np.stack([np.rint(sess.run(None, {"input": x[i:i + 1]})[0] / np.float32(scale)) for i in range(n)])
    np.testing.assert_array_equal(int8_outputs(compiled, n), ref.astype(np.int8))


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


def test_per_channel_weights_are_refused_naming_the_tensor(tmp_path):
    path = ort_quantized(tmp_path, per_channel=True)
    with pytest.raises(o2g.UnsupportedError, match="per-channel scales") as err:
        o2g.compile(path)
    assert "tensor '" in str(err.value)


def test_asymmetric_activations_are_refused_naming_the_tensor(tmp_path):
    path = ort_quantized(tmp_path, activation_type=QuantType.QUInt8, extra_options={"WeightSymmetric": True})
    with pytest.raises(o2g.UnsupportedError, match="zero point") as err:
        o2g.compile(path)
    assert "tensor '" in str(err.value)
