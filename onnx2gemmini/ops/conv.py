"""Conv: one tiled_conv_auto when Gemmini's conv can express it, else CPU im2col + tiled_matmul_auto.

1x1/stride-1/unpadded convs are plain matmuls on the NHWC activation matrix (as Gemmini's own ResNet-50
does). Gemmini's conv takes one square kernel, one stride and one padding for all four sides.
"""
from __future__ import annotations

import numpy as np

from ..graph import NodeView
from ..plan import Conv, CpuOp
from ..quantize import multiplier
from .common import activation_code, matmul, to_nhwc
from .context import LowerContext
from .registry import Handler, Lowered, handler

MAX_FIELD_8BIT = 255     # stride and padding fields of loop_conv_ws
MAX_FIELD_16BIT = 65535  # dims and channels


def geometry(node: NodeView) -> dict:
    """Kernel, strides, dilations and (top, left, bottom, right) pads, auto_pad resolved."""
    x, w = node.shape(node.input("X")), node.shape(node.input("W"))
    kernel = list(node.attr("kernel_shape") or w[2:])
    strides = list(node.attr("strides") or [1, 1])
    dilations = list(node.attr("dilations") or [1, 1])
    pads = list(node.attr("pads") or [0, 0, 0, 0])
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0, 0, 0, 0]
        for i in range(2):
            out = -(-x[2 + i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - x[2 + i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + 2] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    elif auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    return {"kernel": kernel, "strides": strides, "dilations": dilations,
            "pads": [pads[0], pads[1], pads[2], pads[3]]}


def direct_conv_reasons(g: dict, fused_pool: bool) -> list[str]:
    """Why tiled_conv cannot take this geometry (empty: it can)."""
    reasons = []
    if g["kernel"][0] != g["kernel"][1]:
        reasons.append(f"non-square kernel {g['kernel'][0]}x{g['kernel'][1]}")
    if g["strides"][0] != g["strides"][1]:
        reasons.append(f"unequal strides {g['strides']}")
    if len(set(g["pads"])) != 1:
        reasons.append(f"asymmetric padding {g['pads']}")
    if g["dilations"] != [1, 1]:
        reasons.append(f"dilation {g['dilations']}")
    if g["pads"][0] >= g["kernel"][0]:
        reasons.append("padding not smaller than the kernel")
    if max(g["strides"]) > MAX_FIELD_8BIT or max(g["pads"]) > MAX_FIELD_8BIT:
        reasons.append("stride or padding beyond the 8-bit loop_conv_ws fields")
    return reasons


@handler("Conv", since=1)
class ConvHandler(Handler):
    gemmini = "tiled_conv_auto (fused ReLU / Clip(0,hi) / max-pool); 1x1 convs as tiled_matmul_auto"
    limits = ("2-D, group 1; non-square kernels, unequal strides, asymmetric padding or dilation run as "
              "CPU im2col + tiled_matmul_auto")

    def check(self, node, ctx):
        reasons = []
        x = node.input("X")
        if len(node.shape(x)) != 4:
            reasons.append(f"only 2-D convolutions (input rank {len(node.shape(x))})")
        if not node.is_const(node.input("W")):
            reasons.append("weights are not constant")
        if node.attr("group", 1) != 1:
            reasons.append(f"grouped convolution (group={node.attr('group')})")
        b = node.input("B")
        if b is not None and not node.is_const(b):
            reasons.append("bias is not constant")
        return reasons

    def float_weights(self, node):
        b = node.input("B")
        return node.const(node.input("W")), (node.const(b) if b else None)

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_nhwc(node, ctx, ctx.tensor(node.input("X")), lowered)
        n, h, w, ic = x.shape
        wq = ctx.weight(node.name)
        oc, _, kh, kw = wq.q.shape
        g = geometry(node)
        pool = node.fused.get("pool")
        (oh, ow) = self._out_dims(h, w, g)
        s_in, s_out = x.scale, ctx.scale(node.output)
        out_shape = node.shape(node.output)
        y = ctx.output(node.output, (out_shape[0], out_shape[2], out_shape[3], out_shape[1]), "NHWC")
        lowered.tensors.append(y)
        # [KH][KW][IC][OC]: the row order of Gemmini's conv weights and of our im2col columns.
        w_hwio = np.ascontiguousarray(wq.q.transpose(2, 3, 1, 0).reshape(kh * kw * ic, oc))
        reasons = direct_conv_reasons(g, pool is not None)
        pointwise = kh == kw == 1 and g["strides"] == [1, 1] and g["pads"] == [0, 0, 0, 0] and not pool
        if pointwise:
            return lowered.add(matmul(node, ctx, x, n * h * w, ic, y, w_hwio, wq.bias, s_in, wq.scale))
        if not reasons:
            w_id = ctx.const_id(node.name, "W")
            b_id = ctx.const_id(node.name, "b") if wq.bias is not None else None
            lowered.constants[w_id] = w_hwio
            if b_id:
                lowered.constants[b_id] = wq.bias
            lowered.steps.append(Conv(
                node.name, batch_size=n, in_row_dim=h, in_col_dim=w, in_channels=ic, out_channels=oc,
                out_row_dim=oh, out_col_dim=ow, stride=g["strides"][0], padding=g["pads"][0],
                kernel_dim=kh, input=x.id, weights=w_id, bias=b_id, output=y.id,
                act=activation_code(node), scale=multiplier(s_in, wq.scale, s_out),
                pool_size=pool["size"] if pool else 0, pool_stride=pool["stride"] if pool else 0,
                pool_padding=pool["padding"] if pool else 0))
            return lowered
        why = ", ".join(reasons)
        cols = ctx.temp(node.name, "im2col", (n * oh * ow, kh * kw * ic), s_in)
        lowered.tensors.append(cols)
        lowered.steps.append(CpuOp(node.name, op="im2col", inputs=(x.id,), outputs=(cols.id,),
                                   params={"kernel": g["kernel"], "strides": g["strides"], "pads": g["pads"],
                                           "dilations": g["dilations"], "out": [oh, ow]},
                                   reason=f"{why}: im2col on the CPU, then a Gemmini matmul"))
        conv_out = y
        if pool:
            conv_out = ctx.temp(node.name, "unpooled", (n, oh, ow, oc), s_out, layout="NHWC")
            lowered.tensors.append(conv_out)
        lowered.add(matmul(node, ctx, cols, n * oh * ow, kh * kw * ic, conv_out, w_hwio, wq.bias, s_in, wq.scale))
        if pool:
            lowered.steps.append(CpuOp(node.name, op="maxpool", inputs=(conv_out.id,), outputs=(y.id,),
                                       params={"kernel": [pool["size"]] * 2, "strides": [pool["stride"]] * 2,
                                               "pads": [pool["padding"]] * 4, "dilations": [1, 1],
                                               "ceil_mode": 0},
                                       reason=f"max-pool after an im2col conv ({why}) cannot be fused"))
        return lowered

    @staticmethod
    def _out_dims(h: int, w: int, g: dict) -> tuple[int, int]:
        k, s, d, p = g["kernel"], g["strides"], g["dilations"], g["pads"]
        return tuple((size + p[i] + p[i + 2] - (k[i] - 1) * d[i] - 1) // s[i] + 1
                     for i, size in enumerate((h, w)))
