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


@pytest.mark.parametrize("shape", [(2, 4, 30), (1, 6, 5, 7)], ids=["groupnorm-export", "nchw"])
def test_instance_norm_with_one_scale_is_a_layer_norm(shape):
    c = shape[1]
    inits = {"s": np.full(c, 1.25, np.float32), "b": np.full(c, -0.1, np.float32)}
    model = infer_outputs([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)],
                          {"x": list(shape)}, inits)
    compiled, _ = assert_matches_ort(model, samples=3)
    assert any(getattr(s, "op", "") == "layernorm" for s in compiled.plan.steps)


def test_instance_norm_with_channel_scales_is_refused():
    import onnx2gemmini as o2g
    inits = {"s": np.array([1.0, 2.0], np.float32), "b": np.zeros(2, np.float32)}
    model = infer_outputs([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], {"x": [1, 2, 9]},
                          inits)
    with pytest.raises(o2g.UnsupportedError, match="differ between channels"):
        o2g.compile(model)
