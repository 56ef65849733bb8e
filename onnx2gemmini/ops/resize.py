"""Resize: nearest as an exact int8 move (remap.py), linear as one float CPU step.

Linear Resize is separable: per interpolated axis, two source positions and two float32 weights per
output position, computed here exactly as onnxruntime does; the `resize_linear` kernel combines them in
onnxruntime's float32 order, so it matches onnxruntime's float kernel bit for bit. Its output is
requantized, so like every float CPU step it is stated with a 1 LSB tolerance.
"""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .context import LowerContext
from .registry import Lowered, handler
from .remap import NHWC_AXES, RemapMove, const_input_reasons

def _source(o: np.ndarray, scale: np.float32, n_in: int, n_out: int, mode: str) -> np.ndarray:
    """onnxruntime's original coordinate of output positions `o`, as float32 (upsamplebase.h)."""
    f = np.float32
    half = f(0.5)
    if mode == "half_pixel":
        return (o + half) / scale - half
    if mode == "asymmetric":
        return o / scale
    if mode == "pytorch_half_pixel":
        return (o + half) / scale - half if n_out > 1 else np.zeros_like(o)
    if mode == "align_corners":
        return o * f(n_in - 1) / f(n_out - 1) if n_out > 1 else np.zeros_like(o)
    # half_pixel_symmetric: float32 offset, then double arithmetic (onnxruntime's 0.5 is a double literal)
    adjustment = f(n_out) / (scale * f(n_in))
    offset = f(n_in) / f(2) * (f(1) - adjustment)
    return (np.float64(offset) + (o.astype(np.float64) + 0.5) / np.float64(scale) - 0.5).astype(f)


