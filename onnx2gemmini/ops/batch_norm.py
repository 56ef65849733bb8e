"""A BatchNormalization not folded into a conv (passes/bn_fold.py folds those): pre-activation DenseNet
blocks, BN after a concat. A per-channel float affine map on the CPU (1 LSB tolerance)."""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .common import channels_last
from .context import LowerContext
from .registry import Handler, Lowered, handler


@handler("BatchNormalization", since=9)
class BatchNormHandler(Handler):
    gemmini = "folded into the preceding conv; otherwise none"
    limits = ("standalone: one per-channel float affine map on the CPU with a fused ReLU / Clip(0,hi), a "
              "following Mul/Add by per-channel constants merged into it (1 LSB tolerance)")

    def check(self, node, ctx):
        reasons = [] if all(node.is_const(t) for t in node.inputs[1:5]) else ["non-constant statistics"]
        if len(node.outputs) > 1 and any(node.used(o) for o in node.outputs[1:]):
            reasons.append("training outputs")
        return reasons

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x, axis = channels_last(node, ctx, lowered)
        scale, shift, mean, var = (node.const(t).astype(np.float64) for t in node.inputs[1:5])
        a = scale / np.sqrt(var + float(node.attr("epsilon", 1e-5)))
        b = shift - mean * a
        a_id, b_id = ctx.const_id(node.name, "mul"), ctx.const_id(node.name, "add")
        lowered.constants[a_id], lowered.constants[b_id] = a.astype(np.float32), b.astype(np.float32)
        y = ctx.output(node.output, x.shape, x.layout)
        lowered.tensors.append(y)
        lowered.steps.append(CpuOp(node.name, inputs=(x.id, a_id, b_id), outputs=(y.id,),
                                   params=cpu.Affine(axis, x.scale, y.scale, node.fused.relu),
                                   reason="batch normalization not after a conv: per-channel affine on the CPU"))
        return lowered
