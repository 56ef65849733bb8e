"""Resize: nearest as one exact `remap` step; linear and cubic as one float `resize_linear` /
`resize_cubic` step whose taps and float32 order are onnxruntime's."""
import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st

from onnx2gemmini.ort_session import session as ort_session
from onnx2gemmini.ops.resize import cubic_tables, linear_tables
from onnx2gemmini import kernels
from tests.helpers import assert_exact_move, assert_matches_ort, one_node, rng

I64 = np.int64


def resize_model(shape, scales=None, sizes=None, after_conv=False, opset=17, mode="nearest", **attrs):
    inits = {"r": np.zeros(0, np.float32)}
    extra = ["r"]
    if scales is not None:
        inits["s"] = np.asarray(scales, np.float32)
        extra.append("s")
    else:
        inits["s"], inits["z"] = np.zeros(0, np.float32), np.asarray(sizes, I64)
        extra += ["", "z"]
        del inits["s"]
    return one_node("Resize", shape, inits, extra, after_conv, opset=opset, mode=mode, **attrs)


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


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric"])
def test_resize_nearest_after_conv_stays_nhwc(coord):
    assert_exact_move(resize_model((1, 4, 5, 6), scales=[1, 1, 2, 2], after_conv=True,
                                   coordinate_transformation_mode=coord))


@given(h=st.integers(1, 8), w=st.integers(1, 8), oh=st.integers(1, 16), ow=st.integers(1, 16),
       coord=st.sampled_from(COORDS), nearest=st.sampled_from(NEAREST))
def test_resize_nearest_random_sizes(h, w, oh, ow, coord, nearest):
    assert_matches_ort(resize_model((1, 2, h, w), sizes=[1, 2, oh, ow], coordinate_transformation_mode=coord,
                                    nearest_mode=nearest), samples=2)


LINEAR_COORDS = COORDS + ["half_pixel_symmetric"]
LINEAR_GEOMETRIES = {**GEOMETRIES, "sizes_down_2x4": dict(sizes=[1, 3, 2, 4]),
                     "width_only_2_5": dict(scales=[1, 1, 1, 2.5])}
# other ranks and axes onnxruntime interpolates, the `axes` attribute, and a resize that keeps every size
LINEAR_SHAPES = {
    "2d": ((5, 6), dict(scales=[1.5, 0.5])),
    "3d_trilinear": ((3, 4, 5), dict(scales=[2, 1, 0.6])),
    "5d_trilinear": ((1, 2, 3, 4, 5), dict(scales=[1, 1, 2, 1.5, 0.6])),
    "4d_axes_1_2": ((1, 5, 6, 3), dict(scales=[1, 2, 0.5, 1])),
    "axes_attribute": ((1, 3, 5, 6), dict(scales=[0.5, 2.5], axes=[2, 3])),
    "same_sizes_copy": ((1, 3, 4, 2), dict(scales=[1, 1, 1, 1.2])),
}


def assert_linear_resize(model, samples=4, op="resize_linear"):
    """One `resize_linear` (`resize_cubic`) step on the input's own layout. It states 1 LSB, as every float
    CPU step, but equals onnxruntime's QDQ run bit for bit: the same float32 taps and order, then the same
    rounding."""
    compiled, result = assert_matches_ort(model, samples=samples)
    steps = [s for s in compiled.plan.steps if getattr(s, "op", "") == op]
    assert len(steps) == 1 and steps[0].golden_tolerance(compiled.plan.call_site(steps[0])).lsb == 1
    own = [s for s in compiled.plan.steps if s.node == steps[0].node]
    assert own == steps  # no transpose before or after
    x, y = (compiled.plan.tensors[t] for t in (steps[0].inputs[0], steps[0].outputs[0]))
    assert x.layout == y.layout
    layer = next(layer for layer in result["layers"] if layer["name"] == steps[0].node)
    assert layer["mismatches_vs_ort_qdq"] == 0, layer
    return compiled, result


@pytest.mark.parametrize("geometry", list(LINEAR_GEOMETRIES), ids=list(LINEAR_GEOMETRIES))
@pytest.mark.parametrize("coord", LINEAR_COORDS)
def test_resize_linear(coord, geometry):
    assert_linear_resize(resize_model((1, 3, 5, 6), mode="linear", opset=19, coordinate_transformation_mode=coord,
                                      **LINEAR_GEOMETRIES[geometry]))


