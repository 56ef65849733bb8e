"""Gemm and MatMul (+ bias Add) on tiled_matmul_auto."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs, rng


def gemm_model(m=4, k=20, n=12, trans_b=0, alpha=1.0, beta=1.0, bias="vector", relu=False, seed=0):
    r = rng(seed)
    inits = {"B": r.normal(0, 0.3, (n, k) if trans_b else (k, n)).astype(np.float32)}
    inputs = ["x", "B"]
    if bias == "vector":
        inits["C"] = r.normal(0, 0.3, n).astype(np.float32)
    elif bias == "row":
        inits["C"] = r.normal(0, 0.3, (1, n)).astype(np.float32)
    elif bias == "scalar":
        inits["C"] = np.float32(0.25)
    if bias:
        inputs.append("C")
    nodes = [helper.make_node("Gemm", inputs, ["g" if relu else "y"], transB=trans_b, alpha=alpha, beta=beta)]
    if relu:
        nodes.append(helper.make_node("Relu", ["g"], ["y"]))
    return infer_outputs(nodes, {"x": [m, k]}, inits)


def matmul_model(a_shape=(3, 5, 16), n=8, bias=True, seed=0):
    r = rng(seed)
    inits = {"W": r.normal(0, 0.3, (a_shape[-1], n)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m" if bias else "y"])]
    if bias:
        inits["b"] = r.normal(0, 0.3, n).astype(np.float32)
        nodes.append(helper.make_node("Add", ["m", "b"], ["y"]))
    return infer_outputs(nodes, {"x": list(a_shape)}, inits)


GEMMS = {
    "plain": dict(),
    "transB": dict(trans_b=1),
    "alpha_beta": dict(alpha=0.5, beta=2.0),
    "no_bias": dict(bias=None),
    "row_bias": dict(bias="row"),
    "scalar_bias": dict(bias="scalar"),
    "relu": dict(relu=True),
    "big_k": dict(k=1500, n=20),
    "batch1_wide": dict(m=1, k=64, n=100),
}


@pytest.mark.parametrize("case", list(GEMMS), ids=list(GEMMS))
def test_gemm_matches_onnxruntime(case):
    compiled, _ = assert_matches_ort(gemm_model(**GEMMS[case]))
    assert [getattr(s, "op", s.kind) for s in compiled.plan.steps] == ["quantize", "matmul"]


MATMULS = {"rank2_bias": dict(a_shape=(6, 16)), "rank3_bias": dict(), "rank3_no_bias": dict(bias=False),
           "rank4": dict(a_shape=(1, 2, 3, 16))}


@pytest.mark.parametrize("case", list(MATMULS), ids=list(MATMULS))
def test_matmul_matches_onnxruntime(case):
    # without bias correction, a bias exists exactly when the model has one
    compiled, _ = assert_matches_ort(matmul_model(**MATMULS[case]), bias_correction=False)
    matmul = next(s for s in compiled.plan.steps if s.kind == "matmul")
    assert (matmul.D is not None) == MATMULS[case].get("bias", True)


def test_matmul_bias_add_becomes_the_matmul_bias():
    compiled, _ = assert_matches_ort(matmul_model())
    assert [getattr(s, "op", s.kind) for s in compiled.plan.steps] == ["quantize", "matmul"]
    assert next(s for s in compiled.plan.steps if s.kind == "matmul").D is not None


@given(m=st.integers(1, 9), k=st.integers(1, 80), n=st.integers(1, 40), trans_b=st.integers(0, 1),
       relu=st.booleans(), seed=st.integers(0, 10_000))
def test_gemm_random_shapes(m, k, n, trans_b, relu, seed):
    assert_matches_ort(gemm_model(m, k, n, trans_b, relu=relu, seed=seed), samples=2, seed=seed)


@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 5, 8), (2, 1, 8, 4)), ((1, 4, 6, 8), (3, 1, 8, 5)),
                                             ((2, 3, 5, 8), (8, 4)), ((4, 8), (2, 8, 3))],
                         ids=["shared-keys", "both-broadcast", "rank2-right", "rank2-left"])
def test_matmul_of_two_activations_broadcasts_batches(a_shape, b_shape):
    """Multi-query attention's keys and values are shared by every head: each result batch reads its A and
    B batches in place, as NumPy broadcasting pairs them."""
    from onnx2gemmini.ops.gemm import batch_pairs
    model = infer_outputs([helper.make_node("Relu", ["b"], ["br"]), helper.make_node("MatMul", ["a", "br"], ["y"])],
                          {"a": list(a_shape), "b": list(b_shape)})
    compiled, _ = assert_matches_ort(model, samples=3)
    batches = len(batch_pairs(a_shape[:-2], b_shape[:-2]))
    assert sum(s.kind == "matmul" for s in compiled.plan.steps) == batches


def test_batch_pairs_follow_numpy_broadcasting():
    from onnx2gemmini.ops.gemm import batch_pairs
    a, b = np.arange(6).reshape(2, 3, 1, 1), np.arange(2).reshape(2, 1, 1, 1) * 100
    expected = (a + b).reshape(-1)
    assert [ia + 100 * ib for ia, ib in batch_pairs((2, 3), (2, 1))] == expected.tolist()


def test_a_constant_column_times_a_row_is_a_broadcast_mul():
    """passes/outer_product.py: MatMul(C [.., M, 1], x [.., 1, N]) (attention over one key, folded) compiles as
    a Mul, exact against onnxruntime; with two terms per output (K = 2) the constant left operand is still
    refused (negative control)."""
    import onnx2gemmini as o2g
    c = rng(4).normal(0, 1, (1, 2, 3, 1)).astype(np.float32)
    model = infer_outputs([helper.make_node("MatMul", ["c", "x"], ["y"], name="outer")], {"x": [1, 2, 1, 5]}, {"c": c})
    compiled, _ = assert_matches_ort(model)
    assert [n.op_type for n in compiled.graph.nodes] == ["Mul"]
    wide = infer_outputs([helper.make_node("MatMul", ["c", "x"], ["y"], name="outer")], {"x": [1, 2, 2, 5]},
                         {"c": np.concatenate([c, c], axis=-1)})
    with pytest.raises(o2g.O2GError, match="constant left operand"):
        o2g.compile(wide)
