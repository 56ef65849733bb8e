"""ConvTranspose on Gemmini, exactly: zero insertion + padding on the CPU, then an ordinary conv.

A transposed conv with stride s, pads (b, e), output_padding a and dilation d equals a stride-1 conv
(dilation d) of the input with s-1 zeros inserted between neighbours and d(k-1)-b zeros before,
d(k-1)-e+a after (negative: cropped), by the spatially flipped kernel with input and output channels
swapped. The zero insertion is an int8 `remap` (exact, 0 is exactly 0); the conv is ConvHandler's
lowering (one tiled_conv, or im2col + tiled_matmul when dilated), so the int32 sums are exact too.
onnxruntime does not fuse DQ->ConvTranspose->Q (it sums in float32), hence a stated 1 LSB tolerance.
"""
from __future__ import annotations

import numpy as np

from ..graph import NodeView
from .common import to_nhwc
from .context import LowerContext
from .conv import ConvHandler, weight_reasons
from .registry import Handler, Lowered, handler
from .resample import lower_remap

_CONV = ConvHandler()  # its lowering pieces, not a second registration


def upsample_map(n: int, kernel: int, stride: int, dilation: int, before: int, after: int, extra: int) -> list[int]:
    """Source position of every position of the zero-inserted, padded axis (-1: an inserted zero)."""
    head = dilation * (kernel - 1) - before
    length = (n - 1) * stride + 1 + head + dilation * (kernel - 1) - after + extra
    out = []
    for o in range(length):
        j = o - head
        out.append(j // stride if j >= 0 and j % stride == 0 and j // stride < n else -1)
    return out


@handler("ConvTranspose", since=11)
class ConvTransposeHandler(Handler):
    gemmini = "CPU int8 zero insertion, then tiled_conv_auto (or im2col + tiled_matmul_auto when dilated)"
    limits = ("2-D, group 1, constant weights; strides, pads, output_padding, dilations; auto_pad SAME_* and "
              "output_shape are refused; 1 LSB tolerance (onnxruntime sums the QDQ golden in float)")

    def check(self, node, ctx):
        reasons = weight_reasons(node, "transposed convolutions")
        if node.attr("group", 1) != 1:
            reasons.append(f"group {node.attr('group')}")
        if node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            reasons.append(f"auto_pad {node.attr('auto_pad')}")
        if node.attr("output_shape"):
            reasons.append("output_shape attribute")
        return reasons

    def weight_input(self, node):
        return node.input("W")

    def float_weights(self, node):
        """As given: [C_in][C_out][KH][KW] (one per-tensor scale, so the layout does not matter here)."""
        b = node.input("B")
        return node.const(node.input("W")), (node.const(b) if b else None)

    @staticmethod
    def maps(node: NodeView) -> tuple[list[list[int]], dict]:
        """Per-axis maps (ONNX order) of the zero-inserted input, and the geometry of the conv after it."""
        n, c, h, w = node.shape(node.input("X"))
        kernel = list(node.attr("kernel_shape") or node.shape(node.input("W"))[2:])
        strides = list(node.attr("strides") or [1, 1])
        dilations = list(node.attr("dilations") or [1, 1])
        pads = [0] * 4 if node.attr("auto_pad", "NOTSET") == "VALID" else list(node.attr("pads") or [0] * 4)
        extra = list(node.attr("output_padding") or [0, 0])
        spatial = [upsample_map(size, kernel[i], strides[i], dilations[i], pads[i], pads[i + 2], extra[i])
                   for i, size in enumerate((h, w))]
        g = {"kernel": kernel, "strides": [1, 1], "dilations": dilations, "pads": [0, 0, 0, 0]}
        return [list(range(n)), list(range(c))] + spatial, g

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_nhwc(node, ctx, ctx.tensor(node.input("X")), lowered)
        maps, g = self.maps(node)
        # The node's tolerance (1 LSB) rides on this exact step: onnxruntime does not fuse
        # DQ->ConvTranspose->Q into an integer kernel, so the golden sums in float32.
        up, up_t = lower_remap(node, ctx, x, maps, 0, "ConvTranspose: zero insertion and padding on the CPU, "
                               "so Gemmini runs an ordinary conv (onnxruntime's float ConvTranspose: 1 LSB)",
                               temp="upsampled", tolerance=1)
        lowered.add(up)
        out_shape = node.shape(node.output)
        y = ctx.output(node.output, (out_shape[0], out_shape[2], out_shape[3], out_shape[1]), "NHWC")
        lowered.tensors.append(y)
        wq = ctx.weight(node.name)
        w_oihw = np.ascontiguousarray(wq.q.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
        return lowered.add(_CONV._lower_one(node, ctx, up_t, y, w_oihw, wq.bias, wq.scale, "", g))