def _nearest(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.where(x == np.trunc(x) + np.float32(0.5), np.floor(x), np.where(x < 0, -np.floor(-x + 0.5),
                                                                               np.floor(x + 0.5)))
    if mode == "round_prefer_ceil":
        return np.where(x < 0, -np.floor(-x + 0.5), np.floor(x + 0.5))  # std::round: half away from zero
    return np.floor(x) if mode == "floor" else np.ceil(x)


# tf_half_pixel_for_nearest: onnxruntime (the golden) no longer runs it; tf_crop_and_resize needs roi
COORDINATE_MODES = ("half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners", "half_pixel_symmetric")


def _scales(node: NodeView) -> np.ndarray:
    """onnxruntime's float32 scale per axis: the scales input (`axes` lists the axes it covers, the
    others keep 1), or output size / input size."""
    shape, out = node.shape(node.inputs[0]), node.shape(node.output)
    scales_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    scales = node.const(scales_name) if scales_name else None
    if scales is None or scales.size == 0:
        return np.float32(out) / np.float32(shape)
    if node.attr("axes"):
        full = np.ones(len(shape), np.float32)
        full[[int(a) % len(shape) for a in node.attr("axes")]] = scales
        return full
    return np.asarray(scales, np.float32)


def linear_axes(scales) -> tuple[int, ...] | None:
    """The axes onnxruntime interpolates in linear mode (bilinear or trilinear), outermost first;
    None for the ranks and scales it refuses (the other axes must keep scale 1)."""
    def one(*axes):
        return all(scales[a] == 1 for a in axes)
    rank = len(scales)
    if rank in (2, 3):
        return tuple(range(rank))
    if rank == 4 and one(0, 1):
        return 2, 3
    if rank == 4 and one(0, 3):
        return 1, 2
    if rank == 5 and one(0, 1):
        return 2, 3, 4
    return None


def linear_taps(n_in: int, n_out: int, scale: np.float32, mode: str):
    """onnxruntime's two source positions and float32 weights per output position on one axis
    (SetupUpsampleBilinear): a scale of 1 keeps positions; an edge position gets weights 0.5, 0.5."""
    f = np.float32
    o = np.arange(n_out, dtype=f)
    src = o if scale == 1 else _source(o, f(scale), n_in, n_out, mode).astype(f)
    src = np.maximum(f(0), np.minimum(src, f(n_in - 1)))
    lo = np.minimum(src.astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    w_hi, w_lo = np.abs(src - lo.astype(f)), np.abs(src - hi.astype(f))
    w_hi[lo == hi], w_lo[lo == hi] = f(0.5), f(0.5)
    return lo, hi, w_lo, w_hi


def _linear_reasons(node: NodeView) -> list[str]:
    """What linear mode refuses beyond the common limits (reads the constant scales)."""
    reasons = ["exclude_outside=1 (a cubic and antialias option)"] if node.attr("exclude_outside", 0) else []
    if linear_axes(_scales(node)) is None:
        rank = len(node.shape(node.inputs[0]))
        reasons.append(f"linear mode resizing these axes of a {rank}-D input (onnxruntime interpolates 2-D and "
                       "3-D inputs, 4-D inputs along axes 2, 3 or 1, 2, and 5-D inputs along axes 2 to 4)")
    return reasons


@handler("Resize", since=13)
class ResizeHandler(RemapMove):
    gemmini = "none: nearest is an exact int8 move, linear a float32 interpolation on the CPU"
    limits = ("nearest mode (every nearest_mode) and linear mode (bilinear/trilinear as onnxruntime: 2-D and "
              "3-D inputs, 4-D resizing axes 2, 3 or 1, 2, 5-D resizing axes 2-4; 1 LSB tolerance); "
              "coordinate_transformation_mode half_pixel, asymmetric, pytorch_half_pixel, align_corners, "
              "half_pixel_symmetric; constant scales or sizes, axes; cubic mode, antialias, exclude_outside, "
              "tf_crop_and_resize, tf_half_pixel_for_nearest and keep_aspect_ratio_policy are refused")

    def check(self, node, ctx):
        reasons = const_input_reasons(node, 1)
        mode = node.attr("mode", "nearest")
        if mode not in ("nearest", "linear"):
            reasons.append(f"mode {mode} (only nearest and linear)")
        ct = node.attr("coordinate_transformation_mode", "half_pixel")
        if ct not in COORDINATE_MODES:
            reasons.append(f"coordinate_transformation_mode {ct}")
            if ct == "tf_half_pixel_for_nearest" and mode == "linear":
                reasons[-1] += " (defined for nearest mode only)"
        if mode == "linear" and not reasons:
            reasons += _linear_reasons(node)
        if node.attr("antialias", 0):
            reasons.append("antialias")
        if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            reasons.append(f"keep_aspect_ratio_policy {node.attr('keep_aspect_ratio_policy')}")
        return reasons

    def maps(self, node):
        shape, out = node.shape(node.inputs[0]), node.shape(node.output)
        ct = node.attr("coordinate_transformation_mode", "half_pixel")
        mode = node.attr("nearest_mode", "round_prefer_floor")
        maps = []
        for n_in, n_out, s in zip(shape, out, _scales(node)):
            src = _source(np.arange(n_out, dtype=np.float32), np.float32(s), n_in, n_out, ct)
            maps.append(np.clip(_nearest(src.astype(np.float32), mode), 0, n_in - 1).astype(int).tolist())
        return maps

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        if node.attr("mode", "nearest") == "nearest":
            return super().lower(node, ctx)
        return self.lower_linear(node, ctx)

    def lower_linear(self, node: NodeView, ctx: LowerContext) -> Lowered:
        """One `resize_linear` step on the input's own layout (NHWC stays NHWC: the taps are per axis)."""
        x = ctx.tensor(node.inputs[0])
        shape, out = node.shape(node.inputs[0]), node.shape(node.output)
        ct = node.attr("coordinate_transformation_mode", "half_pixel")
        tables = linear_tables(shape, out, _scales(node), ct)
        storage = NHWC_AXES if x.layout == "NHWC" else tuple(range(len(shape)))
        y = ctx.output(node.output, tuple(out[a] for a in storage), x.layout)
        params = cpu.ResizeLinear(tuple(storage.index(a) for a in tables["axes"]), *(tuple(tables[k]) for k in
                                  ("lo", "hi", "w_lo", "w_hi")), x.scale, y.scale)
        step = CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=params,
                     reason="linear Resize: float32 interpolation on the CPU (Gemmini has no resampling)")
        return Lowered([step], [y])


def linear_tables(shape, out, scales, mode: str) -> dict:
    """The `resize_linear` taps in ONNX axis order: interpolated axes, and per output position of each
    their source positions and weights. No axis when no size changes: onnxruntime copies the input."""
    axes = linear_axes(scales) if tuple(out) != tuple(shape) else ()
    tables = {"axes": list(axes), "lo": [], "hi": [], "w_lo": [], "w_hi": []}
    for a in axes:
        lo, hi, w_lo, w_hi = linear_taps(shape[a], out[a], np.float32(scales[a]), mode)
        tables["lo"] += lo.tolist()
        tables["hi"] += hi.tolist()
        tables["w_lo"] += [float(w) for w in w_lo]
        tables["w_hi"] += [float(w) for w in w_hi]
    return tables
