"""LRN across channels: a float kernel on the CPU (1 LSB tolerance)."""
from __future__ import annotations

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
        params = {"axis": axis, "size": int(node.attr("size")), "alpha": float(node.attr("alpha", 1e-4)),
                  "beta": float(node.attr("beta", 0.75)), "bias": float(node.attr("bias", 1.0)),
                  "in_scale": x.scale, "out_scale": y.scale}
        lowered.steps.append(CpuOp(node.name, op="lrn", inputs=(x.id,), outputs=(y.id,), params=params,
                                   reason="local response normalization: float kernel on the CPU", tolerance=1))
        return lowered
