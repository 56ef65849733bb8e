"""Quantization rules: one float32 scale per tensor, shared scales where the op moves int8 values."""
import numpy as np
import pytest
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.quantize import multiplier, quantize_array, quantize_weights, scale_for
from tests.helpers import infer_outputs, random_dataset, rng


def test_multiplier_is_float32_arithmetic():
    s_in, s_w, s_out = 0.1, 0.003, 0.07
    expected = np.float32(np.float32(np.float32(s_in) * np.float32(s_w)) / np.float32(s_out))
    assert multiplier(s_in, s_w, s_out) == float(expected)


def test_quantize_array_is_quantizelinear():
    assert quantize_array(np.array([0.25, 0.75, -0.25, 1000.0], np.float32), 0.5).tolist() == [0, 2, 0, 127]


def test_weights_symmetric_and_bias_at_product_scale():
    w = np.array([[-2.0, 1.0], [0.5, 0.0]], np.float32)
    wq = quantize_weights(w, np.array([1.0, -1.0], np.float32), 0.1)
    assert wq.q.min() == -127 and wq.scale == scale_for(2.0)
    assert wq.bias_scale == float(np.float32(0.1) * np.float32(wq.scale))
    assert wq.bias.dtype == np.int32


def test_scale_sharing_rules():
    r = rng(0)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("Flatten", ["p"], ["y"])]
    model = infer_outputs(nodes, {"x": [1, 2, 5, 5]}, {"W": r.normal(size=(3, 2, 3, 3)).astype(np.float32)})
    compiled = o2g.compile(model, calib=random_dataset(model))
    s = compiled.quant.scales
    assert s["y"] == s["p"]          # Flatten shares its input's scale
    # the fused pool's output keeps the conv+relu scale; a standalone pool shares its input's
    assert s["p"] in (s.get("r"), s.get("p"))


def test_all_zero_tensor_gets_a_usable_scale():
    assert scale_for(0.0) == pytest.approx(1 / 127)
