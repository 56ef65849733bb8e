"""Sub, Mul, Div, PRelu and broadcasting Adds: the float binary kernel on the CPU, 1 LSB tolerance."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

import onnx2gemmini as o2g
from tests.helpers import assert_matches_ort, infer_outputs, rng


CASES = {
    "mul_const_channel": (["x", "c"], {"c": np.linspace(0.5, 2, 3).reshape(3, 1, 1).astype(np.float32)}, "Mul"),
    "add_const_scalar": (["x", "c"], {"c": np.float32(0.3)}, "Add"),
    "sub_from_const": (["c", "x"], {"c": np.float32(1.0)}, "Sub"),
    "div_by_const": (["x", "c"], {"c": np.float32(4.0)}, "Div"),
    "mul_two_activations": (["x", "x2"], {}, "Mul"),
    "add_broadcast_row": (["x", "r"], {}, "Add"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_binary_ops(case):
    inputs, inits, op = CASES[case]
    shapes = {"x": [1, 3, 4, 4], "x2": [1, 3, 4, 4], "r": [1, 1, 1, 4]}
    model = infer_outputs([helper.make_node(op, inputs, ["y"])],
                          {n: shapes[n] for n in inputs if n not in inits}, inits)
    compiled, _ = assert_matches_ort(model)
    assert any(getattr(s, "op", "") == "binary" for s in compiled.plan.steps)


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


PRELU_CASES = {
    "per_channel": ((1, 4, 5, 5), (4, 1, 1)),
    "scalar": ((1, 4, 5, 5), (1,)),
    "per_width": ((1, 4, 5, 5), (5,)),
    "full": ((2, 3, 4, 4), (3, 4, 4)),
    "matrix_per_column": ((3, 7), (7,)),
}


PRELU_RUNS = [(c, False) for c in PRELU_CASES] + [(c, True) for c, v in PRELU_CASES.items() if len(v[0]) == 4]


@pytest.mark.parametrize("case,after_conv", PRELU_RUNS, ids=[f"{c}-{'after_conv' if a else 'input'}" for c, a in PRELU_RUNS])
def test_prelu(case, after_conv):
    shape, slope = PRELU_CASES[case]
    compiled, result = assert_matches_ort(prelu_model(shape, slope, after_conv))
    step = next(s for s in compiled.plan.steps if s.node == "prelu")
    assert step.op == "binary" and step.params.fn == "prelu"
    assert step.golden_tolerance(compiled.plan.call_site(step)).lsb == 0  # exact: onnxruntime's float PRelu
    assert result["layers"][-1]["mismatches_vs_ort_qdq"] == 0
    if after_conv:
        assert compiled.plan.tensors[step.outputs[0]].layout == "NHWC"


@given(c=st.integers(1, 8), h=st.integers(1, 6), w=st.integers(1, 6), seed=st.integers(0, 1000))
def test_prelu_random_per_channel(c, h, w, seed):
    assert_matches_ort(prelu_model((1, c, h, w), (c, 1, 1), seed=seed), samples=2, seed=seed)


def test_non_constant_slope_is_refused():
    model = infer_outputs([helper.make_node("PRelu", ["x", "s"], ["y"])], {"x": [1, 3], "s": [1, 3]})
    with pytest.raises(o2g.O2GError, match="slope"):
        o2g.compile(model)
