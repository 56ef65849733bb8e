"""Gemm and MatMul with a constant right operand: one tiled_matmul_auto with an int32 bias row.

Weights are pre-transposed to [K][J] (no transpose_B at run time) and alpha/beta are folded into them.
"""
from __future__ import annotations

import numpy as np

from .. import cpu, normalizer
from ..errors import UnsupportedError
from ..graph import NodeView
from ..plan import CpuOp, Matmul, Tensor
from ..numerics import multiplier
from .common import activation_code, copy_range, grouped_matmul, matmul, to_plain
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
    gemmini = ("tiled_matmul (bias row, fused ReLU / Clip(0,hi)); runs of output columns with their own weight "
               "scale as one call each over strided column slices")
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

    def weight_input(self, node):
        return node.input("B") if node.attr("alpha", 1.0) == 1.0 else None

    def output_shift(self, node, weight_error, input_means):
        return np.asarray(input_means["last"], np.float64) @ weight_error

    def channel_axis(self, node):
        return (0 if node.attr("transB", 0) else 1), 1

    def float_weights(self, node):
        b = node.const(node.input("B"))
        w = np.array(b.T if node.attr("transB", 0) else b, np.float32, order="C")  # one copy, never the graph's
        alpha = np.float32(node.attr("alpha", 1.0))
        if alpha != 1:
            w = w * alpha
        c = node.input("C")
        bias = _bias_vector(node.const(c), w.shape[1]) if c else None
        if bias is not None:
            bias = bias * np.float32(node.attr("beta", 1.0))
        return w, bias

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        a = to_plain(node, ctx, ctx.tensor(node.input("A")), lowered)
        wq = ctx.weight(node.name)
        i, k = a.shape
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        return lowered.add(grouped_matmul(node, ctx, a, i, k, y, wq))


@handler("MatMul", since=1)
class MatMulHandler(Handler):
    gemmini = ("tiled_matmul (a following Add of a constant row becomes the bias; runs of output columns with "
               "their own weight scale as one call each); products of two activations (attention) as one "
               "tiled_matmul per batch, broadcast batch dimensions read in place")
    limits = ("constant right operand 2-D, or batched [batch..., K, N] with the left operand's batch dimensions "
              "(one Gemmini call per batch, one weight scale); vectors are refused")

    def check(self, node, ctx):
        reasons = []
        a, b = node.input("A"), node.input("B")
        if len(node.shape(a)) < 2 or len(node.shape(b)) < 2:
            reasons.append("a vector operand")
        elif node.is_const(b) and len(node.shape(b)) != 2 and node.shape(b)[:-2] != node.shape(a)[:-2]:
            reasons.append(f"batched constant right operand {list(node.shape(b))} whose batch dimensions differ "
                           f"from the left operand's {list(node.shape(a))}")
        elif node.is_const(a):
            reasons.append("constant left operand")
        return reasons

    def weight_input(self, node):
        return node.input("B")

    def output_shift(self, node, weight_error, input_means):
        if weight_error.ndim != 2:
            return None  # batched weights: each batch reads its own rows; no bias row to correct
        return np.asarray(input_means["last"], np.float64) @ weight_error

    def channel_axis(self, node):
        b = node.input("B")
        return (1, 1) if node.is_const(b) and len(node.shape(b)) == 2 else None

    def float_weights(self, node):
        if not node.is_const(node.input("B")):
            return None
        bias = node.fused.bias
        return node.const(node.input("B")).astype(np.float32), (None if bias is None else node.const(bias))

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        a: Tensor = to_plain(node, ctx, ctx.tensor(node.input("A")), lowered)
        y = ctx.output(node.output, node.shape(node.output), dtype="int32" if node.fused.accumulate else "int8")
        lowered.tensors.append(y)
        if not node.is_const(node.input("B")):
            b = to_plain(node, ctx, ctx.tensor(node.input("B")), lowered)
            return lowered.add(activation_matmul(node, ctx, a, b, y))
        wq = ctx.weight(node.name)
        if wq.q.ndim > 2:
            return lowered.add(batched_weight_matmul(node, ctx, a, y, wq))
        k = a.shape[-1]
        i = int(np.prod(a.shape[:-1]))
        return lowered.add(grouped_matmul(node, ctx, a, i, k, y, wq))


