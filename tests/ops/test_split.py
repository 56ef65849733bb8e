"""Split against onnxruntime: every output an exact int8 range of the input, on NCHW and NHWC tensors, with
sizes as an attribute (opset < 13), an input (13+) or num_outputs (18)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import helper

import onnx2gemmini as o2g
from tests.helpers import assert_matches_ort, infer_outputs


def split_model(shape, axis, sizes=None, opset=17, after_conv=False, num_outputs=None):
    """x [-> Conv] -> Split -> the parts added back with Concat in reverse order (every output used)."""
    nodes, inits, x = [], {}, "x"
    if after_conv:
        c = shape[1]
        inits["w"] = np.random.default_rng(2).uniform(-0.4, 0.4, (c, c, 3, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]))
        x = "c"
    parts = len(sizes) if sizes else num_outputs
    outs = [f"p{i}" for i in range(parts)]
    attrs, inputs = {"axis": axis}, [x]
    if num_outputs:
        attrs["num_outputs"] = num_outputs
    elif opset >= 13:
        inits["sizes"] = np.array(sizes, np.int64)
        inputs.append("sizes")
    else:
        attrs["split"] = list(sizes)
    nodes.append(helper.make_node("Split", inputs, outs, **attrs))
    nodes.append(helper.make_node("Concat", outs[::-1], ["y"], axis=axis))
    return infer_outputs(nodes, {"x": list(shape)}, inits, opset=opset)


CASES = {
    "channels_nhwc": ((1, 8, 5, 5), 1, (3, 5), 17, True, None),
    "channels_halves_opset18": ((1, 8, 4, 4), 1, None, 18, True, 2),
    "uneven_num_outputs": ((1, 7, 4, 4), 1, None, 18, True, 3),
    "height_attribute_opset11": ((1, 3, 6, 5), 2, (1, 2, 3), 11, False, None),
    "last_axis_3d": ((2, 4, 9), -1, (4, 5), 17, False, None),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_split_matches_onnxruntime_exactly(case):
    shape, axis, sizes, opset, after_conv, num = CASES[case]
    compiled, result = assert_matches_ort(split_model(shape, axis, sizes, opset, after_conv, num))
    split = [layer for layer in result["layers"] if layer["op"] == "Split"]
    assert split and all(layer["mismatches_vs_ort_qdq"] == 0 for layer in split)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=2, max_size=4), st.data())
def test_random_splits(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    cuts = sorted(data.draw(st.sets(st.integers(1, shape[axis] - 1), max_size=3))) if shape[axis] > 1 else []
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [shape[axis]])]
    assert_matches_ort(split_model(tuple(shape), axis, sizes), samples=2)


def test_sizes_that_do_not_add_up_are_refused():
    model = split_model((1, 4, 3, 3), 1, (2, 2))
    model.graph.initializer[0].CopyFrom(helper.make_tensor("sizes", 7, [2], [2, 3]))
    with pytest.raises(o2g.O2GError, match="do not add up|Split"):
        o2g.compile(model)