@pytest.mark.parametrize("geometry", ["up2", "down_0_6", "sizes_7x3"])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners"])
def test_resize_linear_after_conv(coord, geometry):
    assert_linear_resize(resize_model((1, 3, 5, 6), mode="linear", after_conv=True, opset=19,
                                      coordinate_transformation_mode=coord, **LINEAR_GEOMETRIES[geometry]))


@pytest.mark.parametrize("case", list(LINEAR_SHAPES), ids=list(LINEAR_SHAPES))
def test_resize_linear_ranks_and_axes(case):
    shape, geometry = LINEAR_SHAPES[case]
    assert_linear_resize(resize_model(shape, mode="linear", opset=19, **geometry))


def test_resize_linear_across_channels_of_an_nhwc_tensor():
    """ONNX axes 1 and 2 (C, H) of conv output stored NHWC: storage axes 3 and 1, in ONNX order."""
    compiled, _ = assert_linear_resize(resize_model((1, 4, 5, 6), scales=[1, 1.5, 0.6, 1], mode="linear",
                                                    after_conv=True, opset=19))
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "resize_linear")
    assert compiled.plan.tensors[step.inputs[0]].layout == "NHWC" and step.params.axes == (3, 1)


@given(h=st.integers(1, 8), w=st.integers(1, 8), oh=st.integers(1, 16), ow=st.integers(1, 16),
       coord=st.sampled_from(LINEAR_COORDS))
def test_resize_linear_random_sizes(h, w, oh, ow, coord):
    assert_linear_resize(resize_model((1, 2, h, w), sizes=[1, 2, oh, ow], mode="linear", opset=19,
                                      coordinate_transformation_mode=coord), samples=2)


def ort_float_resize(x: np.ndarray, model) -> np.ndarray:
    return ort_session(model, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, {"x": x})[0]


def onnx_scales(shape, out, geometry) -> np.ndarray:
    """The float32 scales onnxruntime uses: as given (on the `axes` listed), or output / input size."""
    if "sizes" in geometry:
        return np.float32(out) / np.float32(shape)
    scales = np.ones(len(shape), np.float32)
    scales[geometry.get("axes", list(range(len(shape))))] = geometry["scales"]
    return scales


FLOAT_CASES = {**{k: ((1, 3, 5, 6), v) for k, v in LINEAR_GEOMETRIES.items()}, **LINEAR_SHAPES}


@pytest.mark.parametrize("case", list(FLOAT_CASES), ids=list(FLOAT_CASES))
@pytest.mark.parametrize("coord", LINEAR_COORDS)
def test_linear_taps_and_order_equal_onnxruntimes_float_kernel(coord, case):
    """The float32 interpolation alone, on float data: bit for bit onnxruntime's (no quantization to hide
    a wrong weight, position or summation order)."""
    shape, geometry = FLOAT_CASES[case]
    model = resize_model(shape, mode="linear", opset=19, coordinate_transformation_mode=coord, **geometry)
    x = rng(3).normal(0, 10, shape).astype(np.float32)
    want = ort_float_resize(x, model)
    tables = linear_tables(shape, want.shape, onnx_scales(shape, want.shape, geometry), coord)
    got = kernels.linear_interpolate(x, tables["axes"], tables["lo"], tables["hi"], tables["w_lo"], tables["w_hi"],
                                     want.shape)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


CUBIC_GEOMETRIES = {**LINEAR_GEOMETRIES, "height_scale_1_1_same_size": dict(scales=[1, 1, 1.1, 2])}
# the forms onnxruntime's bicubic kernel takes: 2-D inputs, 4-D resizing axes 2, 3 (also through `axes`)
CUBIC_SHAPES = {
    "2d_up_down": ((5, 6), dict(scales=[1.5, 0.5])),
    "2d_sizes": ((4, 3), dict(sizes=[9, 2])),
    "axes_attribute": ((1, 3, 5, 6), dict(scales=[0.5, 2.5], axes=[2, 3])),
    "from_one_pixel": ((1, 2, 1, 1), dict(sizes=[1, 2, 3, 4])),
    "same_sizes_copy": ((1, 3, 4, 2), dict(scales=[1, 1, 1, 1.2])),
}
CUBIC_COEFFS = {"keys_a-0.75": {}, "a-0.5_exclude_outside": dict(cubic_coeff_a=-0.5, exclude_outside=1),
                "a-0.6123_exclude_outside": dict(cubic_coeff_a=-0.6123, exclude_outside=1),
                "a-0.5": dict(cubic_coeff_a=-0.5), "exclude_outside": dict(exclude_outside=1)}


