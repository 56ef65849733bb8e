"""ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceL2: the mean over a square feature map (the global pooling of
ShuffleNetV2, MNASNet and most `x.mean([2, 3])` heads) is Gemmini's global average; every other reduction
is an exact int8 CPU kernel (cpu.Reduce)."""
from __future__ import annotations

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp, GlobalAverage
from .common import to_nhwc, to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler

MAX_REDUCED = 1 << 24  # values summed into one output: the int32 sum cannot overflow, float32 holds it exactly
MAX_SQUARED = (1 << 31) // (128 * 128)  # squares summed into one output (ReduceL2) within int32


class _Reduce(Handler):
    kind = ""
    axes_input = False  # opset >= 18 (ReduceSum >= 13): the axes are the second input, not an attribute

    def axes(self, node: NodeView) -> tuple[int, ...] | None:
        """The reduced axes, normalized and sorted; None when the axes input is not constant."""
        rank = len(node.shape(node.inputs[0]))
        if self.axes_input:
            name = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] else None
            if name is not None and not node.is_const(name):
                return None
            given = [] if name is None else [int(a) for a in node.const(name).reshape(-1)]
        else:
            given = list(node.attr("axes", []) or [])
        if not given:
            return () if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
        return tuple(sorted({a % rank for a in given}))

    def check(self, node, ctx):
        axes = self.axes(node)
        if axes is None:
            return ["the axes input is not constant"]
        shape = node.shape(node.inputs[0])
        count = 1
        for a in axes:
            count *= shape[a]
        limit = MAX_SQUARED if self.kind == "l2" else MAX_REDUCED
        return [] if count <= limit else [f"{count:,} values reduced into one (at most {limit:,})"]

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = ctx.tensor(node.inputs[0])
        axes = self.axes(node)
        out_shape = node.shape(node.output)
        if not axes:  # noop_with_empty_axes: the input itself
            x = to_plain(node, ctx, x, lowered)
            lowered.tensors.append(ctx.output(node.output, out_shape, "plain", view_of=x.id))
            return lowered
        onnx_shape = x.shape if x.layout != "NHWC" else tuple(x.shape[i] for i in (0, 3, 1, 2))
        if self.kind == "mean" and len(onnx_shape) == 4 and axes == (2, 3) and onnx_shape[2] == onnx_shape[3]:
            return self._global_average(node, ctx, x, out_shape, lowered)
        x = to_plain(node, ctx, x, lowered)
        kept = tuple(a for a in range(len(x.shape)) if a not in axes)
        start = axes[0]
        if axes != tuple(range(axes[0], axes[-1] + 1)):  # apart: move them last (the kept axes keep their order)
            start = len(kept)
            moved = ctx.temp(node.name, "moved", tuple(x.shape[a] for a in kept + axes), x.scale)
            lowered.tensors.append(moved)
            lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(moved.id,),
                                       params=cpu.Transpose(kept + axes),
                                       reason="the reduced axes are not adjacent: moved last first"))
            x = moved
        y = ctx.output(node.output, out_shape)
        lowered.tensors.append(y)
        params = cpu.Reduce(self.kind, start, start + len(axes), x.scale, y.scale)
        reason = ("Gemmini averages square H x W maps only" if self.kind == "mean"
                  else f"Gemmini has no {self.kind.upper() if self.kind == 'l2' else self.kind} reduction")
        lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=params, reason=reason))
        return lowered

    def _global_average(self, node, ctx, x, out_shape, lowered) -> Lowered:
        """The mean over H and W as tiled_global_average_auto; (N, 1, 1, C) NHWC is the output's byte order
        whether or not the reduced axes are kept."""
        x = to_nhwc(node, ctx, x, lowered)
        n, h, _, c = x.shape
        pooled = ctx.temp(node.name, "mean", (n, 1, 1, c), x.scale, layout="NHWC")
        lowered.tensors.append(pooled)
        lowered.steps.append(GlobalAverage(node.name, input=x.id, output=pooled.id, batches=n, channels=c, dim=h))
        lowered.tensors.append(ctx.output(node.output, out_shape, "plain", view_of=pooled.id))
        return lowered


def _register(op: str, kind: str, input_since: int) -> None:
    exact = "exact" if kind in ("max", "min") else "1 LSB tolerance (onnxruntime sums the dequantized floats)"
    attrs = {"kind": kind, "__doc__": f"ONNX {op}.",
             "gemmini": ("tiled_global_average_auto over the H and W axes of a square map" if kind == "mean"
                         else "none: an exact int8 kernel on the CPU"),
             "limits": f"{'other axes ' if kind == 'mean' else ''}on the CPU; constant axes; {exact}",
             # a mean, largest or smallest value stays within the input's range; a sum does not
             "output_scale": "calibrated" if kind in ("sum", "l2") else "input"}
    handler(op, since=1)(type(f"{op}Handler", (_Reduce,), dict(attrs)))
    handler(op, since=input_since)(type(f"{op}AxesInputHandler", (_Reduce,), {**attrs, "axes_input": True}))


_register("ReduceMean", "mean", 18)
_register("ReduceSum", "sum", 13)
_register("ReduceMax", "max", 18)
_register("ReduceMin", "min", 18)
_register("ReduceL2", "l2", 18)
