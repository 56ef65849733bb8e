"""Pooling. Max-pool fuses into a Gemmini conv (passes/fuse_maxpool.py); what remains runs here.

GlobalAveragePool maps to tiled_global_average_auto (square maps; the hardware's round-half-even mean).
MaxPool and AveragePool that could not be fused are exact int8 kernels on the CPU.
"""
from __future__ import annotations

from ..graph import NodeView
from ..plan import CpuOp, GlobalAverage
from .common import to_nhwc
from .context import LowerContext
from .registry import Handler, Lowered, handler


def pool_params(node: NodeView) -> dict:
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
    return {"kernel": kernel, "strides": strides, "pads": pads, "dilations": dilations,
            "ceil_mode": int(a.get("ceil_mode", 0)), "out": list(y[2:]),
            "count_include_pad": int(a.get("count_include_pad", 0))}


def _check_2d(node: NodeView) -> list[str]:
    rank = len(node.shape(node.input("X")))
    return [] if rank == 4 else [f"only 2-D pooling (input rank {rank})"]


class _CpuPool(Handler):
    output_scale = "input"
    op = ""
    reason = ""
    tolerance = 0

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
        lowered.steps.append(CpuOp(node.name, op=self.op, inputs=(x.id,), outputs=(y.id,),
                                   params=pool_params(node), reason=self.reason, tolerance=self.tolerance))
        return lowered


@handler("MaxPool", since=1)
class MaxPoolHandler(_CpuPool):
    gemmini = "fused into the preceding tiled_conv_auto when window, stride, padding <= 3 and after ReLU"
    limits = "otherwise an exact int8 max-pool on the CPU"
    op = "maxpool"
    reason = "max-pool not fusable into a Gemmini conv (no conv before it, window/stride/padding > 3, " \
             "or padded without a ReLU)"


@handler("AveragePool", since=1)
class AveragePoolHandler(_CpuPool):
    gemmini = "tiled_global_average_auto when the window covers a square map without padding"
    limits = "other windows: int8 average on the CPU, round half to even (1 LSB tolerance vs onnxruntime)"
    op = "avgpool"
    reason = "Gemmini has no windowed average pooling"
    tolerance = 1

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        p = pool_params(node)
        h, w = node.shape(node.input("X"))[2:]
        if p["kernel"] == [h, w] and h == w and not any(p["pads"]) and p["out"] == [1, 1]:
            return GlobalAveragePoolHandler().lower(node, ctx)  # the whole map: Gemmini's global average
        return super().lower(node, ctx)


@handler("GlobalAveragePool", since=1)
class GlobalAveragePoolHandler(Handler):
    gemmini = "tiled_global_average_auto"
    limits = "square feature maps; others average on the CPU (1 LSB tolerance vs onnxruntime)"
    output_scale = "input"

    def check(self, node, ctx):
        return _check_2d(node)

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_nhwc(node, ctx, ctx.tensor(node.input("X")), lowered)
        n, h, w, c = x.shape
        y = ctx.output(node.output, (n, 1, 1, c), "NHWC")
        lowered.tensors.append(y)
        if h == w:
            lowered.steps.append(GlobalAverage(node.name, input=x.id, output=y.id, batches=n, channels=c, dim=h))
        else:
            lowered.steps.append(CpuOp(node.name, op="avgpool", inputs=(x.id,), outputs=(y.id,),
                                       params={"kernel": [h, w], "strides": [1, 1], "pads": [0, 0, 0, 0],
                                               "dilations": [1, 1], "ceil_mode": 0, "out": [1, 1],
                                               "count_include_pad": 0},
                                       reason=f"non-square feature map {h}x{w}: Gemmini averages square maps",
                                       tolerance=1))
        return lowered
