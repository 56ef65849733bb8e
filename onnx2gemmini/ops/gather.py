"""Gather with constant indices: an exact int8 copy on the CPU."""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler


@handler("Gather", since=13)
class GatherHandler(Handler):
    gemmini = "none: an int8 copy on the CPU"
    limits = "constant indices"
    output_scale = "input"

    def check(self, node, ctx):
        return [] if node.is_const(node.inputs[1]) else ["non-constant indices"]

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_plain(node, ctx, ctx.tensor(node.inputs[0]), lowered)
        indices = np.asarray(node.const(node.inputs[1]), np.int64)
        axis = node.attr("axis", 0) % len(x.shape)
        indices = np.where(indices < 0, indices + x.shape[axis], indices)
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        params = cpu.Gather(axis, tuple(int(i) for i in indices.reshape(-1)), tuple(indices.shape))
        lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=params,
                                   reason="Gather: an int8 copy"))
        return lowered
