"""Pooling: max-pool on the CPU when not fused, average pools, global average on Gemmini."""
import numpy as np
import pytest
from onnx import helper

from onnx2gemmini import kernels
from tests.helpers import assert_matches_ort, infer_outputs


def pool_model(op, shape=(1, 6, 9, 9), **attrs):
    return infer_outputs([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": list(shape)})


MAXPOOLS = {
    "2x2_s2": dict(kernel_shape=[2, 2], strides=[2, 2]),
    "3x3_s2_p1": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "3x3_s1_asym": dict(kernel_shape=[3, 3], pads=[0, 1, 2, 1]),
    "5x5": dict(kernel_shape=[5, 5], strides=[2, 2]),
    "2x3_rect": dict(kernel_shape=[2, 3], strides=[1, 2]),
    "ceil_mode": dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    "dilated": dict(kernel_shape=[2, 2], dilations=[2, 2]),
    "same_upper": dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
}


@pytest.mark.parametrize("case", list(MAXPOOLS), ids=list(MAXPOOLS))
def test_maxpool_matches_onnxruntime(case):
    compiled, _ = assert_matches_ort(pool_model("MaxPool", **MAXPOOLS[case]))
    assert any(getattr(s, "op", "") == "maxpool" for s in compiled.plan.steps)


AVGPOOLS = {
    "2x2_s2": dict(kernel_shape=[2, 2], strides=[2, 2]),
    "3x3_p1_exclude_pad": dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    "3x3_p1_include_pad": dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
    "7x7_global_like": dict(kernel_shape=[9, 9]),
    "ceil_mode": dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
}


@pytest.mark.parametrize("case", list(AVGPOOLS), ids=list(AVGPOOLS))
def test_avgpool_within_tolerance(case):
    _, result = assert_matches_ort(pool_model("AveragePool", **AVGPOOLS[case]))
    assert result["layers"][0]["tolerance_lsb"] == 1


@pytest.mark.parametrize("shape", [(1, 16, 7, 7), (2, 5, 4, 4), (1, 8, 3, 5)], ids=["7x7", "batch2", "non_square"])
def test_global_average_within_tolerance(shape):
    compiled, result = assert_matches_ort(pool_model("GlobalAveragePool", shape), samples=6)
    kinds = [s.kind for s in compiled.plan.steps]
    assert ("global_average" in kinds) == (shape[2] == shape[3])
    assert result["layers"][0]["tolerance_lsb"] == 1


def test_global_average_rounds_half_to_even_like_the_hardware():
    x = np.zeros((1, 2, 2, 3), np.int8)
    x[0, :, :, 0] = [[1, 1], [0, 0]]     # 2/4 = 0.5 -> 0
    x[0, :, :, 1] = [[1, 1], [1, 3]]     # 6/4 = 1.5 -> 2
    x[0, :, :, 2] = [[-1, -1], [0, 0]]   # -0.5 -> -0
    assert kernels.global_average(x).reshape(-1).tolist() == [0, 2, 0]
