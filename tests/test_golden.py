"""The QDQ golden: onnxruntime must fuse it into integer kernels, or it is not Gemmini's arithmetic."""
from pathlib import Path

import onnx
import pytest

import onnx2gemmini as o2g
from onnx2gemmini.golden import build_qdq
from onnx2gemmini.ort_session import session as ort_session
from tests.ops.test_conv import conv_model
from tests.ops.test_gemm import gemm_model, matmul_model
from tests.helpers import random_dataset

ROOT = Path(__file__).resolve().parents[1] / "models"


def optimized_ops(model: onnx.ModelProto, tmp_path) -> list[str]:
    ort_session(model, save_optimized=tmp_path / "opt.onnx")
    return [n.op_type for n in onnx.load(tmp_path / "opt.onnx").graph.node]


@pytest.mark.parametrize("build,fused", [
    (lambda: conv_model(post=("relu",)), "QLinearConv"),
    (lambda: conv_model(k=(1, 3), pads=(0, 1, 0, 1)), "QLinearConv"),
    (lambda: gemm_model(relu=True), "QGemm"),
    (lambda: matmul_model(a_shape=(6, 16)), "QGemm"),
], ids=["conv_relu", "conv_nonsquare", "gemm", "matmul_bias"])
def test_qdq_fuses_into_integer_kernels(tmp_path, build, fused):
    model = build()
    compiled = o2g.compile(model, calib=random_dataset(model))
    ops = optimized_ops(build_qdq(compiled.graph, compiled.quant), tmp_path)
    assert fused in ops
    assert not {"Conv", "Gemm", "MatMul"} & set(ops), ops


def test_bundled_model_qdq_has_no_float_compute(tmp_path):
    compiled = o2g.compile(ROOT / "digits_cnn.onnx", calib=ROOT / "digits_calib.npz")
    ops = optimized_ops(build_qdq(compiled.graph, compiled.quant), tmp_path)
    assert ops.count("QLinearConv") == 3 and ops.count("QGemm") == 2
    assert not {"Conv", "Gemm", "MatMul"} & set(ops)


def test_qdq_keeps_names_and_scales():
    model = conv_model(post=("relu",))
    compiled = o2g.compile(model, calib=random_dataset(model))
    qdq = build_qdq(compiled.graph, compiled.quant)
    onnx.checker.check_model(qdq)
    assert [i.name for i in qdq.graph.input] == ["x"] and [o.name for o in qdq.graph.output] == ["y"]
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in qdq.graph.initializer}
    assert float(inits["y__scale"]) == compiled.quant.scales["y"]
    assert all(v.dtype.name != "uint8" for v in inits.values())  # int8 only, zero points 0
