"""Add/Sum of two activations: Gemmini's resadd, else a float kernel on the CPU (binary.py).

resadd saturates each scaled input to int8 before adding, so both input scales are kept <= 1:
A_scale = sa/m, B_scale = sb/m, C_scale = m/so with m = max(sa, sb) (numerics.resadd_scales).
"""
from __future__ import annotations

import numpy as np

from ..graph import NodeView
from ..numerics import resadd_scales
from ..plan import Resadd
from .binary import lower_binary
from .context import LowerContext
from .registry import Handler, Lowered, handler


def resadd_reasons(node: NodeView) -> list[str]:
    """Why this Add cannot be a Gemmini resadd (it then runs as a float kernel on the CPU)."""
    reasons = []
    if any(node.is_const(t) for t in node.inputs):
        reasons.append("a constant operand not fused into a bias")
    if len({node.shape(t) for t in node.inputs}) != 1:
        reasons.append("broadcasting")
    return reasons


class _ResaddHandler(Handler):
    gemmini = "tiled_resadd_auto (fused ReLU)"
    limits = "two activations of one shape; broadcasting or constant operands: float kernel on the CPU"

    def check(self, node, ctx):
        if len(node.inputs) != 2:
            return [f"{len(node.inputs)} operands (Gemmini adds two)"]
        if all(node.is_const(t) for t in node.inputs):
            return ["both operands constant"]
        return []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        reasons = resadd_reasons(node)
        a, b = (ctx.tensor(t) if not node.is_const(t) else None for t in node.inputs)
        if not reasons and a.layout != b.layout:
            reasons.append("operands in different layouts")
        if reasons:
            return lower_binary(node, ctx, f"add with {', '.join(reasons)}: Gemmini's resadd takes two "
                                           f"activations of one shape")
        y = ctx.output(node.output, a.shape, a.layout)
        i, j = int(np.prod(a.shape[:-1])), a.shape[-1]
        sa, sb, sc = resadd_scales(a.scale, b.scale, y.scale)
        step = Resadd(node.name, I=i, J=j, A_scale=sa, B_scale=sb, C_scale=sc, A=a.id, B=b.id, C=y.id,
                      relu=node.fused.relu)
        return Lowered([step], [y])


@handler("Add", since=1)
class AddHandler(_ResaddHandler):
    pass


@handler("Sum", since=1)
class SumHandler(_ResaddHandler):
    pass
