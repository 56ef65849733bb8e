"""Transpose: an exact int8 move on the CPU."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs, rng


@pytest.mark.parametrize("perm", [[1, 0, 2], [2, 0, 1], None], ids=["swap", "rotate", "reverse"])
def test_transpose_is_exact(perm):
    attrs = {"perm": perm} if perm else {}
    model = infer_outputs([helper.make_node("Transpose", ["x"], ["y"], **attrs)], {"x": [2, 3, 4]})
    assert_matches_ort(model)


def test_channel_shuffle_after_conv():
    r = rng(0)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Reshape", ["c", "s1"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s2"], ["y"])]
    model = infer_outputs(nodes, {"x": [1, 4, 3, 3]},
                          {"W": r.normal(size=(8, 4, 1, 1)).astype(np.float32),
                           "s1": np.array([1, 2, 4, 3, 3], np.int64), "s2": np.array([1, 8, 3, 3], np.int64)})
    assert_matches_ort(model)
