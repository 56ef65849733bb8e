"""Transpose: an exact int8 move on the CPU."""
from __future__ import annotations

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler


@handler("Transpose", since=1)
class TransposeHandler(Handler):
    gemmini = "none: an int8 move on the CPU"
    limits = "any permutation"
    output_scale = "input"

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_plain(node, ctx, ctx.tensor(node.inputs[0]), lowered)
        rank = len(x.shape)
        perm = tuple(node.attr("perm") or reversed(range(rank)))
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=cpu.Transpose(perm),
                                   reason="ONNX Transpose: an int8 move"))
        return lowered
