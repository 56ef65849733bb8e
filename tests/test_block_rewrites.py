"""ScatterND that overwrites a block, and Einsum / MatMul with constant batched weights (MViTv2's relative
positions): rewritten into moves and Gemmini matmuls, bit-exact with onnxruntime."""
import numpy as np
import pytest
from onnx import helper

import onnx2gemmini as o2g
from onnx2gemmini.passes.scatter_block import box
from tests.helpers import assert_matches_ort, make_model, rng


def grid(*ranges):
    return np.stack(np.meshgrid(*[np.arange(a, b) for a, b in ranges], indexing="ij"), -1).astype(np.int64)


def scatter_model(indices, data_shape, update_shape):
    nodes = [helper.make_node("Relu", ["x"], ["d"]), helper.make_node("Sigmoid", ["u"], ["v"]),
             helper.make_node("ScatterND", ["d", "idx", "v"], ["y"])]
    return make_model(nodes, {"x": list(data_shape), "u": list(update_shape)}, {"y": list(data_shape)},
                      {"idx": indices})


@pytest.mark.parametrize("ranges, data_shape", [
    ([(0, 1), (0, 2), (1, 5), (1, 5)], (1, 2, 5, 5)),   # MViTv2: x[:, :, 1:, 1:] = y
    ([(0, 1), (1, 3), (0, 5), (2, 3)], (1, 4, 5, 5)),   # an inner block: slices on both sides
    ([(0, 2), (0, 3)], (2, 3, 4)),                       # whole rows: the updates are the result
    ([(1, 2)], (3, 4, 2)),                               # trailing axes copied whole
])
def test_block_scatter_matches_onnxruntime(ranges, data_shape):
    indices = grid(*ranges)
    update_shape = indices.shape[:-1] + tuple(data_shape[len(ranges):])
    compiled, _ = assert_matches_ort(scatter_model(indices, data_shape, update_shape))
    assert "ScatterND" not in [n.op_type for n in compiled.graph.nodes]


def test_scatter_that_is_not_a_block_is_refused_by_name():
    indices = grid((0, 1), (0, 2), (1, 5), (1, 5))
    assert box(indices, (1, 2, 5, 5)) == [(0, 1), (0, 2), (1, 5), (1, 5)]
    shuffled = indices[:, :, ::-1]  # the same positions, not in row-major order: updates land elsewhere
    assert box(shuffled, (1, 2, 5, 5)) is None
    with pytest.raises(o2g.O2GError, match="ScatterND"):
        o2g.compile(scatter_model(np.ascontiguousarray(shuffled), (1, 2, 5, 5), (1, 2, 4, 4)))


@pytest.mark.parametrize("equation, a_shape, w_shape", [
    ("byhwc,hkc->byhwk", (1, 2, 4, 5, 8), (4, 6, 8)),   # MViTv2, batched over h
    ("byhwc,wkc->byhwk", (1, 2, 4, 5, 8), (5, 6, 8)),   # batched over w
    ("bhic,hcj->bhij", (2, 3, 4, 8), (3, 8, 5)),         # a leading m letter
    ("bic,cj->bij", (2, 4, 8), (8, 5)),                  # no batch letter: one matmul
    ("bic,jc->bji", (2, 4, 8), (5, 8)),                  # the output transposed
])
def test_einsum_with_constant_operand_is_exact(equation, a_shape, w_shape):
    r = rng(0)
    weights = r.normal(0, 0.5, w_shape).astype(np.float32)
    ta, tb = equation.split("->")[0].split(",")
    sizes = dict(zip(ta, a_shape)) | dict(zip(tb, w_shape))
    out = [sizes[c] for c in equation.split("->")[1]]
    nodes = [helper.make_node("Relu", ["x"], ["q"]), helper.make_node("Einsum", ["q", "R"], ["y"], equation=equation)]
    compiled, result = assert_matches_ort(make_model(nodes, {"x": list(a_shape)}, {"y": out}, {"R": weights}))
    assert result["verdict"]["exact_model"]
    matmuls = [s for s in compiled.plan.steps if type(s).__name__ == "Matmul"]
    batches = int(np.prod(w_shape[:-2])) if len(w_shape) > 2 else 1
    assert len(matmuls) == batches


def test_matmul_by_batched_constant_weights():
    weights = rng(1).normal(0, 0.5, (3, 8, 4)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("MatMul", ["a", "W"], ["y"])]
    compiled, result = assert_matches_ort(make_model(nodes, {"x": [3, 5, 8]}, {"y": [3, 5, 4]}, {"W": weights}))
    assert result["verdict"]["exact_model"]
    assert compiled.quant.weights[compiled.graph.nodes[1].name].q.shape == (3, 8, 4)
    broadcast = make_model(nodes, {"x": [1, 5, 8]}, {"y": [3, 5, 4]}, {"W": weights})  # valid ONNX, refused
    with pytest.raises(o2g.O2GError, match="batch dimensions differ"):
        o2g.compile(broadcast)