def batched_weight_matmul(node: NodeView, ctx: LowerContext, a: Tensor, y: Tensor, wq) -> Lowered:
    """A[batch..., M, K] x W[batch..., K, N] with constant int8 weights (one scale): one Gemmini matmul per
    batch, reading and writing its batch of A and of the result in place (contiguous ranges of flat views)."""
    lowered = Lowered()
    m, k = a.shape[-2:]
    n = wq.q.shape[-1]
    if a.slice_of is not None:  # a strided slice of another buffer: a dense copy first
        dense = ctx.temp(node.name, "a_dense", a.shape, a.scale)
        lowered.tensors.append(dense)
        lowered.steps.append(copy_range(node.name, a, dense, 0, 0, "batched matmul: dense copy of a sliced operand"))
        a = dense
    flat_a = ctx.temp(node.name, "a_flat", (1, int(np.prod(a.shape, dtype=np.int64))), a.scale, view_of=a.id)
    flat_y = ctx.temp(node.name, "y_flat", (1, int(np.prod(y.shape, dtype=np.int64))), y.scale, view_of=y.id)
    lowered.tensors += [flat_a, flat_y]
    weights = wq.q.reshape(-1, k, n)
    for i in range(len(weights)):
        ai = ctx.channel_slice(node.name, f"a{i}", flat_a, i * m * k, m * k, a.scale)
        ci = ctx.channel_slice(node.name, f"c{i}", flat_y, i * m * n, m * n, y.scale)
        lowered.tensors += [ai, ci]
        lowered.add(matmul(node, ctx, ai, m, k, ci, weights[i], None, a.scale, wq.scale, f"_b{i}"))
    return lowered


def batch_pairs(a_batch: tuple, b_batch: tuple) -> list[tuple[int, int]]:
    """For each batch of A x B's result in row-major order, the batch of A and of B it reads (NumPy's
    broadcasting of the batch dimensions, e.g. keys shared by every head of multi-query attention)."""
    out = np.broadcast_shapes(tuple(a_batch), tuple(b_batch))
    index_a = np.broadcast_to(np.arange(int(np.prod(a_batch, dtype=np.int64))).reshape(a_batch), out).ravel()
    index_b = np.broadcast_to(np.arange(int(np.prod(b_batch, dtype=np.int64))).reshape(b_batch), out).ravel()
    return [(int(i), int(j)) for i, j in zip(index_a, index_b)]


def activation_matmul(node: NodeView, ctx: LowerContext, a: Tensor, b: Tensor, y: Tensor) -> Lowered:
    """A x B of two int8 activations: one Gemmini matmul per batch of the result, its batch dimensions
    broadcast. Each batch of A, B and the result is a contiguous range of its buffer, so the matmuls read and
    write them in place (slices of flat views); operands that are themselves strided slices are copied per
    batch first."""
    lowered = Lowered()
    m, k = a.shape[-2:]
    n = b.shape[-1]
    pairs = batch_pairs(a.shape[:-2], b.shape[:-2])
    batches = len(pairs)
    read_out = _read_out(node, a, b, y, k, n)
    biases = _softmax_biases(node, ctx, read_out.get("bert_scale"), a, b, m, n, lowered)
    if batches == 1:
        lowered.steps.append(Matmul(node.name, I=m, J=n, K=k, A=a.id, B=b.id, C=y.id, stride_A=k,
                                    stride_B=n, stride_D=n, stride_C=n, **biases[0], **read_out))
        return lowered
    if a.slice_of is not None or b.slice_of is not None:
        return lowered.add(_copied_batches(node, ctx, a, b, y, read_out, biases))
    flat = {}
    for t, name in ((a, "a_flat"), (b, "b_flat"), (y, "y_flat")):
        flat[name] = ctx.temp(node.name, name, (1, int(np.prod(t.shape, dtype=np.int64))), t.scale, view_of=t.id)
        lowered.tensors.append(flat[name])
    operand_a, operand_b = {}, {}  # one slice per batch of A (of B), however many results read it
    for i, (ia, ib) in enumerate(pairs):
        if ia not in operand_a:
            operand_a[ia] = ctx.channel_slice(node.name, f"a{ia}", flat["a_flat"], ia * m * k, m * k, a.scale)
            lowered.tensors.append(operand_a[ia])
        if ib not in operand_b:
            operand_b[ib] = ctx.channel_slice(node.name, f"b{ib}", flat["b_flat"], ib * k * n, k * n, b.scale)
            lowered.tensors.append(operand_b[ib])
        ai, bi = operand_a[ia], operand_b[ib]
        ci = ctx.channel_slice(node.name, f"c{i}", flat["y_flat"], i * m * n, m * n, y.scale)
        lowered.tensors.append(ci)
        lowered.steps.append(Matmul(node.name, I=m, J=n, K=k, A=ai.id, B=bi.id, C=ci.id, stride_A=k,
                                    stride_B=n, stride_D=n, stride_C=n, **biases[i], **read_out))
    return lowered


