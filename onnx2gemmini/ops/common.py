"""Lowering pieces several handlers share: layout changes and the Gemmini matmul step."""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..plan import NO_ACTIVATION, RELU, CpuOp, Matmul, Tensor
from ..numerics import multiplier
from .context import LowerContext
from .registry import Lowered


def activation_code(node: NodeView) -> int:
    return RELU if node.fused.relu else NO_ACTIVATION


def to_plain(node: NodeView, ctx: LowerContext, t: Tensor, lowered: Lowered) -> Tensor:
    """`t` in ONNX layout: NHWC data whose order differs gets an int8 transpose on the CPU."""
    if t.layout != "NHWC":
        return t
    n, h, w, c = t.shape
    if h * w == 1 or c == 1:  # same byte order either way
        view = ctx.temp(node.name, f"nchw_{t.id}", (n, c, h, w), t.scale, view_of=t.id)
        lowered.tensors.append(view)
        return view
    out = ctx.temp(node.name, f"nchw_{t.id}", (n, c, h, w), t.scale)
    lowered.tensors.append(out)
    lowered.steps.append(CpuOp(node.name, inputs=(t.id,), outputs=(out.id,), params=cpu.Transpose((0, 3, 1, 2)),
                               reason=f"{node.op_type} reads ONNX (NCHW) order; Gemmini tensors are NHWC"))
    return out


def channels_last(node: NodeView, ctx: LowerContext, lowered: Lowered):
    """The input as NHWC (rank 4) or plain with channels on axis 1; returns (tensor, channel axis)."""
    x = ctx.tensor(node.inputs[0])
    if x.layout == "NHWC":
        return x, 3
    return to_plain(node, ctx, x, lowered), 1


def to_nhwc(node: NodeView, ctx: LowerContext, t: Tensor, lowered: Lowered) -> Tensor:
    """`t` as NHWC for a Gemmini conv: plain 4-D data gets an int8 transpose on the CPU."""
    if t.layout == "NHWC":
        return t
    n, c, h, w = t.shape
    if h * w == 1 or c == 1:
        view = ctx.temp(node.name, f"nhwc_{t.id}", (n, h, w, c), t.scale, layout="NHWC", view_of=t.id)
        lowered.tensors.append(view)
        return view
    out = ctx.temp(node.name, f"nhwc_{t.id}", (n, h, w, c), t.scale, layout="NHWC")
    lowered.tensors.append(out)
    lowered.steps.append(CpuOp(node.name, inputs=(t.id,), outputs=(out.id,), params=cpu.Transpose((0, 2, 3, 1)),
                               reason="Gemmini convs read NHWC; this tensor arrives in ONNX order"))
    return out


def matmul(node: NodeView, ctx: LowerContext, a: Tensor, I: int, K: int, c: Tensor,
           weights: np.ndarray, bias: np.ndarray | None, s_in: float, s_w: float, suffix: str = "") -> Lowered:
    """One tiled_matmul_auto with constant int8 weights [K][J] and an int32 bias row; an int32 `c` receives
    the raw accumulators (full_C)."""
    J = weights.shape[1]
    full = c.dtype == "int32"
    b_id = ctx.const_id(node.name, "W" + suffix)
    d_id = ctx.const_id(node.name, "b" + suffix) if bias is not None else None
    constants = {b_id: np.ascontiguousarray(weights, np.int8)}
    if bias is not None:
        constants[d_id] = np.ascontiguousarray(bias, np.int32)
    step = Matmul(node.name, I=I, J=J, K=K, A=a.id, B=b_id, D=d_id, C=c.id,
                  stride_A=K, stride_B=J, stride_D=J, stride_C=J, act=NO_ACTIVATION if full else activation_code(node),
                  scale=1.0 if full else multiplier(s_in, s_w, c.scale), repeating_bias=True, full_C=full)
    return Lowered([step], [], constants)


def grouped_matmul(node: NodeView, ctx: LowerContext, a: Tensor, I: int, K: int, y: Tensor, wq) -> Lowered:
    """`matmul` with weights [K][J] quantized per tensor, or one tiled_matmul per run of output columns
    sharing a weight scale, each writing its columns of `y` in place (rows strided by J)."""
    groups = wq.groups()
    if len(groups) == 1:
        return matmul(node, ctx, a, I, K, y, wq.q, wq.bias, a.scale, wq.scale)
    lowered = Lowered()
    for k, (start, stop, scale) in enumerate(groups):
        part = ctx.channel_slice(node.name, f"out_s{k}", y, start, stop - start, y.scale)
        lowered.tensors.append(part)
        bias = None if wq.bias is None else wq.bias[start:stop]
        lowered.add(matmul(node, ctx, a, I, K, part, wq.q[:, start:stop], bias, a.scale, scale, f"_s{k}"))
    return lowered


def copy_range(node_name: str, src: Tensor, dst: Tensor, axis: int, start: int, reason: str) -> CpuOp:
    """A contiguous range of one storage axis of `src` copied into `dst` (same rank), as a remap."""
    maps = [list(range(start, start + dst.shape[a])) if a == axis else list(range(n))
            for a, n in enumerate(src.shape)]
    return CpuOp(node_name, inputs=(src.id,), outputs=(dst.id,), params=cpu.Remap(tuple(i for m in maps for i in m)),
                 reason=reason)
