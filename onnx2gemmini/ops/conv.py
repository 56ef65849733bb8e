"""Conv: one tiled_conv_auto when Gemmini's conv can express it, else CPU im2col + tiled_matmul_auto.

1x1/stride-1/unpadded convs are plain matmuls on the NHWC activation matrix (as Gemmini's own ResNet-50
does). Gemmini's conv takes one square kernel, one stride and one padding for all four sides.
"""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import FusedPool, NodeView
from ..plan import Conv, ConvDw, CpuOp, Tensor
from ..numerics import multiplier
from ..tiling.dw import cpu_dw_cycles, gemmini_dw_cycles
from .common import activation_code, copy_range, matmul, to_nhwc
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


def weight_reasons(node: NodeView, what: str) -> list[str]:
    """Conv and ConvTranspose: 2-D only, constant weights and bias."""
    reasons = []
    rank = len(node.shape(node.input("X")))
    if rank != 4:
        reasons.append(f"only 2-D {what} (input rank {rank})")
    if not node.is_const(node.input("W")):
        reasons.append("weights are not constant")
    b = node.input("B")
    if b is not None and not node.is_const(b):
        reasons.append("bias is not constant")
    return reasons


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


def pointwise(g: dict, pool) -> bool:
    """A 1x1, stride-1, unpadded conv without a fused pool: a plain matmul on the NHWC activation rows."""
    return g["kernel"] == [1, 1] and g["strides"] == [1, 1] and g["pads"] == [0, 0, 0, 0] and not pool