def _softmax_biases(node: NodeView, ctx: LowerContext, bert_scale: float | None, a: Tensor, b: Tensor, m: int,
                    n: int, lowered: Lowered) -> list[dict]:
    """Per batch of the product, its D and repeating_bias: none; or, for a constant added to the scores of a
    fused softmax (Fused.softmax_bias), that batch's [m][n] block in whole units of bert_scale as an int32
    bias (identical blocks, such as one bias per head over many windows, stored once)."""
    batch_shape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    batches = int(np.prod(batch_shape, dtype=np.int64))
    if not node.fused.softmax_bias:
        return [{"D": None}] * batches
    full = np.broadcast_to(np.asarray(node.const(node.fused.softmax_bias), np.float64), batch_shape + (m, n))
    blocks = np.rint(full.reshape(batches, m, n) / np.float64(np.float32(bert_scale))).astype(np.int32)
    ids: dict[bytes, str] = {}
    out = []
    for i, block in enumerate(blocks):
        key = block.tobytes()
        if key not in ids:
            ids[key] = ctx.const_id(node.name, f"scores_bias{len(ids)}")
            lowered.constants[ids[key]] = np.ascontiguousarray(block)
        out.append({"D": ids[key], "repeating_bias": False})
    return out


def _read_out(node: NodeView, a: Tensor, b: Tensor, y: Tensor, k: int, n: int) -> dict:
    """The Matmul fields that say how the accumulators become C: a scale and an activation; or, for a softmax
    fused into the product (passes/fuse_softmax.py), Gemmini's normalizer with its constants and the mvin
    factor that keeps its int32 arithmetic from wrapping (normalizer.softmax_call)."""
    if node.fused.softmax is None:
        return {"act": activation_code(node), "scale": multiplier(a.scale, b.scale, y.scale)}
    call = normalizer.softmax_call(a.scale * b.scale * node.fused.softmax, n, k, node.const(node.fused.softmax_bias))
    if call is None:
        raise UnsupportedError(f"node '{node.name}' (MatMul + Softmax): its scores' scale "
                               f"({a.scale * b.scale:.3g}) does not suit Gemmini's normalizer (its int32 sums "
                               "would wrap, or its exp would be too coarse); set normalizer_softmax to false")
    bert_scale, factor = call
    return {"act": normalizer.SOFTMAX, "scale": 1.0, "bert_scale": bert_scale, "A_scale_factor": factor,
            "B_scale_factor": factor}


def _copied_batches(node: NodeView, ctx: LowerContext, a: Tensor, b: Tensor, y: Tensor, read_out: dict,
                    biases: list[dict]) -> Lowered:
    """The batched product on per-batch copies (operands that are strided slices of another buffer)."""
    lowered = Lowered()
    m, k = a.shape[-2:]
    n = b.shape[-1]
    pairs = batch_pairs(a.shape[:-2], b.shape[:-2])
    batches = len(pairs)
    a3 = ctx.temp(node.name, "a_batched", (int(np.prod(a.shape[:-2], dtype=np.int64)), m, k), a.scale, view_of=a.id)
    b3 = ctx.temp(node.name, "b_batched", (int(np.prod(b.shape[:-2], dtype=np.int64)), k, n), b.scale, view_of=b.id)
    lowered.tensors += [a3, b3]
    parts = []
    for i, (ia, ib) in enumerate(pairs):
        ai = ctx.temp(node.name, f"a{i}", (1, m, k), a.scale)
        bi = ctx.temp(node.name, f"b{i}", (1, k, n), b.scale)
        ci = ctx.temp(node.name, f"c{i}", (1, m, n), y.scale)
        lowered.tensors += [ai, bi, ci]
        for src, dst, j in ((a3, ai, ia), (b3, bi, ib)):
            lowered.steps.append(copy_range(node.name, src, dst, 0, j, f"batched matmul: copy of batch {j}"))
        lowered.steps.append(Matmul(node.name, I=m, J=n, K=k, A=ai.id, B=bi.id, C=ci.id, stride_A=k,
                                    stride_B=n, stride_D=n, stride_C=n, **biases[i], **read_out))
        parts.append(ci)
    y3 = ctx.temp(node.name, "y_batched", (batches, m, n), y.scale, view_of=y.id)
    lowered.tensors.append(y3)
    lowered.steps.append(CpuOp(node.name, inputs=tuple(p.id for p in parts), outputs=(y3.id,),
                               params=cpu.Concat(0, (y.scale,) * batches, y.scale),
                               reason="batched matmul: the batches' results joined"))
    return lowered
