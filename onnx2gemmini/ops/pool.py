"""Pooling. Max-pool fuses into a Gemmini conv (passes/fuse_maxpool.py); what remains runs here.

GlobalAveragePool gets its own calibrated scale: the mean of a feature map spans a fraction of the map's
range (a MobileNetV2's last map reaches 19 where its mean stays under 3.2, so keeping the input's scale
left the classifier 2.6 bits short: 24.4 dB at that layer where onnxruntime's own int8 reaches 29.4). It
is a Gemmini matmul by a row of ones per batch, C[1][C] = 1[1][HW] x X[HW][C] at the multiplier
s_x (1/HW) / s_y: the int32 sum is exact, one rounding at the end (1 LSB from onnxruntime's float mean at
ties). When the scales come out equal (a concat or a pre-quantized model ties them), it stays
tiled_global_average_auto (square maps; the hardware's round-half-even mean) or the CPU average.
MaxPool and AveragePool that could not be fused are exact int8 kernels on the CPU.
"""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..numerics import multiplier
from ..plan import CpuOp, GlobalAverage, Matmul, Tensor
from .common import copy_range, to_nhwc
from .context import LowerContext
from .registry import Handler, Lowered, handler


def pool_window(node: NodeView) -> cpu.Window:
    """The node's window with auto_pad resolved to explicit pads (output size from shape inference)."""
    a = node.attrs
    kernel = list(a["kernel_shape"])
    nd = len(kernel)
    x, y = node.shape(node.input("X")), node.shape(node.output)
    pads = list(a.get("pads") or [0] * 2 * nd)
    strides = list(a.get("strides") or [1] * nd)
    dilations = list(a.get("dilations") or [1] * nd)
    auto_pad = a.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        pads = [0] * 2 * nd
        if auto_pad != "VALID":
            for i in range(nd):
                total = max(0, (y[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - x[2 + i])
                small, big = total // 2, total - total // 2
                pads[i], pads[i + nd] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    return cpu.Window(tuple(kernel), tuple(strides), tuple(pads), tuple(dilations), tuple(y[2:]))


def _check_2d(node: NodeView) -> list[str]:
    rank = len(node.shape(node.input("X")))
    return [] if rank == 4 else [f"only 2-D pooling (input rank {rank})"]


class _CpuPool(Handler):
    output_scale = "input"
    reason = ""

    def params(self, node: NodeView) -> cpu.CpuKernel:  # pragma: no cover - abstract
        raise NotImplementedError

    def check(self, node, ctx):
        reasons = _check_2d(node)
        if len(node.outputs) > 1 and node.used(node.outputs[1]):
            reasons.append("the Indices output is used")
        return reasons

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_nhwc(node, ctx, ctx.tensor(node.input("X")), lowered)
        n, c, oh, ow = node.shape(node.output)
        y = ctx.output(node.output, (n, oh, ow, c), "NHWC")
        lowered.tensors.append(y)
        lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=self.params(node),
                                   reason=self.reason))
        return lowered


@handler("MaxPool", since=1)
class MaxPoolHandler(_CpuPool):
    gemmini = "fused into the preceding tiled_conv_auto when window, stride, padding <= 3 and after ReLU"
    limits = "otherwise an exact int8 max-pool on the CPU"
    reason = "max-pool not fusable into a Gemmini conv (no conv before it, window/stride/padding > 3, " \
             "or padded without a ReLU)"

    def params(self, node):
        return cpu.Maxpool(pool_window(node))


@handler("AveragePool", since=1)
class AveragePoolHandler(_CpuPool):
    gemmini = "tiled_global_average_auto when the window covers a square map without padding"
    limits = "other windows: int8 average on the CPU, round half to even (1 LSB tolerance vs onnxruntime)"
    reason = "Gemmini has no windowed average pooling"

    def params(self, node):
        return cpu.Avgpool(pool_window(node), int(node.attr("count_include_pad", 0)))

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        win = pool_window(node)
        h, w = node.shape(node.input("X"))[2:]
        if win.kernel == (h, w) and h == w and not any(win.pads) and win.out == (1, 1):
            return GlobalAveragePoolHandler().lower(node, ctx)  # the whole map: Gemmini's global average
        return super().lower(node, ctx)


