"""Small chains of supported ops: what a real network strings together, bit-exact where it must be."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs, rng


def resnet_block(c=8, hw=8, seed=0):
    r = rng(seed)
    w = lambda *s: r.normal(0, 0.2, s).astype(np.float32)  # noqa: E731
    inits = {"W1": w(c, 3, 3, 3), "B1": w(c), "W2": w(c, c, 3, 3), "W3": w(c, c, 1, 1), "B3": w(c),
             "FC": w(c, 10), "FB": w(10), "shape": np.array([1, -1], np.int64)}
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p1", "W2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "W3", "B3"], ["c3"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["c3", "p1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"]),
        helper.make_node("Reshape", ["g", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "FC"], ["m"]),
        helper.make_node("Add", ["m", "FB"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    return infer_outputs(nodes, {"x": [1, 3, hw, hw]}, inits)


def test_resnet_like_block():
    compiled, result = assert_matches_ort(resnet_block(), samples=6)
    kinds = [s.kind for s in compiled.plan.steps]
    assert kinds.count("conv") == 2 and kinds.count("resadd") == 1
    assert any(getattr(s, "mean_of", 0) > 1 for s in compiled.plan.steps)  # the average: a matmul by ones
    tolerances = {l["op"]: l["tolerance_lsb"] for l in result["layers"]}
    assert tolerances["Conv"] == 0 and tolerances["GlobalAveragePool"] == 1 and tolerances["Softmax"] == 1


def vgg_like(seed=0, relu6=False):
    r = rng(seed)
    w = lambda *s: r.normal(0, 0.3, s).astype(np.float32)  # noqa: E731
    inits = {"W1": w(6, 2, 3, 3), "W2": w(6, 6, 3, 3), "G": w(6 * 2 * 2, 5), "lo": np.float32(0),
             "hi": np.float32(6)}
    act = (lambda i, o: helper.make_node("Clip", [i, "lo", "hi"], [o])) if relu6 else \
        (lambda i, o: helper.make_node("Relu", [i], [o]))
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), act("c1", "a1"),
             helper.make_node("MaxPool", ["a1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "W2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), act("c2", "a2"),
             helper.make_node("MaxPool", ["a2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p2"], ["f"]), helper.make_node("Gemm", ["f", "G"], ["y"])]
    return infer_outputs(nodes, {"x": [1, 2, 8, 8]}, inits)


@pytest.mark.parametrize("relu6", [False, True], ids=["relu", "relu6"])
def test_vgg_like_chain_is_exact(relu6):
    _, result = assert_matches_ort(vgg_like(relu6=relu6), samples=8)
    assert result["verdict"]["exact_model"]


@given(seed=st.integers(0, 10_000), c=st.integers(1, 12), hw=st.integers(4, 10))
def test_random_residual_blocks(seed, c, hw):
    assert_matches_ort(resnet_block(c=c, hw=hw, seed=seed), samples=2, seed=seed)
