"""Unary activations as int8 lookup tables, within 1 LSB of onnxruntime's float evaluation."""
import numpy as np
import pytest
from onnx import helper

from onnx2gemmini.ops.activations import FUNCTIONS, SINCE
from tests.helpers import assert_matches_ort, infer_outputs, rng

UNARY = sorted(FUNCTIONS)


@pytest.mark.parametrize("op", UNARY)
def test_lookup_table_activation(op):
    attrs = {"alpha": 0.1} if op == "LeakyRelu" else {}
    model = infer_outputs([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": [2, 3, 5, 5]},
                          opset=max(17, SINCE.get(op, 0)))
    compiled, result = assert_matches_ort(model, samples=3)
    assert any(getattr(s, "op", "") == "lut" for s in compiled.plan.steps)


def se_block(seed=0):
    """Squeeze-excite: x * hardsigmoid(fc(gap(x))) — broadcasting multiply of two activations."""
    r = rng(seed)
    inits = {"W": r.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32), "W1": r.normal(0, 0.3, (2, 4, 1, 1)).astype(np.float32),
             "W2": r.normal(0, 0.3, (4, 2, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Conv", ["g", "W1"], ["s1"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["s1"], ["s1r"]),
             helper.make_node("Conv", ["s1r", "W2"], ["s2"], kernel_shape=[1, 1]),
             helper.make_node("HardSigmoid", ["s2"], ["h"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["c", "h"], ["y"])]
    return infer_outputs(nodes, {"x": [1, 4, 6, 6]}, inits)


def test_squeeze_excite_block():
    compiled, _ = assert_matches_ort(se_block(), samples=4)
    ops = [getattr(s, "op", s.kind) for s in compiled.plan.steps]
    assert "binary" in ops and "lut" in ops


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0])
def test_pow_by_a_constant_is_a_lookup_table(exponent):
    model = infer_outputs([helper.make_node("Pow", ["x", "p"], ["y"])], {"x": [2, 3, 5, 5]},
                          {"p": np.array(exponent, np.float32)})
    compiled, _ = assert_matches_ort(model, samples=3)
    assert [getattr(s, "op", "") for s in compiled.plan.steps].count("lut") == 1


def test_pow_by_a_tensor_is_refused():
    import onnx2gemmini as o2g
    model = infer_outputs([helper.make_node("Pow", ["x", "x"], ["y"])], {"x": [1, 4]})
    with pytest.raises(o2g.UnsupportedError, match="constant scalar exponent"):
        o2g.compile(model)