@handler("Conv", since=1)
class ConvHandler(Handler):
    gemmini = ("tiled_conv (fused ReLU / Clip(0,hi) / max-pool); 1x1 convs as tiled_matmul; groups, and runs of "
               "output channels with their own weight scale, as one call each over strided channel slices "
               "(tiled_conv_stride_auto strides); depthwise convs as tiled_conv_dw_auto")
    limits = ("2-D (a 1-D conv runs as a 2-D conv of height 1); non-square kernels, unequal strides, asymmetric "
              "padding or dilation run as CPU im2col + tiled_matmul; depthwise convs run on an exact int8 CPU kernel when the cost estimate says so or "
              "Gemmini cannot take them (channel multiplier, geometry); per-channel weight scales of a depthwise "
              "conv need a channel copy per run; a channel multiplier keeps one weight scale")

    def check(self, node, ctx):
        return weight_reasons(node, "convolutions")

    def weight_input(self, node):
        return node.input("W")

    def output_shift(self, node, weight_error, input_means):
        """sum over kernel and group channels of dW * E[x_channel] (zero padding ignored)."""
        mean = np.asarray(input_means["axis1"], np.float64)
        oc, icg = weight_error.shape[:2]
        groups = node.attr("group", 1)
        per_group = mean.reshape(groups, icg)
        dw = weight_error.sum(axis=(2, 3)).reshape(groups, oc // groups, icg)
        return np.einsum("goi,gi->go", dw, per_group).reshape(oc)

    def float_weights(self, node):
        b = node.input("B")
        return node.const(node.input("W")), (node.const(b) if b else None)

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_nhwc(node, ctx, ctx.tensor(node.input("X")), lowered)
        out_shape = node.shape(node.output)
        y = ctx.output(node.output, (out_shape[0], out_shape[2], out_shape[3], out_shape[1]), "NHWC")
        lowered.tensors.append(y)
        wq = ctx.weight(node.name)
        groups = node.attr("group", 1)
        if groups > 1 and wq.q.shape[1] == 1 and groups == x.shape[3]:
            return lowered.add(self._lower_depthwise_runs(node, ctx, x, y, wq))
        return lowered.add(self._lower_ranges(node, ctx, x, y, wq, groups))

    def channel_axis(self, node):
        """Output channels (axis 0 of OIHW); a depthwise conv with a channel multiplier keeps one scale,
        since its runs of output channels would have to cover whole input channels."""
        group, w = node.attr("group", 1), node.shape(node.input("W"))
        multiplier = group > 1 and group == node.shape(node.input("X"))[1] and w[0] != group
        return None if multiplier else (0, 0)

    def _lower_depthwise_runs(self, node, ctx, x, y, wq) -> Lowered:
        """A depthwise conv per run of channels sharing a weight scale. tiled_conv_dw takes neither channel
        strides nor more than one scale, so each run works on a CPU copy of its channels, joined by a concat."""
        runs = wq.groups()
        if len(runs) == 1:
            return self._lower_depthwise(node, ctx, x, y, wq.q, wq.bias, wq.scale, "")
        lowered = Lowered()
        parts = []
        for k, (start, stop, s_w) in enumerate(runs):
            xs = ctx.temp(node.name, f"in_r{k}", x.shape[:3] + (stop - start,), x.scale, layout="NHWC")
            ys = ctx.temp(node.name, f"out_r{k}", y.shape[:3] + (stop - start,), y.scale, layout="NHWC")
            lowered.tensors += [xs, ys]
            lowered.steps.append(copy_range(node.name, x, xs, 3, start, f"depthwise conv: copy of channels "
                                            f"{start}..{stop - 1}, which have their own weight scale"))
            bias = None if wq.bias is None else wq.bias[start:stop]
            lowered.add(self._lower_depthwise(node, ctx, xs, ys, wq.q[start:stop], bias, s_w, f"_r{k}"))
            parts.append(ys)
        lowered.steps.append(CpuOp(node.name, inputs=tuple(p.id for p in parts), outputs=(y.id,),
                                   params=cpu.Concat(3, (y.scale,) * len(parts), y.scale),
                                   reason=f"depthwise conv: {len(parts)} runs of channels with their own weight "
                                          "scale joined on channels"))
        return lowered

    def _lower_ranges(self, node, ctx, x, y, wq, groups, g: dict | None = None) -> Lowered:
        """One Gemmini call per run of output channels sharing a conv group and a weight scale (one call
        in all for a plain per-tensor conv). Each reads its group's input channels and writes its output
        channels in place (rows strided by the full channel count); when a CPU im2col or CPU max-pool is
        involved the runs work on copies instead, joined by a channel concat. `g`: the geometry (default:
        the node's own, see `geometry`)."""
        oc = wq.q.shape[0]
        icg, ocg = x.shape[3] // groups, oc // groups
        scales = wq.groups()
        bounds = sorted({k * ocg for k in range(groups)} | {start for start, _, _ in scales} | {oc})
        if len(bounds) == 2:
            return self._lower_one(node, ctx, x, y, wq.q, wq.bias, wq.scale, "", g)
        lowered = Lowered()
        in_place = self._gemmini_only(node, g or geometry(node))
        by_group = len(bounds) == groups + 1
        inputs: dict[int, Tensor] = {}
        parts = []
        for k, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
            group = start // ocg
            tag = f"g{group}" if by_group else f"r{k}"
            if group not in inputs:
                inputs[group] = x if groups == 1 else self._group_input(node, ctx, x, group, icg, in_place, lowered)
            if in_place:
                part = ctx.channel_slice(node.name, f"out_{tag}", y, start, stop - start, y.scale)
            else:
                part = ctx.temp(node.name, f"out_{tag}", y.shape[:3] + (stop - start,), y.scale, layout="NHWC")
            lowered.tensors.append(part)
            s_w = next(s for a, b, s in scales if a <= start < b)
            bias = None if wq.bias is None else wq.bias[start:stop]
            lowered.add(self._lower_one(node, ctx, inputs[group], part, wq.q[start:stop], bias, s_w, f"_{tag}", g))
            parts.append(part)
        if not in_place:
            lowered.steps.append(CpuOp(node.name, inputs=tuple(p.id for p in parts), outputs=(y.id,),
                                       params=cpu.Concat(3, (y.scale,) * len(parts), y.scale),
                                       reason=f"{len(parts)} runs of output channels (conv groups {groups}, "
                                              f"weight-scale groups {len(scales)}) joined on channels"))
        return lowered

    @staticmethod
    def _group_input(node, ctx, x, g, icg, in_place, lowered) -> Tensor:
        """Conv group g's input channels: a strided slice of x, or a copy for a CPU im2col."""
        if in_place:
            xs = ctx.channel_slice(node.name, f"in_g{g}", x, g * icg, icg, x.scale)
        else:
            n, h, w, _ = x.shape
            xs = ctx.temp(node.name, f"in_g{g}", (n, h, w, icg), x.scale, layout="NHWC")
            lowered.steps.append(copy_range(node.name, x, xs, 3, g * icg,
                                            f"grouped conv: copy of group {g}'s input channels for a CPU im2col"))
        lowered.tensors.append(xs)
        return xs

    @staticmethod
    def _gemmini_only(node: NodeView, g: dict) -> bool:
        """Whether `_lower_one` gives Gemmini steps only (a matmul or one tiled_conv), which can read and
        write strided channel slices; CPU im2col and CPU max-pool need dense buffers."""
        pool = node.fused.pool
        return pointwise(g, pool) or not direct_conv_reasons(g, pool is not None)

    def _lower_depthwise(self, node, ctx, x, y, q, bias, s_w, suffix) -> Lowered:
        """tiled_conv_dw on Gemmini when it can take the geometry and the estimate says it is faster,
        else an exact int8 depthwise kernel on the CPU (the same arithmetic)."""
        lowered = Lowered()
        g = geometry(node)
        pool = node.fused.pool
        n, h, w, c = x.shape
        oh, ow = self._out_dims(h, w, g)
        oc, _, kh, kw = q.shape
        scale = multiplier(x.scale, s_w, y.scale)
        reasons = direct_conv_reasons(g, pool is not None)
        if oc != c:
            reasons.append(f"channel multiplier {oc // c}")
        if not ctx.config.has_dw_convs:
            reasons.append(f"config {ctx.config.name} has no depthwise convs")
        w_id = ctx.const_id(node.name, "W" + suffix)
        b_id = ctx.const_id(node.name, "b" + suffix) if bias is not None else None
        if b_id:
            lowered.constants[b_id] = bias
        if not reasons:
            dw_bias = ctx.const_id(node.name, "b" + suffix)  # always passed: zeros when the model has none
            step = ConvDw(node.name, batch_size=n, in_row_dim=h, in_col_dim=w, channels=c, out_row_dim=oh,
                          out_col_dim=ow, stride=g["strides"][0], padding=g["pads"][0], kernel_dim=kh,
                          input=x.id, weights=w_id, bias=dw_bias, output=y.id, act=activation_code(node),
                          scale=scale, pool_size=pool.size if pool else 0,
                          pool_stride=pool.stride if pool else 0, pool_padding=pool.padding if pool else 0)
            on_gemmini, on_cpu = gemmini_dw_cycles(step, ctx.config), cpu_dw_cycles(step, ctx.config)
            if on_gemmini <= on_cpu:
                lowered.constants[w_id] = np.ascontiguousarray(q.reshape(c, kh, kw))  # [C][KH][KW]
                lowered.constants[dw_bias] = bias if bias is not None else np.zeros(c, np.int32)
                lowered.steps.append(step)
                return lowered
            reasons.append(f"estimated {on_cpu:,} CPU cycles against {on_gemmini:,} on Gemmini")
        lowered.constants[w_id] = np.ascontiguousarray(q.reshape(oc, kh, kw).transpose(1, 2, 0))  # [KH][KW][OC]
        conv_out = y
        if pool:
            conv_out = ctx.temp(node.name, "unpooled" + suffix, (n, oh, ow, oc), y.scale, layout="NHWC")
            lowered.tensors.append(conv_out)
        inputs = (x.id, w_id) + ((b_id,) if b_id else ())
        params = cpu.Dwconv(window(g, oh, ow), oc // c, scale, activation_code(node) == 1)
        lowered.steps.append(CpuOp(node.name, inputs=inputs, outputs=(conv_out.id,), params=params,
                                   reason=f"depthwise conv on the CPU (exact int8): {', '.join(reasons)}"))
        if pool:
            lowered.steps.append(_cpu_maxpool(node, conv_out, y, pool, "after a depthwise conv"))
        return lowered

    def _lower_one(self, node, ctx, x, y, w_oihw, bias, s_w, suffix, g: dict | None = None) -> Lowered:
        """A group-1 conv of x into y: 1x1 matmul, one tiled_conv, or im2col + matmul; `g`: the geometry
        (default: the node's own, see `geometry`)."""
        lowered = Lowered()
        n, h, w, ic = x.shape
        oc, _, kh, kw = w_oihw.shape
        g = g or geometry(node)
        pool = node.fused.pool
        oh, ow = self._out_dims(h, w, g)
        s_in, s_out = x.scale, y.scale
        # [KH][KW][IC][OC]: the row order of Gemmini's conv weights and of our im2col columns.
        w_hwio = np.ascontiguousarray(w_oihw.transpose(2, 3, 1, 0).reshape(kh * kw * ic, oc))
        reasons = direct_conv_reasons(g, pool is not None)
        if pointwise(g, pool):
            return lowered.add(matmul(node, ctx, x, n * h * w, ic, y, w_hwio, bias, s_in, s_w, suffix))
        if not reasons:
            w_id = ctx.const_id(node.name, "W" + suffix)
            b_id = ctx.const_id(node.name, "b" + suffix) if bias is not None else None
            lowered.constants[w_id] = w_hwio
            if b_id:
                lowered.constants[b_id] = np.ascontiguousarray(bias)
            lowered.steps.append(Conv(
                node.name, batch_size=n, in_row_dim=h, in_col_dim=w, in_channels=ic, out_channels=oc,
                out_row_dim=oh, out_col_dim=ow, stride=g["strides"][0], padding=g["pads"][0],
                kernel_dim=kh, input=x.id, weights=w_id, bias=b_id, output=y.id,
                act=activation_code(node), scale=multiplier(s_in, s_w, s_out),
                pool_size=pool.size if pool else 0, pool_stride=pool.stride if pool else 0,
                pool_padding=pool.padding if pool else 0))
            return lowered
        why = ", ".join(reasons)
        cols = ctx.temp(node.name, "im2col" + suffix, (n * oh * ow, kh * kw * ic), s_in)
        lowered.tensors.append(cols)
        lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(cols.id,), params=cpu.Im2col(window(g, oh, ow)),
                                   reason=f"{why}: im2col on the CPU, then a Gemmini matmul"))
        conv_out = y
        if pool:
            conv_out = ctx.temp(node.name, "unpooled" + suffix, (n, oh, ow, oc), s_out, layout="NHWC")
            lowered.tensors.append(conv_out)
        lowered.add(matmul(node, ctx, cols, n * oh * ow, kh * kw * ic, conv_out, w_hwio, bias, s_in, s_w, suffix))
        if pool:
            lowered.steps.append(_cpu_maxpool(node, conv_out, y, pool, f"after an im2col conv ({why})"))
        return lowered

    @staticmethod
    def _out_dims(h: int, w: int, g: dict) -> tuple[int, int]:
        k, s, d, p = g["kernel"], g["strides"], g["dilations"], g["pads"]
        return tuple((size + p[i] + p[i + 2] - (k[i] - 1) * d[i] - 1) // s[i] + 1
                     for i, size in enumerate((h, w)))


def window(g: dict, oh: int, ow: int) -> cpu.Window:
    """The conv geometry `g` as the window of a CPU kernel with output size oh x ow."""
    return cpu.Window(tuple(g["kernel"]), tuple(g["strides"]), tuple(g["pads"]), tuple(g["dilations"]), (oh, ow))


def _cpu_maxpool(node, src, dst, pool: FusedPool, why: str) -> CpuOp:
    size, stride, pad = pool.size, pool.stride, pool.padding
    win = cpu.Window((size, size), (stride, stride), (pad,) * 4, (1, 1), tuple(dst.shape[1:3]))
    return CpuOp(node.name, inputs=(src.id,), outputs=(dst.id,), params=cpu.Maxpool(win),
                 reason=f"max-pool {why} cannot be fused")