def cubic_model(shape, coord="half_pixel", **kwargs):
    return resize_model(shape, mode="cubic", opset=19, coordinate_transformation_mode=coord, **kwargs)


@pytest.mark.parametrize("coeffs", ["keys_a-0.75", "a-0.5_exclude_outside"])
@pytest.mark.parametrize("geometry", list(CUBIC_GEOMETRIES), ids=list(CUBIC_GEOMETRIES))
@pytest.mark.parametrize("coord", LINEAR_COORDS)
def test_resize_cubic(coord, geometry, coeffs):
    assert_linear_resize(cubic_model((1, 3, 5, 6), coord, **CUBIC_GEOMETRIES[geometry], **CUBIC_COEFFS[coeffs]),
                         op="resize_cubic")


@pytest.mark.parametrize("coeffs", list(CUBIC_COEFFS), ids=list(CUBIC_COEFFS))
@pytest.mark.parametrize("geometry", ["up2", "down_0_6", "sizes_7x3"])
def test_resize_cubic_after_conv_stays_nhwc(geometry, coeffs):
    """Conv output stored NHWC: height and width are storage axes 1, 2, the channels run innermost."""
    compiled, _ = assert_linear_resize(cubic_model((1, 3, 5, 6), after_conv=True, **GEOMETRIES[geometry],
                                                   **CUBIC_COEFFS[coeffs]), op="resize_cubic")
    step = next(s for s in compiled.plan.steps if getattr(s, "op", "") == "resize_cubic")
    assert compiled.plan.tensors[step.inputs[0]].layout == "NHWC" and step.params.axes == (1, 2)


@pytest.mark.parametrize("coeffs", ["keys_a-0.75", "a-0.5_exclude_outside"])
@pytest.mark.parametrize("case", list(CUBIC_SHAPES), ids=list(CUBIC_SHAPES))
def test_resize_cubic_ranks_and_axes(case, coeffs):
    shape, geometry = CUBIC_SHAPES[case]
    assert_linear_resize(cubic_model(shape, **geometry, **CUBIC_COEFFS[coeffs]), op="resize_cubic")


@given(h=st.integers(1, 8), w=st.integers(1, 8), oh=st.integers(1, 16), ow=st.integers(1, 16),
       coord=st.sampled_from(LINEAR_COORDS), coeffs=st.sampled_from(list(CUBIC_COEFFS)))
def test_resize_cubic_random_sizes(h, w, oh, ow, coord, coeffs):
    assert_linear_resize(cubic_model((1, 2, h, w), coord, sizes=[1, 2, oh, ow], **CUBIC_COEFFS[coeffs]),
                         samples=2, op="resize_cubic")


CUBIC_FLOAT_CASES = {**{k: ((1, 3, 5, 6), v) for k, v in CUBIC_GEOMETRIES.items()}, **CUBIC_SHAPES}


@pytest.mark.parametrize("coeffs", list(CUBIC_COEFFS), ids=list(CUBIC_COEFFS))
@pytest.mark.parametrize("case", list(CUBIC_FLOAT_CASES), ids=list(CUBIC_FLOAT_CASES))
@pytest.mark.parametrize("coord", LINEAR_COORDS)
def test_cubic_taps_and_order_equal_onnxruntimes_float_kernel(coord, case, coeffs):
    """The float32 interpolation alone, on float data: bit for bit onnxruntime's."""
    shape, geometry = CUBIC_FLOAT_CASES[case]
    attrs = CUBIC_COEFFS[coeffs]
    x = rng(3).normal(0, 10, shape).astype(np.float32)
    want = ort_float_resize(x, cubic_model(shape, coord, **geometry, **attrs))
    tables = cubic_tables(shape, want.shape, onnx_scales(shape, want.shape, geometry), coord,
                          attrs.get("cubic_coeff_a", -0.75), bool(attrs.get("exclude_outside", 0)))
    got = kernels.cubic_interpolate(x, tables["axes"], tables["pos"], tables["weight"], tables["divisor"],
                                    want.shape)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


