"""Softmax: a float kernel on the CPU (dequantize, softmax, quantize): Gemmini's int8 configs have none."""
from __future__ import annotations

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler


@handler("Softmax", since=13)
class SoftmaxHandler(Handler):
    gemmini = "none (only configs with normalizations have a softmax unit)"
    limits = "float32 on the CPU, 1 LSB tolerance vs onnxruntime"

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_plain(node, ctx, ctx.tensor(node.inputs[0]), lowered)
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        rank = len(x.shape)
        axis = node.attr("axis", -1) % rank
        lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,),
                                   params=cpu.Softmax(axis, x.scale, y.scale),
                                   reason="Gemmini's int8 configs have no softmax unit"))
        return lowered
