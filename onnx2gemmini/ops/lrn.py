"""LRN across channels: a float kernel on the CPU (1 LSB tolerance)."""
from __future__ import annotations

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .common import channels_last
from .context import LowerContext
from .registry import Handler, Lowered, handler


@handler("LRN", since=1)
class LrnHandler(Handler):
    gemmini = "none"
    limits = "float kernel on the CPU across channels (1 LSB tolerance)"

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x, axis = channels_last(node, ctx, lowered)
        y = ctx.output(node.output, x.shape, x.layout)
        lowered.tensors.append(y)
        params = cpu.Lrn(axis, int(node.attr("size")), float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)),
                         float(node.attr("bias", 1.0)), x.scale, y.scale)
        lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=params,
                                   reason="local response normalization: float kernel on the CPU"))
        return lowered
