"""Slice, Pad and nearest Resize: exact int8 moves on the CPU, each one per-axis index map ("remap").

All three choose, independently per axis, which input position every output position reads (or -1:
the pad value), so one kernel runs them on any layout: for an NHWC tensor the maps are simply put in
NHWC axis order, and the output stays NHWC with no transpose. The values move unchanged, so the
output shares the input's scale and the result equals onnxruntime's bit for bit (tolerance 0).
"""
from __future__ import annotations

import numpy as np

from ..graph import NodeView
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


def quantized(value: float, scale: float) -> int:
    """A float constant as QuantizeLinear stores it at `scale` (0 stays exactly 0)."""
    return int(np.clip(np.rint(np.float32(value) / np.float32(scale)), -128, 127))


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
        return quantized(float(np.asarray(node.const(v)).reshape(-1)[0]), scale) if v else 0


def _source(o: np.ndarray, scale: np.float32, n_in: int, n_out: int, mode: str) -> np.ndarray:
    """onnxruntime's original coordinate of output positions `o`, in float32 (upsamplebase.h)."""
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
    # half_pixel_symmetric
    adjustment = f(n_out) / (scale * f(n_in))
    offset = f(n_in) / f(2) * (f(1) - adjustment)
    return offset + (o + half) / scale - half


def _nearest(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.where(x == np.trunc(x) + np.float32(0.5), np.floor(x), np.where(x < 0, -np.floor(-x + 0.5),
                                                                               np.floor(x + 0.5)))
    if mode == "round_prefer_ceil":
        return np.where(x < 0, -np.floor(-x + 0.5), np.floor(x + 0.5))  # std::round: half away from zero
    return np.floor(x) if mode == "floor" else np.ceil(x)


# tf_half_pixel_for_nearest: onnxruntime (the golden) no longer runs it; tf_crop_and_resize needs roi
COORDINATE_MODES = ("half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners", "half_pixel_symmetric")


@handler("Resize", since=13)
class ResizeHandler(_Move):
    limits = ("nearest mode (every nearest_mode; coordinate_transformation_mode half_pixel, asymmetric, "
              "pytorch_half_pixel, align_corners, half_pixel_symmetric), "
              "constant scales or sizes, axes; linear and cubic modes, antialias and keep_aspect_ratio_policy "
              "are refused")

    def check(self, node, ctx):
        reasons = _const_inputs(node, 1)
        if node.attr("mode", "nearest") != "nearest":
            reasons.append(f"mode {node.attr('mode')} (only nearest)")
        ct = node.attr("coordinate_transformation_mode", "half_pixel")
        if ct not in COORDINATE_MODES:
            reasons.append(f"coordinate_transformation_mode {ct}")
        if node.attr("antialias", 0):
            reasons.append("antialias")
        if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            reasons.append(f"keep_aspect_ratio_policy {node.attr('keep_aspect_ratio_policy')}")
        return reasons

    def maps(self, node):
        shape, out = node.shape(node.inputs[0]), node.shape(node.output)
        scales_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        scales = node.const(scales_name) if scales_name else None
        if scales is None or scales.size == 0:
            scales = np.float32(out) / np.float32(shape)
        elif node.attr("axes"):  # scales of the listed axes only; the others keep scale 1
            full = np.ones(len(shape), np.float32)
            full[[int(a) % len(shape) for a in node.attr("axes")]] = scales
            scales = full
        ct = node.attr("coordinate_transformation_mode", "half_pixel")
        mode = node.attr("nearest_mode", "round_prefer_floor")
        maps = []
        for n_in, n_out, s in zip(shape, out, np.asarray(scales, np.float32)):
            src = _source(np.arange(n_out, dtype=np.float32), np.float32(s), n_in, n_out, ct)
            maps.append(np.clip(_nearest(src.astype(np.float32), mode), 0, n_in - 1).astype(int).tolist())
        return maps
