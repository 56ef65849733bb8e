"""Slice, Pad and nearest Resize: exact int8 moves (one `remap` step), on plain and NHWC inputs."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from tests.helpers import assert_matches_ort, infer_outputs, rng

I64 = np.int64


def one_node(op, shape, inits, extra, after_conv=False, opset=17, **attrs):
    """`op` on input x, or (after_conv) on the NHWC output of a 3x3 conv."""
    nodes, src, inits = [], "x", dict(inits)
    if after_conv:
        inits["W"] = rng(0).normal(0, 0.3, (shape[1], 3, 3, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]))
        src = "c"
    nodes.append(helper.make_node(op, [src, *extra], ["y"], name=op.lower(), **attrs))
    x_shape = [shape[0], 3, *shape[2:]] if after_conv else list(shape)
    return infer_outputs(nodes, {"x": x_shape}, inits, opset=opset)


def assert_exact_move(model):
    compiled, result = assert_matches_ort(model)
    remaps = [s for s in compiled.plan.steps if getattr(s, "op", "") == "remap"]
    assert remaps and all(s.tolerance == 0 for s in remaps)
    own = {s.node for s in remaps}
    assert not any(getattr(s, "op", "") == "transpose" for s in compiled.plan.steps if s.node in own)
    return compiled


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
    n = len(range(*slice(start, end, step).indices(h)))
    if n == 0:
        return
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
    assert step.params["value"] == int(np.rint(np.float32(0.5) / np.float32(x.scale)))


@given(h=st.integers(2, 7), w=st.integers(2, 7), p=st.lists(st.integers(0, 3), min_size=4, max_size=4),
       mode=st.sampled_from(["constant", "edge", "reflect"]), seed=st.integers(0, 100))
def test_pad_random(h, w, p, mode, seed):
    if mode == "reflect" and max(p) >= min(h, w):
        return  # onnxruntime refuses reflect pads as wide as the axis
    assert_matches_ort(pad_model((1, 2, h, w), [0, 0, p[0], p[1], 0, 0, p[2], p[3]], mode), samples=2, seed=seed)


def resize_model(shape, scales=None, sizes=None, after_conv=False, opset=17, **attrs):
    inits = {"r": np.zeros(0, np.float32)}
    extra = ["r"]
    if scales is not None:
        inits["s"] = np.asarray(scales, np.float32)
        extra.append("s")
    else:
        inits["s"], inits["z"] = np.zeros(0, np.float32), np.asarray(sizes, I64)
        extra += ["", "z"]
        del inits["s"]
    return one_node("Resize", shape, inits, extra, after_conv, opset=opset, mode="nearest", **attrs)


COORDS = ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
GEOMETRIES = {
    "up2": dict(scales=[1, 1, 2, 2]),
    "up_1_5_x_3": dict(scales=[1, 1, 1.5, 3]),
    "down_0_6": dict(scales=[1, 1, 0.6, 0.5]),
    "sizes_7x3": dict(sizes=[1, 3, 7, 3]),
}


@pytest.mark.parametrize("geometry", list(GEOMETRIES), ids=list(GEOMETRIES))
@pytest.mark.parametrize("nearest", NEAREST)
@pytest.mark.parametrize("coord", COORDS)
def test_resize_nearest(coord, nearest, geometry):
    model = resize_model((1, 3, 5, 6), coordinate_transformation_mode=coord, nearest_mode=nearest,
                         **GEOMETRIES[geometry])
    assert_exact_move(model)


@pytest.mark.parametrize("geometry", list(GEOMETRIES), ids=list(GEOMETRIES))
def test_resize_nearest_half_pixel_symmetric(geometry):
    assert_exact_move(resize_model((1, 3, 5, 6), opset=19, coordinate_transformation_mode="half_pixel_symmetric",
                                   **GEOMETRIES[geometry]))


def test_slice_to_an_empty_tensor_is_refused():
    import onnx2gemmini as o2g
    with pytest.raises(o2g.O2GError, match="empty output"):
        o2g.compile(slice_model((1, 4, 5, 5), [3], [3], [2]))


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric"])
def test_resize_nearest_after_conv_stays_nhwc(coord):
    assert_exact_move(resize_model((1, 4, 5, 6), scales=[1, 1, 2, 2], after_conv=True,
                                   coordinate_transformation_mode=coord))


@given(h=st.integers(1, 8), w=st.integers(1, 8), oh=st.integers(1, 16), ow=st.integers(1, 16),
       coord=st.sampled_from(COORDS), nearest=st.sampled_from(NEAREST))
def test_resize_nearest_random_sizes(h, w, oh, ow, coord, nearest):
    assert_matches_ort(resize_model((1, 2, h, w), sizes=[1, 2, oh, ow], coordinate_transformation_mode=coord,
                                    nearest_mode=nearest), samples=2)


@pytest.mark.parametrize("attrs,reason", [
    (dict(mode="linear"), "mode linear"), (dict(mode="cubic"), "mode cubic"),
    (dict(coordinate_transformation_mode="tf_crop_and_resize"), "tf_crop_and_resize"),
    (dict(coordinate_transformation_mode="tf_half_pixel_for_nearest"), "tf_half_pixel_for_nearest")],
    ids=["linear", "cubic", "crop", "tf_half_pixel_for_nearest"])
def test_resize_refuses_what_it_does_not_implement(attrs, reason):
    import onnx2gemmini as o2g
    from onnx2gemmini.graph import NodeView, from_onnx
    from onnx2gemmini.ops.registry import lookup
    model = resize_model((1, 3, 4, 4), scales=[1, 1, 2, 2])
    node = model.graph.node[0]
    for k, v in attrs.items():
        node.attribute.append(helper.make_attribute(k, v))
    graph = from_onnx(model)
    view = NodeView(graph.nodes[0], graph)
    assert any(reason in r for r in lookup("Resize", 17).check(view, None))
    with pytest.raises(o2g.O2GError):
        o2g.compile(model)
