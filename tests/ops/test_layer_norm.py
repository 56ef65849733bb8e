"""LayerNormalization: a float kernel on the CPU within 1 LSB of onnxruntime."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs, rng

CASES = {"last_axis": ((2, 5, 16), -1, True), "no_bias": ((3, 12), -1, False), "two_axes": ((2, 3, 4, 5), 2, True)}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_layer_norm_within_one_lsb(case):
    shape, axis, with_bias = CASES[case]
    r = rng(0)
    norm = shape[axis % len(shape):]
    inits = {"g": r.uniform(0.5, 1.5, norm).astype(np.float32)}
    inputs = ["x", "g"]
    if with_bias:
        inits["b"] = r.normal(0, 0.2, norm).astype(np.float32)
        inputs.append("b")
    model = infer_outputs([helper.make_node("LayerNormalization", inputs, ["y"], axis=axis)], {"x": list(shape)},
                          inits)
    compiled, _ = assert_matches_ort(model, samples=3)
    assert any(getattr(s, "op", "") == "layernorm" for s in compiled.plan.steps)
