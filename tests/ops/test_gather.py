"""Gather with constant indices: an exact int8 copy on the CPU."""
import numpy as np
import pytest
from onnx import helper

import onnx2gemmini as o2g
from tests.helpers import assert_matches_ort, infer_outputs

CASES = {
    "rows": ((5, 6), 0, np.array([4, 0, 2], np.int64)),
    "negative_indices": ((2, 5, 3), 1, np.array([-1, 0, -5], np.int64)),
    "matrix_of_indices": ((2, 7), 1, np.array([[6, 1], [0, 3]], np.int64)),
    "scalar_index": ((3, 4, 5), 2, np.array(2, np.int64)),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_gather_is_exact(case):
    shape, axis, indices = CASES[case]
    model = infer_outputs([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)], {"x": list(shape)},
                          {"i": indices})
    compiled, _ = assert_matches_ort(model)
    steps = [s for s in compiled.plan.steps if getattr(s, "op", "") == "gather"]
    assert len(steps) == 1


def test_non_constant_indices_are_refused():
    model = infer_outputs([helper.make_node("Cast", ["k"], ["i"], to=7),
                           helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], {"x": [4, 2], "k": [3]})
    with pytest.raises(o2g.O2GError, match="non-constant indices"):
        o2g.compile(model)
