"""Gemm and MatMul with a constant right operand: one tiled_matmul_auto with an int32 bias row.

Weights are pre-transposed to [K][J] (no transpose_B at run time) and alpha/beta are folded into them.
"""
from __future__ import annotations

import numpy as np

from ..graph import NodeView
from ..plan import Tensor
from .common import matmul, to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler


def _bias_vector(value: np.ndarray | None, j: int) -> np.ndarray | None:
    if value is None:
        return None
    if value.size == 1:
        return np.full(j, float(value.reshape(-1)[0]), np.float32)
    if value.size == j and value.shape[-1] == j:
        return value.reshape(j).astype(np.float32)
    return None


@handler("Gemm", since=1)
class GemmHandler(Handler):
    gemmini = "tiled_matmul_auto (bias row, fused ReLU / Clip(0,hi))"
    limits = "B constant, transA=0, C a constant scalar or row vector"

    def check(self, node, ctx):
        reasons = []
        if node.attr("transA", 0):
            reasons.append("transA=1")
        if not node.is_const(node.input("B")):
            reasons.append("B is not constant (a product of two activations)")
        c = node.input("C")
        if c is not None:
            j = node.shape(node.output)[1]
            if not node.is_const(c) or _bias_vector(node.const(c), j) is None:
                reasons.append("C is not a constant scalar or row vector")
        return reasons

    def float_weights(self, node):
        b = node.const(node.input("B")).astype(np.float32)
        w = (b.T if node.attr("transB", 0) else b) * np.float32(node.attr("alpha", 1.0))
        c = node.input("C")
        bias = _bias_vector(node.const(c), w.shape[1]) if c else None
        if bias is not None:
            bias = bias * np.float32(node.attr("beta", 1.0))
        return np.ascontiguousarray(w), bias

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        a = to_plain(node, ctx, ctx.tensor(node.input("A")), lowered)
        wq = ctx.weight(node.name)
        i, k = a.shape
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        return lowered.add(matmul(node, ctx, a, i, k, y, wq.q, wq.bias, a.scale, wq.scale))


@handler("MatMul", since=1)
class MatMulHandler(Handler):
    gemmini = "tiled_matmul_auto (a following Add of a constant row becomes the bias)"
    limits = "right operand constant and 2-D; left operand any rank (leading dims flattened)"

    def check(self, node, ctx):
        reasons = []
        b = node.input("B")
        if not node.is_const(b):
            reasons.append("right operand is not constant (a product of two activations)")
        elif len(node.shape(b)) != 2:
            reasons.append(f"right operand has rank {len(node.shape(b))}, expected 2")
        if len(node.shape(node.input("A"))) < 2:
            reasons.append("left operand is a vector")
        return reasons

    def float_weights(self, node):
        bias = node.fused.get("bias")
        return node.const(node.input("B")).astype(np.float32), (None if bias is None else node.const(bias))

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        a: Tensor = to_plain(node, ctx, ctx.tensor(node.input("A")), lowered)
        wq = ctx.weight(node.name)
        k = a.shape[-1]
        i = int(np.prod(a.shape[:-1]))
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        return lowered.add(matmul(node, ctx, a, i, k, y, wq.q, wq.bias, a.scale, wq.scale))
