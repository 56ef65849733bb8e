"""Resize: nearest as an exact int8 move (remap.py), linear and cubic as one float CPU step each.

Both interpolations are separable: per interpolated axis, source positions and float32 weights per output
position (two for linear, four for cubic), computed here exactly as onnxruntime does; the `resize_linear`
and `resize_cubic` kernels combine them in onnxruntime's float32 order, so they match onnxruntime's float
kernels bit for bit. Their output is requantized, so like every float CPU step they are stated with a
1 LSB tolerance.
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


def cubic_axes(scales) -> tuple[int, int] | None:
    """The axes onnxruntime's bicubic kernel (ResizeBiCubic) resizes, height then width: both axes of a 2-D
    input, axes 2, 3 of a 4-D input whose axes 0, 1 keep scale 1; None for anything else."""
    if len(scales) == 2:
        return 0, 1
    if len(scales) == 4 and scales[0] == 1 and scales[1] == 1:
        return 2, 3
    return None


def cubic_coefficients(s: np.ndarray, a: np.float32) -> np.ndarray:
    """onnxruntime's GetCubicCoeffs: Keys' cubic convolution weights of the taps at floor(x) - 1 .. + 2 for
    the fractional offsets `s`, [n, 4], in its float32 operations and order."""
    f = np.float32
    s = np.abs(s.astype(f))
    one, two, three, four, five, eight = (f(v) for v in (1, 2, 3, 4, 5, 8))

    def outer(t):  # the two taps 1 to 2 away
        return ((a * t - five * a) * t + eight * a) * t - four * a

    def inner(t):  # the two taps less than 1 away
        return ((a + two) * t - (a + three)) * t * t + one
    return np.stack([outer(s + one), inner(s), inner(one - s), outer(two - s)], axis=-1).astype(f)


def cubic_taps(n_in: int, n_out: int, scale: np.float32, mode: str, a: np.float32, exclude_outside: bool):
    """onnxruntime's four source positions and float32 weights per output position on one axis
    (ResizeBiCubic), and their divisor: positions floor(x) - 1 .. floor(x) + 2 of the unclamped source
    coordinate x, clamped to the edges; under exclude_outside the positions outside get weight 0 and the
    divisor is the remaining weights' float32 sum, else it is 1 (a scale of 1 keeps positions: offset 0)."""
    f = np.float32
    o = np.arange(n_out, dtype=f)
    src = o if scale == 1 else _source(o, f(scale), n_in, n_out, mode).astype(f)
    start = np.floor(src)
    weight = cubic_coefficients((src - start).astype(f), f(a))
    pos = start.astype(np.int64)[:, None] + np.arange(-1, 3)
    total = np.ones(n_out, f)
    if exclude_outside:
        weight = np.where((pos < 0) | (pos >= n_in), f(0), weight).astype(f)
        total = f(0)
        for k in range(4):  # summed left to right from 0, in float32
            total = (total + weight[:, k]).astype(f)
    return np.clip(pos, 0, n_in - 1), weight, total


def cubic_tables(shape, out, scales, mode: str, a: float, exclude_outside: bool) -> dict:
    """The `resize_cubic` taps in ONNX axis order: the height and width axes, four source positions and
    weights per output position of each (height first), and the height weights' divisors. onnxruntime
    divides each width weight by its divisor before it multiplies a value, but divides each height product
    by the divisor after, so the width weights arrive divided. When no size changes onnxruntime copies the
    input: the taps then hold each position with weights 0, 1, 0, 0, which reproduce it exactly."""
    axes = cubic_axes(scales)
    tables = {"axes": list(axes), "pos": [], "weight": [], "divisor": []}
    for k, axis in enumerate(axes):
        n_in, n_out = shape[axis], out[axis]
        if tuple(out) == tuple(shape):
            pos = np.clip(np.arange(n_out)[:, None] + np.arange(-1, 3), 0, n_in - 1)
            weight, total = np.tile(np.float32([0, 1, 0, 0]), (n_out, 1)), np.ones(n_out, np.float32)
        else:
            pos, weight, total = cubic_taps(n_in, n_out, np.float32(scales[axis]), mode, a, exclude_outside)
        if k == 0:
            tables["divisor"] = [float(t) for t in total]
        else:
            weight = (weight / total[:, None]).astype(np.float32)
        tables["pos"] += pos.reshape(-1).tolist()
        tables["weight"] += [float(w) for w in weight.reshape(-1)]
    return tables