def _mean_by_ones(node: NodeView, ctx: LowerContext, x: Tensor, y: Tensor) -> Lowered:
    """Per batch, one Gemmini matmul 1[1][HW] x X[HW][C] -> Y[1][C] at the multiplier s_x (1/HW) / s_y, reading
    and writing its batch of flat views of X and Y in place."""
    lowered = Lowered()
    n, h, w, c = x.shape
    if x.slice_of is not None:  # a strided slice of another buffer: a dense copy first
        dense = ctx.temp(node.name, "x_dense", x.shape, x.scale, "NHWC")
        lowered.tensors.append(dense)
        lowered.steps.append(copy_range(node.name, x, dense, 0, 0, "global average: dense copy of a sliced input"))
        x = dense
    flat_x = ctx.temp(node.name, "x_flat", (1, n * h * w * c), x.scale, view_of=x.id)
    flat_y = ctx.temp(node.name, "y_flat", (1, n * c), y.scale, view_of=y.id)
    ones = ctx.const_id(node.name, "ones")
    lowered.tensors += [flat_x, flat_y]
    lowered.constants[ones] = np.ones((1, h * w), np.int8)
    scale = multiplier(x.scale, 1.0 / (h * w), y.scale)
    # one batch reads and writes the whole views (no slices, which back ends needing dense buffers would copy)
    parts = [(flat_x, flat_y)]
    if n > 1:
        parts = [(ctx.channel_slice(node.name, f"x{b}", flat_x, b * h * w * c, h * w * c, x.scale),
                  ctx.channel_slice(node.name, f"y{b}", flat_y, b * c, c, y.scale)) for b in range(n)]
        lowered.tensors += [t for part in parts for t in part]
    for xb, yb in parts:
        lowered.steps.append(Matmul(node.name, I=1, J=c, K=h * w, A=ones, B=xb.id, D=None, C=yb.id, stride_A=h * w,
                                    stride_B=c, stride_D=c, stride_C=c, scale=scale, mean_of=h * w))
    return lowered


# onnxruntime refuses a QLinearGlobalAveragePool whose multiplier s_x / (s_y HW) reaches 256 (MLAS).
MAX_MEAN_MULTIPLIER = 255.0


@handler("GlobalAveragePool", since=1)
class GlobalAveragePoolHandler(Handler):
    gemmini = ("tiled_matmul by a row of ones (the output at its own scale); tiled_global_average_auto when the "
               "output keeps the input's scale")
    limits = ("1 LSB tolerance vs onnxruntime's float mean; at the input's scale, non-square feature maps average "
              "on the CPU")

    def check(self, node, ctx):
        return _check_2d(node)

    def output_scale_floor(self, node: NodeView, input_scale: float) -> float:
        """onnxruntime's QLinearGlobalAveragePool refuses s_x / (s_y HW) >= 256 (its output would be constant);
        a mean calibrated that far below its map's range (random weights) gets the smallest scale it accepts."""
        _, _, h, w = node.shape(node.input("X"))
        return input_scale / (MAX_MEAN_MULTIPLIER * h * w)

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_nhwc(node, ctx, ctx.tensor(node.input("X")), lowered)
        n, h, w, c = x.shape
        y = ctx.output(node.output, (n, 1, 1, c), "NHWC")
        lowered.tensors.append(y)
        if y.scale != x.scale:
            return lowered.add(_mean_by_ones(node, ctx, x, y))
        if h == w:
            lowered.steps.append(GlobalAverage(node.name, input=x.id, output=y.id, batches=n, channels=c, dim=h))
        else:
            window = cpu.Window((h, w), (1, 1), (0, 0, 0, 0), (1, 1), (1, 1))
            lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=cpu.Avgpool(window),
                                       reason=f"non-square feature map {h}x{w}: Gemmini averages square maps"))
        return lowered
