"""Add/Sum of two activations: Gemmini's resadd (tiled_resadd_auto) within its stated tolerance."""
import numpy as np
import pytest
from onnx import helper

from onnx2gemmini import kernels
from tests.helpers import assert_matches_ort, infer_outputs, rng


def residual_model(shape=(1, 8, 6, 6), relu=False, op="Add", scale_b=1.0, seed=0):
    r = rng(seed)
    c = shape[1]
    inits = {"W": r.normal(0, 0.3, (c, c, 3, 3)).astype(np.float32) * np.float32(scale_b)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node(op, ["x", "c"], ["a" if relu else "y"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["a"], ["y"]))
    return infer_outputs(nodes, {"x": list(shape)}, inits)


CASES = {"add": dict(), "add_relu": dict(relu=True), "sum": dict(op="Sum"),
         "add_scaled_branch": dict(scale_b=8.0), "add_small_branch": dict(scale_b=0.05),
         "add_2d": dict(shape=(3, 8, 1, 1))}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_residual_add_within_stated_tolerance(case):
    compiled, result = assert_matches_ort(residual_model(**CASES[case]), samples=6)
    resadd = next(s for s in compiled.plan.steps if s.kind == "resadd")
    assert resadd.A_scale <= 1.0 and resadd.B_scale <= 1.0
    assert resadd.relu == CASES[case].get("relu", False)


def test_resadd_saturates_each_input_before_adding():
    a = np.array([[100]], np.int8)
    b = np.array([[100]], np.int8)
    # a*2 saturates at 127 before the add: (127 + 100) * 0.5 = 113.5 -> 114 (even)
    assert kernels.resadd(a, b, 2.0, 1.0, 0.5, False).tolist() == [[114]]
