"""Flatten, Reshape, Squeeze, Unsqueeze, Identity, Dropout: int8 views (with an NHWC -> NCHW move when the order
matters)."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs, rng


def conv_then(op_nodes, inits=None, shape=(1, 3, 6, 6)):
    r = rng(0)
    inits = dict(inits or {})
    inits["W"] = r.normal(0, 0.3, (4, shape[1], 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])] + op_nodes
    return infer_outputs(nodes, {"x": list(shape)}, inits)


CASES = {
    "flatten": ([helper.make_node("Flatten", ["c"], ["y"])], {}),
    "flatten_axis2": ([helper.make_node("Flatten", ["c"], ["y"], axis=2)], {}),
    "reshape_2d": ([helper.make_node("Reshape", ["c", "s"], ["y"])], {"s": np.array([1, -1], np.int64)}),
    "reshape_4d_then_conv": ([helper.make_node("Reshape", ["c", "s"], ["r"]),
                              helper.make_node("Conv", ["r", "W2"], ["y"], kernel_shape=[1, 1])],
                             {"s": np.array([1, 4, 3, 12], np.int64),
                              "W2": np.ones((2, 4, 1, 1), np.float32) * 0.3}),
    "identity": ([helper.make_node("Identity", ["c"], ["y"])], {}),
    "dropout": ([helper.make_node("Dropout", ["c"], ["y"])], {}),
    "unsqueeze_squeeze": ([helper.make_node("Unsqueeze", ["c", "a"], ["u"]),
                           helper.make_node("Squeeze", ["u", "a"], ["y"])], {"a": np.array([2], np.int64)}),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_views_are_exact(case):
    nodes, inits = CASES[case]
    assert_matches_ort(conv_then(nodes, inits))


def test_flatten_of_1x1_map_needs_no_move():
    compiled, _ = assert_matches_ort(conv_then([helper.make_node("Flatten", ["c"], ["y"])], shape=(1, 3, 1, 1)))
    assert not any(getattr(s, "op", "") == "transpose" for s in compiled.plan.steps)
