"""Standalone Relu and Clip (not fused into a Gemmini call): exact int8 clips on the CPU."""
from __future__ import annotations

from .. import cpu
from ..graph import NodeView
from ..numerics import quantize_value
from ..passes.fuse_activation import clip_bounds
from ..plan import CpuOp
from .context import LowerContext
from .registry import Handler, Lowered, handler


class _UnaryInt8(Handler):
    output_scale = "input"

    def bounds(self, node: NodeView, scale: float) -> tuple[int, int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        x = ctx.tensor(node.inputs[0])
        y = ctx.output(node.output, x.shape, x.layout)
        lo, hi = self.bounds(node, x.scale)
        step = CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=cpu.Clip(lo, hi),
                     reason=f"standalone {node.op_type} (not after a Gemmini matmul/conv/resadd)")
        return Lowered([step], [y])


@handler("Relu", since=1)
class ReluHandler(_UnaryInt8):
    gemmini = "fused into the preceding matmul/conv/resadd"
    limits = "otherwise an int8 max(x, 0) on the CPU"

    def bounds(self, node, scale):
        return 0, 127


@handler("Clip", since=1)
class ClipHandler(_UnaryInt8):
    gemmini = "Clip(0, hi) fused into the preceding matmul/conv (output scale hi/127)"
    limits = "otherwise an exact int8 clip on the CPU; bounds must be constant"

    def check(self, node, ctx):
        return [] if self._bounds(node) is not None else ["non-constant clip bounds"]

    @staticmethod
    def _bounds(node: NodeView):
        return clip_bounds(node.attrs, node.inputs, node.const)

    def bounds(self, node, scale):
        lo, hi = self._bounds(node)
        qlo = -128 if lo == float("-inf") else quantize_value(lo, scale)
        qhi = 127 if hi == float("inf") else quantize_value(hi, scale)
        return qlo, qhi