def _cubic_reasons(node: NodeView) -> list[str]:
    """What cubic mode refuses beyond the common limits (reads the constant scales)."""
    scales = _scales(node)
    if cubic_axes(scales) is not None:
        return []
    rank = len(scales)
    if rank == 4 and scales[0] == 1 and scales[3] == 1:
        return ["cubic mode resizing axes 1, 2 of a 4-D input (onnxruntime runs this NHWC form through another "
                "kernel, whose weights and order are not reproduced)"]
    return [f"cubic mode resizing these axes of a {rank}-D input (onnxruntime's bicubic kernel resizes 2-D "
            "inputs and 4-D inputs along axes 2, 3)"]


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
    gemmini = "none: nearest is an exact int8 move, linear and cubic a float32 interpolation on the CPU"
    limits = ("nearest mode (every nearest_mode); linear mode (bilinear/trilinear as onnxruntime: 2-D and "
              "3-D inputs, 4-D resizing axes 2, 3 or 1, 2, 5-D resizing axes 2-4) and cubic mode (bicubic as "
              "onnxruntime: 2-D inputs, 4-D resizing axes 2, 3; cubic_coeff_a, exclude_outside), both "
              "1 LSB tolerance; coordinate_transformation_mode half_pixel, asymmetric, pytorch_half_pixel, "
              "align_corners, half_pixel_symmetric; constant scales or sizes, axes; antialias, "
              "tf_crop_and_resize, tf_half_pixel_for_nearest, keep_aspect_ratio_policy other than stretch, "
              "exclude_outside in linear mode and cubic mode on the NHWC axes 1, 2 are refused")

    def check(self, node, ctx):
        reasons = const_input_reasons(node, 1)
        mode = node.attr("mode", "nearest")
        if mode not in ("nearest", "linear", "cubic"):
            reasons.append(f"mode {mode} (only nearest, linear and cubic)")
        ct = node.attr("coordinate_transformation_mode", "half_pixel")
        if ct not in COORDINATE_MODES:
            reasons.append(f"coordinate_transformation_mode {ct}")
            if ct == "tf_half_pixel_for_nearest" and mode != "nearest":
                reasons[-1] += " (defined for nearest mode only)"
            elif ct == "tf_crop_and_resize":
                reasons[-1] += " (its roi and extrapolation_value are not implemented)"
        if mode == "linear" and not reasons:
            reasons += _linear_reasons(node)
        if mode == "cubic" and not reasons:
            reasons += _cubic_reasons(node)
        if node.attr("antialias", 0):
            reasons.append("antialias (onnxruntime's antialias filters are not reproduced)")
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
        mode = node.attr("mode", "nearest")
        if mode == "nearest":
            return super().lower(node, ctx)
        return self.lower_linear(node, ctx) if mode == "linear" else self.lower_cubic(node, ctx)

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

    def lower_cubic(self, node: NodeView, ctx: LowerContext) -> Lowered:
        """One `resize_cubic` step on the input's own layout (NHWC stays NHWC: the taps are per axis, and
        height stays outside width)."""
        x = ctx.tensor(node.inputs[0])
        shape, out = node.shape(node.inputs[0]), node.shape(node.output)
        tables = cubic_tables(shape, out, _scales(node), node.attr("coordinate_transformation_mode", "half_pixel"),
                              node.attr("cubic_coeff_a", -0.75), bool(node.attr("exclude_outside", 0)))
        storage = NHWC_AXES if x.layout == "NHWC" else tuple(range(len(shape)))
        y = ctx.output(node.output, tuple(out[a] for a in storage), x.layout)
        params = cpu.ResizeCubic(tuple(storage.index(a) for a in tables["axes"]), tuple(tables["pos"]),
                                 tuple(tables["weight"]), tuple(tables["divisor"]), x.scale, y.scale)
        step = CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=params,
                     reason="cubic Resize: float32 interpolation on the CPU (Gemmini has no resampling)")
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
