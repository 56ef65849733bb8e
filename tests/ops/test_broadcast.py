"""Expand and Tile against onnxruntime: exact int8 repetitions on NCHW, NHWC and rank-promoted inputs."""
import numpy as np
import pytest
from onnx import helper

import onnx2gemmini as o2g
from tests.helpers import assert_matches_ort, infer_outputs

W = np.random.default_rng(0).uniform(-0.4, 0.4, (4, 3, 3, 3)).astype(np.float32)
CASES = {
    # id: (nodes, constants, input shape)
    "expand_rank_promoted": ([helper.make_node("Expand", ["x", "s"], ["y"])], {"s": np.array([2, 3, 4], np.int64)},
                             [3, 1]),
    "expand_pooled_nhwc": ([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                            helper.make_node("GlobalAveragePool", ["c"], ["g"]),
                            helper.make_node("Expand", ["g", "s"], ["y"])],
                           {"w": W, "s": np.array([1, 4, 5, 5], np.int64)}, [1, 3, 5, 5]),
    "tile_3d": ([helper.make_node("Tile", ["x", "r"], ["y"])], {"r": np.array([2, 1, 3], np.int64)}, [2, 3, 4]),
    "tile_nhwc": ([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                   helper.make_node("Tile", ["c", "r"], ["y"])], {"w": W, "r": np.array([1, 2, 1, 2], np.int64)},
                  [1, 3, 4, 4]),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_repetitions_match_onnxruntime_exactly(case):
    nodes, inits, shape = CASES[case]
    compiled, result = assert_matches_ort(infer_outputs(nodes, {"x": shape}, inits))
    assert any(getattr(s, "op", "") == "remap" for s in compiled.plan.steps)
    assert result["layers"][-1]["mismatches_vs_ort_qdq"] == 0


def test_a_computed_shape_is_refused():
    nodes = [helper.make_node("Shape", ["x"], ["s0"]), helper.make_node("Abs", ["s0"], ["s"]),
             helper.make_node("Expand", ["x", "s"], ["y"])]
    model = infer_outputs(nodes, {"x": [2, 3]})
    try:
        compiled = o2g.compile(model)
    except o2g.O2GError as exc:  # refused: a clear error, not an internal one
        assert "\n" not in str(exc).strip()
    else:  # onnxsim folded the shape into a constant: then it must be right
        assert not any(n.op_type == "Shape" for n in compiled.graph.nodes)
