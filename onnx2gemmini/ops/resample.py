"""Slice, Pad and nearest Resize: exact int8 moves on the CPU, each one per-axis index map ("remap").

All three choose, independently per axis, which input position every output position reads (or -1:
the pad value), so one kernel runs them on any layout: for an NHWC tensor the maps are simply put in
NHWC axis order, and the output stays NHWC with no transpose. The values move unchanged, so the
output shares the input's scale and the result equals onnxruntime's bit for bit (tolerance 0).

Linear Resize is separable too: per interpolated axis, two source positions and two float32 weights
per output position, computed here exactly as onnxruntime does; the `resize_linear` kernel combines
them in onnxruntime's float32 order, so it matches onnxruntime's float kernel bit for bit. Its output
is requantized, so like every float CPU step it is stated with a 1 LSB tolerance.
"""
from __future__ import annotations

import numpy as np

from ..graph import NodeView
from ..numerics import quantize_value
from ..plan import CpuOp, Tensor
from .context import LowerContext
from .registry import Handler, Lowered, handler

NHWC_AXES = (0, 2, 3, 1)


def lower_remap(node: NodeView, ctx: LowerContext, x: Tensor, maps: list[list[int]], value: int,
                reason: str, temp: str | None = None, tolerance: int = 0) -> tuple[Lowered, Tensor]:
    """One `remap` step: `maps` per ONNX axis of x; NHWC inputs get NHWC maps and an NHWC output.

    The output is the node's output, or with `temp` a node-private buffer (ConvTranspose's input)."""
    if x.layout == "NHWC":
        maps = [maps[a] for a in NHWC_AXES]
    shape = tuple(len(m) for m in maps)
    if temp:
        y = ctx.temp(node.name, temp, shape, x.scale, layout=x.layout)
    else:
        y = ctx.output(node.output, shape, x.layout)
    index = [int(i) for m in maps for i in m]
    step = CpuOp(node.name, op="remap", inputs=(x.id,), outputs=(y.id,), params={"index": index, "value": int(value)},
                 reason=reason, tolerance=tolerance)
    return Lowered([step], [y]), y


class _Move(Handler):
    gemmini = "none: an exact int8 move on the CPU"
    output_scale = "input"

    def maps(self, node: NodeView) -> list[list[int]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def value(self, node: NodeView, scale: float) -> int:
        return 0

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        x = ctx.tensor(node.inputs[0])
        lowered, _ = lower_remap(node, ctx, x, self.maps(node), self.value(node, x.scale),
                                 f"{node.op_type}: an int8 move on the CPU")
        return lowered


def _const_inputs(node: NodeView, first: int) -> list[str]:
    """Non-constant parameter inputs, and an empty output (no buffer to move into)."""
    reasons = [f"non-constant input '{t}'" for t in node.inputs[first:] if t and not node.is_const(t)]
    return reasons + (["empty output"] if 0 in node.shape(node.output) else [])


@handler("Slice", since=13)
class SliceHandler(_Move):
    limits = "constant starts/ends/axes/steps (any steps, negative and clamped values)"

    def check(self, node, ctx):
        return _const_inputs(node, 1)

    def maps(self, node):
        shape = node.shape(node.inputs[0])
        maps = [list(range(n)) for n in shape]
        starts, ends = (np.asarray(node.const(node.inputs[i]), np.int64).tolist() for i in (1, 2))
        axes = node.const(node.input("axes")) if node.input("axes") else range(len(starts))
        steps = node.const(node.input("steps")) if node.input("steps") else [1] * len(starts)
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis = int(axis) % len(shape)
            maps[axis] = list(range(*slice(int(start), int(end), int(step)).indices(shape[axis])))
        return maps


def _pad_map(n: int, before: int, after: int, mode: str) -> list[int]:
    out = []
    for o in range(-before, n + after):
        if 0 <= o < n:
            out.append(o)
        elif mode == "constant":
            out.append(-1)
        elif mode == "edge":
            out.append(min(max(o, 0), n - 1))
        elif mode == "wrap":
            out.append(o % n)
        else:  # reflect (without repeating the edge), as numpy.pad
            period = 2 * (n - 1)
            r = abs(o) % period if period else 0
            out.append(r if r < n else period - r)
    return out


@handler("Pad", since=13)
class PadHandler(_Move):
    limits = ("constant pads, axes and pad value (quantized to the input's scale); modes constant, reflect, "
              "edge, wrap")

    def check(self, node, ctx):
        reasons = _const_inputs(node, 1)
        mode = node.attr("mode", "constant")
        if mode not in ("constant", "reflect", "edge", "wrap"):
            reasons.append(f"mode {mode}")
        shape = node.shape(node.inputs[0])
        if mode != "constant" and not reasons and any(
                n == 0 for n, (b, a) in zip(shape, self._pads(node)) if b or a):
            reasons.append("non-constant padding of an empty axis")
        return reasons

    @staticmethod
    def _pads(node: NodeView) -> list[tuple[int, int]]:
        rank = len(node.shape(node.inputs[0]))
        pads = np.asarray(node.const(node.inputs[1]), np.int64).tolist()
        axes_name = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else None
        axes = [int(a) % rank for a in node.const(axes_name)] if axes_name else list(range(rank))
        k = len(axes)
        result = [(0, 0)] * rank
        for i, a in enumerate(axes):
            result[a] = (pads[i], pads[i + k])
        return result

    def maps(self, node):
        mode = node.attr("mode", "constant")
        return [_pad_map(n, b, a, mode) for n, (b, a) in zip(node.shape(node.inputs[0]), self._pads(node))]

    def value(self, node, scale):
        v = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        return quantize_value(float(np.asarray(node.const(v)).reshape(-1)[0]), scale) if v else 0


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
class ResizeHandler(_Move):
    gemmini = "none: nearest is an exact int8 move, linear a float32 interpolation on the CPU"
    limits = ("nearest mode (every nearest_mode) and linear mode (bilinear/trilinear as onnxruntime: 2-D and "
              "3-D inputs, 4-D resizing axes 2, 3 or 1, 2, 5-D resizing axes 2-4; 1 LSB tolerance); "
              "coordinate_transformation_mode half_pixel, asymmetric, pytorch_half_pixel, align_corners, "
              "half_pixel_symmetric; constant scales or sizes, axes; cubic mode, antialias, exclude_outside, "
              "tf_crop_and_resize, tf_half_pixel_for_nearest and keep_aspect_ratio_policy are refused")

    def check(self, node, ctx):
        reasons = _const_inputs(node, 1)
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
        params = {**tables, "axes": [storage.index(a) for a in tables["axes"]], "out_shape": list(y.shape),
                  "in_scale": x.scale, "out_scale": y.scale}
        step = CpuOp(node.name, op="resize_linear", inputs=(x.id,), outputs=(y.id,), params=params,
                     reason="linear Resize: float32 interpolation on the CPU (Gemmini has no resampling)",
                     tolerance=1)
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
