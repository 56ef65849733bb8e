"""Slice and Pad: exact int8 moves (one `remap` step), on plain and NHWC inputs."""
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import onnx2gemmini as o2g
from tests.helpers import assert_exact_move, assert_matches_ort, one_node

I64 = np.int64


def slice_model(shape, starts, ends, axes=None, steps=None, after_conv=False):
    inits = {"s": np.asarray(starts, I64), "e": np.asarray(ends, I64)}
    extra = ["s", "e"]
    if axes is not None:
        inits["a"] = np.asarray(axes, I64)
        extra.append("a")
    if steps is not None:
        inits["t"] = np.asarray(steps, I64)
        extra.append("t")
    return one_node("Slice", shape, inits, extra, after_conv)


SLICES = {
    "channels": ((1, 6, 4, 4), [1], [5], [1], None),
    "all_axes_default": ((2, 3, 4), [0, 1, 1], [2, 3, 3], None, None),
    "negative_start_end": ((1, 4, 6, 6), [-4, -1], [-1, 1000], [2, 3], None),
    "clamped_huge": ((1, 4, 6, 6), [-1000], [2 ** 62], [3], None),
    "step2": ((1, 4, 7, 7), [0, 1], [7, 7], [2, 3], [2, 3]),
    "negative_step_reverse": ((1, 4, 5, 5), [-1, 4], [-1000, 0], [2, 3], [-1, -2]),
    "negative_axis": ((3, 8), [2], [7], [-1], [2]),
}


SLICE_RUNS = [(c, False) for c in SLICES] + [(c, True) for c, v in SLICES.items() if len(v[0]) == 4 and c != "empty"]


@pytest.mark.parametrize("case,after_conv", SLICE_RUNS, ids=[f"{c}-{'nhwc' if a else 'plain'}" for c, a in SLICE_RUNS])
def test_slice(case, after_conv):
    shape, starts, ends, axes, steps = SLICES[case]
    assert_exact_move(slice_model(shape, starts, ends, axes, steps, after_conv))


@given(h=st.integers(1, 9), start=st.integers(-12, 12), end=st.integers(-12, 12),
       step=st.sampled_from([-3, -2, -1, 1, 2, 3]), seed=st.integers(0, 100))
def test_slice_random(h, start, end, step, seed):
    assume(len(range(*slice(start, end, step).indices(h))) > 0)  # an empty slice is test_slice's "empty"
    assert_matches_ort(slice_model((1, 3, h, 4), [start], [end], [2], [step]), samples=2, seed=seed)


def pad_model(shape, pads, mode="constant", value=None, axes=None, after_conv=False, opset=18):
    inits, extra = {"p": np.asarray(pads, I64)}, ["p"]
    if value is not None or axes is not None:
        extra.append("v" if value is not None else "")
        if value is not None:
            inits["v"] = np.asarray(value, np.float32)
    if axes is not None:
        inits["a"] = np.asarray(axes, I64)
        extra.append("a")
    return one_node("Pad", shape, inits, extra, after_conv, opset=opset, mode=mode)


PADS = {
    "zero_hw": ((1, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1], "constant", None, None),
    "value": ((1, 3, 4, 5), [0, 0, 1, 1, 0, 0, 1, 1], "constant", 0.37, None),
    "value_saturates": ((1, 3, 4, 5), [0, 0, 1, 1, 0, 0, 1, 1], "constant", 50.0, None),
    "channels_and_negative": ((1, 3, 4, 5), [0, 1, -1, 0, 0, 2, 1, -2], "constant", -0.2, None),
    "axes": ((1, 3, 4, 5), [2, 1, 0, 3], "constant", 0.0, [2, -1]),
    "reflect": ((1, 3, 4, 5), [0, 0, 2, 3, 0, 0, 3, 2], "reflect", None, None),
    "edge": ((1, 3, 4, 5), [0, 0, 2, 3, 0, 0, 3, 2], "edge", None, None),
    "edge_3d": ((2, 4, 3), [1, 0, 2, 0, 2, 1], "edge", None, None),
}


PAD_RUNS = [(c, False) for c in PADS] + [(c, True) for c, v in PADS.items() if len(v[0]) == 4]


@pytest.mark.parametrize("case,after_conv", PAD_RUNS, ids=[f"{c}-{'nhwc' if a else 'plain'}" for c, a in PAD_RUNS])
def test_pad(case, after_conv):
    shape, pads, mode, value, axes = PADS[case]
    assert_exact_move(pad_model(shape, pads, mode, value, axes, after_conv))


def test_pad_value_is_quantized_to_the_input_scale():
    compiled = assert_exact_move(pad_model((1, 3, 4, 5), [0, 0, 1, 1, 0, 0, 1, 1], value=0.5))
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "remap")
    x = compiled.plan.tensors[step.inputs[0]]
    assert step.params.value == int(np.rint(np.float32(0.5) / np.float32(x.scale)))


@given(h=st.integers(2, 7), w=st.integers(2, 7), p=st.lists(st.integers(0, 3), min_size=4, max_size=4),
       mode=st.sampled_from(["constant", "edge", "reflect"]), seed=st.integers(0, 100))
def test_pad_random(h, w, p, mode, seed):
    assume(mode != "reflect" or max(p) < min(h, w))  # onnxruntime refuses reflect pads as wide as the axis
    assert_matches_ort(pad_model((1, 2, h, w), [0, 0, p[0], p[1], 0, 0, p[2], p[3]], mode), samples=2, seed=seed)


def test_slice_to_an_empty_tensor_is_refused():
    """A model whose output is the empty slice is refused when loaded (an output of a zero-sized dimension);
    the Slice handler refuses an empty result too, whatever the declaration says."""
    with pytest.raises(o2g.O2GError, match="output 'y' has a zero-sized dimension"):
        o2g.compile(slice_model((1, 4, 5, 5), [3], [3], [2]))
    undeclared = slice_model((1, 4, 5, 5), [3], [3], [2])
    for k, dim in enumerate(undeclared.graph.output[0].type.tensor_type.shape.dim):
        dim.dim_param = f"d{k}"  # declared without sizes: shape inference finds the empty dimension
    with pytest.raises(o2g.O2GError, match="empty output"):
        o2g.compile(undeclared)
