"""Concat: an int8 copy with a shared scale (requantizing inputs at another fixed scale). A concat that is a
model output keeps its inputs' scales instead (tests/test_output_segments.py), so the shared-scale cases here
feed the concat to one more node."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs, rng


def fire_module(relu6_branch=False, seed=0):
    """SqueezeNet's fire module: squeeze 1x1, expand 1x1 and 3x3, concatenated on channels."""
    r = rng(seed)
    w = lambda *s: r.normal(0, 0.3, s).astype(np.float32)  # noqa: E731
    inits = {"Ws": w(4, 8, 1, 1), "We1": w(6, 4, 1, 1), "We3": w(5, 4, 3, 3), "lo": np.float32(0),
             "hi": np.float32(6)}
    nodes = [helper.make_node("Conv", ["x", "Ws"], ["s"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("Conv", ["sr", "We1"], ["e1"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["e1"], ["e1r"]),
             helper.make_node("Conv", ["sr", "We3"], ["e3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["e3", "lo", "hi"], ["e3r"]) if relu6_branch else
             helper.make_node("Relu", ["e3"], ["e3r"]),
             helper.make_node("Concat", ["e1r", "e3r"], ["cat"], axis=1),
             helper.make_node("MaxPool", ["cat"], ["y"], kernel_shape=[2, 2])]
    return infer_outputs(nodes, {"x": [1, 8, 6, 6]}, inits)


def test_fire_module_concat_is_exact_with_shared_scale():
    compiled, result = assert_matches_ort(fire_module())
    s = compiled.quant.scales
    assert s["e1r"] == s["e3r"] == s["cat"] == s["y"]
    assert result["verdict"]["exact_model"]


def test_concat_requantizes_a_fixed_scale_input():
    compiled, result = assert_matches_ort(fire_module(relu6_branch=True))
    concat = next(st for st in compiled.plan.steps if getattr(st, "op", "") == "concat")
    assert concat.golden_tolerance(compiled.plan.call_site(concat)).lsb == 1 and "requantization" in concat.reason


@pytest.mark.parametrize("axis,shape", [(0, (2, 3)), (1, (2, 3)), (-1, (1, 2, 3, 4)), (2, (1, 2, 3, 4))],
                         ids=["rows", "cols", "nchw_last", "nchw_height"])
def test_concat_of_inputs_other_axes(axis, shape):
    nodes = [helper.make_node("Concat", ["a", "b"], ["y"], axis=axis)]
    assert_matches_ort(infer_outputs(nodes, {"a": list(shape), "b": list(shape)}))


@pytest.mark.parametrize("case", ["class_token_3d", "constant_channels_nhwc"])
def test_constant_operands_are_quantized_at_the_output_scale(case):
    """ViT's class token (and position-like constants): int8 at the concat's scale, exactly as the golden's Q
    (the concat feeds a Relu: as a model output, the constant would keep a scale of its own)."""
    r = np.random.default_rng(4)
    if case == "class_token_3d":
        nodes = [helper.make_node("MatMul", ["x", "m"], ["h"]), helper.make_node("Concat", ["t", "h"], ["cat"], axis=1)]
        inits = {"m": r.standard_normal((5, 6)).astype(np.float32), "t": r.standard_normal((1, 1, 6)).astype(np.float32)}
        shape = [1, 4, 5]
    else:
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Concat", ["c", "k"], ["cat"], axis=1)]
        inits = {"w": r.uniform(-0.3, 0.3, (4, 3, 3, 3)).astype(np.float32),
                 "k": r.standard_normal((1, 2, 4, 4)).astype(np.float32)}
        shape = [1, 3, 4, 4]
    nodes.append(helper.make_node("Relu", ["cat"], ["y"]))
    compiled, result = assert_matches_ort(infer_outputs(nodes, {"x": shape}, inits))
    concat = next(layer for layer in result["layers"] if layer["op"] == "Concat")
    assert concat["mismatches_vs_ort_qdq"] == 0 and not compiled.quant.axis_scales
