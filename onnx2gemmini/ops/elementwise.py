"""Add/Sum of two activations (Gemmini's resadd), standalone Relu / Clip as int8 CPU kernels, and PRelu.

resadd saturates each scaled input to int8 before adding, so both input scales are kept <= 1:
A_scale = sa/m, B_scale = sb/m, C_scale = m/so with m = max(sa, sb) (spec/gemmini.md §2.8).
"""
from __future__ import annotations

import numpy as np

from ..graph import NodeView
from ..passes.fuse_activation import clip_bounds
from ..plan import CpuOp, Resadd
from ..numerics import quantize_value, resadd_scales
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


class _UnaryInt8(Handler):
    output_scale = "input"

    def bounds(self, node: NodeView, scale: float) -> tuple[int, int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        x = ctx.tensor(node.inputs[0])
        y = ctx.output(node.output, x.shape, x.layout)
        lo, hi = self.bounds(node, x.scale)
        step = CpuOp(node.name, op="clip", inputs=(x.id,), outputs=(y.id,), params={"lo": lo, "hi": hi},
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


class _CpuBinary(Handler):
    gemmini = "none: a float kernel on the CPU (broadcasting, constants)"
    limits = "1 LSB tolerance vs onnxruntime"

    def check(self, node, ctx):
        return ["both operands constant"] if all(node.is_const(t) for t in node.inputs) else []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        return lower_binary(node, ctx, f"{node.op_type}: Gemmini has no elementwise {node.op_type.lower()}")


for _op in ("Sub", "Mul", "Div"):
    handler(_op, since=7)(type(f"{_op}Handler", (_CpuBinary,), {}))


@handler("PRelu", since=9)
class PReluHandler(Handler):
    gemmini = "none: a float kernel on the CPU"
    limits = "constant slope (scalar, per channel or any shape broadcasting to the input); 1 LSB tolerance"

    def check(self, node, ctx):
        return [] if node.is_const(node.inputs[1]) else ["non-constant slope"]

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        return lower_binary(node, ctx, "PRelu: Gemmini has no parametric ReLU; x < 0 ? x * slope : x in float32")