def test_resize_cubic_data_tells_the_weights_apart():
    """The int8 comparisons above can fail: on int8 data, onnxruntime's quantized cubic result changes with
    every other weight choice (linear weights, another cubic_coeff_a, exclude_outside)."""
    shape, geometry = (1, 3, 5, 6), dict(scales=[1, 1, 2, 0.6])
    x = rng(4).integers(-127, 128, shape).astype(np.float32) * np.float32(1 / 127)
    want = ort_float_resize(x, cubic_model(shape, **geometry))
    scale = np.float32(np.abs(want).max() / 127)
    for attrs in (dict(mode="linear"), dict(mode="cubic", cubic_coeff_a=-0.5), dict(mode="cubic", exclude_outside=1)):
        other = ort_float_resize(x, resize_model(shape, opset=19, **geometry, **attrs))
        assert (np.round(other / scale) != np.round(want / scale)).sum() > 10, attrs


@pytest.mark.parametrize("shape,attrs,reason", [
    ((1, 3, 4, 4), dict(mode="cubic", antialias=1), "antialias"),
    ((1, 5, 6, 3), dict(mode="cubic", scales=[1, 2, 2, 1]), "axes 1, 2 of a 4-D input"),
    ((3, 5, 6), dict(mode="cubic", scales=[1, 2, 2]), "3-D input"),
    ((1, 3, 4, 4), dict(mode="cubic", scales=[1, 2, 2, 2]), "4-D input"),
    ((1, 3, 4, 4), dict(mode="cubic", coordinate_transformation_mode="tf_crop_and_resize"), "tf_crop_and_resize"),
    ((1, 3, 4, 4), dict(mode="cubic", keep_aspect_ratio_policy="not_smaller", sizes=[1, 3, 8, 6]),
     "keep_aspect_ratio_policy"),
    ((1, 3, 4, 4), dict(coordinate_transformation_mode="tf_crop_and_resize"), "tf_crop_and_resize"),
    ((1, 3, 4, 4), dict(coordinate_transformation_mode="tf_half_pixel_for_nearest"), "tf_half_pixel_for_nearest"),
    ((1, 3, 4, 4), dict(mode="linear", coordinate_transformation_mode="tf_half_pixel_for_nearest"),
     "defined for nearest mode only"),
    ((1, 3, 4, 4), dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"), "tf_crop_and_resize"),
    ((1, 3, 4, 4), dict(mode="linear", antialias=1), "antialias"),
    ((1, 3, 4, 4), dict(mode="linear", exclude_outside=1), "exclude_outside"),
    ((1, 3, 4, 4), dict(mode="linear", keep_aspect_ratio_policy="not_larger", sizes=[1, 3, 8, 6]),
     "keep_aspect_ratio_policy"),
    ((6,), dict(mode="linear"), "1-D input"),
    ((1, 3, 4, 4), dict(mode="linear", scales=[1, 2, 2, 2]), "4-D input")],
    ids=["cubic_antialias", "cubic_nhwc_axes", "cubic_3d", "cubic_channels", "cubic_crop", "cubic_keep_aspect_ratio", "crop",
         "tf_half_pixel_for_nearest", "linear_tf_half_pixel_for_nearest", "linear_crop",
         "linear_antialias", "linear_exclude_outside", "linear_keep_aspect_ratio", "linear_1d", "linear_channels"])
def test_resize_refuses_what_it_does_not_implement(shape, attrs, reason):
    import onnx2gemmini as o2g
    from onnx2gemmini.graph import NodeView, from_onnx
    from onnx2gemmini.ops.registry import lookup
    attrs = dict(attrs)
    geometry = {"sizes": attrs.pop("sizes")} if "sizes" in attrs else {
        "scales": attrs.pop("scales", [2] if len(shape) == 1 else [1, 1, 2, 2])}
    model = resize_model(shape, opset=19, **geometry, **attrs)
    graph = from_onnx(model)
    view = NodeView(graph.nodes[0], graph)
    assert any(reason in r for r in lookup("Resize", 19).check(view, None))
    with pytest.raises(o2g.O2GError, match=reason):
        o2g.compile(model)
