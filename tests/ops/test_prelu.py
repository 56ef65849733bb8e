"""PRelu: x < 0 ? x * slope : x in float32 on the CPU (the binary kernel), 1 LSB tolerance."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

import onnx2gemmini as o2g
from tests.helpers import assert_matches_ort, infer_outputs, rng


def prelu_model(shape, slope_shape, after_conv=False, seed=0):
    r = rng(seed)
    inits = {"s": r.normal(0.1, 0.4, slope_shape).astype(np.float32)}
    nodes, src = [], "x"
    if after_conv:
        inits["W"] = r.normal(0, 0.3, (shape[1], shape[1], 3, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]))
        src = "c"
    nodes.append(helper.make_node("PRelu", [src, "s"], ["y"], name="prelu"))
    return infer_outputs(nodes, {"x": list(shape)}, inits)


CASES = {
    "per_channel": ((1, 4, 5, 5), (4, 1, 1)),
    "scalar": ((1, 4, 5, 5), (1,)),
    "per_width": ((1, 4, 5, 5), (5,)),
    "full": ((2, 3, 4, 4), (3, 4, 4)),
    "matrix_per_column": ((3, 7), (7,)),
}


RUNS = [(c, False) for c in CASES] + [(c, True) for c, v in CASES.items() if len(v[0]) == 4]


@pytest.mark.parametrize("case,after_conv", RUNS, ids=[f"{c}-{'after_conv' if a else 'input'}" for c, a in RUNS])
def test_prelu(case, after_conv):
    shape, slope = CASES[case]
    compiled, result = assert_matches_ort(prelu_model(shape, slope, after_conv))
    step = next(s for s in compiled.plan.steps if s.node == "prelu")
    assert step.op == "binary" and step.params["fn"] == "prelu" and step.tolerance == 1
    if after_conv:
        assert compiled.plan.tensors[step.outputs[0]].layout == "NHWC"


@given(c=st.integers(1, 8), h=st.integers(1, 6), w=st.integers(1, 6), seed=st.integers(0, 1000))
def test_prelu_random_per_channel(c, h, w, seed):
    assert_matches_ort(prelu_model((1, c, h, w), (c, 1, 1), seed=seed), samples=2, seed=seed)


def test_non_constant_slope_is_refused():
    model = infer_outputs([helper.make_node("PRelu", ["x", "s"], ["y"])], {"x": [1, 3], "s": [1, 3]})
    with pytest.raises(o2g.O2GError, match="slope"):
        o2g.compile(model)
