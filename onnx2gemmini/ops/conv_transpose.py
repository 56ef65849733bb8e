"""ConvTranspose on Gemmini, exactly: zero insertion + padding on the CPU, then an ordinary conv.

A transposed conv with stride s, pads (b, e), output_padding a and dilation d equals a stride-1 conv
(dilation d) of the input with s-1 zeros inserted between neighbours and d(k-1)-b zeros before,
d(k-1)-e+a after (negative: cropped), by the spatially flipped kernel with input and output channels
swapped (per group: group g's [C_in/g][C_out/g] block becomes its [C_out/g][C_in/g] conv weight).
The zero insertion is an int8 `remap` (exact, 0 is exactly 0); the conv is ConvHandler's lowering (one
tiled_conv, or im2col + tiled_matmul when dilated; one call per group), so the int32 sums are exact too.
onnxruntime does not fuse DQ->ConvTranspose->Q (it sums in float32), hence a stated 1 LSB tolerance.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..tolerance import FLOAT_REORDERING, Tolerance
from ..graph import NodeView
from .common import to_nhwc
from .context import LowerContext
from .conv import ConvHandler, weight_reasons
from .registry import Handler, Lowered, handler
from .remap import lower_remap

FLOAT_GOLDEN = Tolerance(1, FLOAT_REORDERING.rate, "onnxruntime's ConvTranspose sums in float32")

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


def geometry(node: NodeView) -> dict:
    """Kernel, strides, dilations, output_padding and (top, left, bottom, right) pads, with `output_shape`
    and auto_pad SAME_* resolved as ONNX specifies: the total padding that yields the requested size (SAME:
    input size x stride), its odd half at the end for SAME_UPPER, else at the beginning. A negative total is
    no padding, as in onnxruntime and ONNX's shape inference; an explicit output_shape then gets zeros at the
    end (as in ONNX's own test data)."""
    x = node.shape(node.input("X"))
    kernel = list(node.attr("kernel_shape") or node.shape(node.input("W"))[2:])
    strides = list(node.attr("strides") or [1, 1])
    dilations = list(node.attr("dilations") or [1, 1])
    extra = list(node.attr("output_padding") or [0, 0])
    auto_pad = node.attr("auto_pad", "NOTSET")
    target = list(node.attr("output_shape") or [])[-2:]  # spatial sizes (some exporters give all four)
    if not target and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [x[2] * strides[0], x[3] * strides[1]]
    pads = [0, 0, 0, 0] if auto_pad == "VALID" else list(node.attr("pads") or [0, 0, 0, 0])
    for i in range(len(target)):
        total = strides[i] * (x[2 + i] - 1) + extra[i] + (kernel[i] - 1) * dilations[i] + 1 - target[i]
        if total < 0:
            pads[i], pads[i + 2] = 0, total if node.attr("output_shape") else 0
        else:
            small, big = total // 2, total - total // 2
            pads[i], pads[i + 2] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "output_padding": extra, "pads": pads}


@handler("ConvTranspose", since=11)
class ConvTransposeHandler(Handler):
    gemmini = ("CPU int8 zero insertion, then tiled_conv_auto (or im2col + tiled_matmul_auto when dilated); "
               "groups as one Gemmini call per group")
    limits = ("2-D, constant weights; strides, pads, output_padding, dilations, group, output_shape, auto_pad; "
              "refused where onnxruntime's output size differs from ONNX shape inference's (SAME_* with "
              "output_padding) or onnxruntime refuses it (output_shape a stride beyond the unpadded size); "
              "1 LSB tolerance (onnxruntime sums the QDQ golden in float)")

    def check(self, node, ctx):
        reasons = weight_reasons(node, "transposed convolutions")
        if reasons:
            return reasons
        g, x = geometry(node), node.shape(node.input("X"))
        if node.attr("output_shape"):
            out = list(node.attr("output_shape"))[-2:]
            unpadded = [(x[2 + i] - 1) * g["strides"][i] + (g["kernel"][i] - 1) * g["dilations"][i] + 1
                        for i in range(2)]
            if any(o - u >= s for o, u, s in zip(out, unpadded, g["strides"])):
                return [f"output_shape {out}: a stride or more beyond the unpadded output {unpadded} "
                        "(onnxruntime refuses it)"]
        maps, conv = self.maps(node)
        size = [len(m) - (conv["kernel"][i] - 1) * conv["dilations"][i] for i, m in enumerate(maps[2:])]
        declared = node.shape(node.output)
        if len(declared) != 4 or size != list(declared[2:]):  # e.g. SAME_* with output_padding
            reasons.append(f"the attributes give a {size[0]}x{size[1]} output, ONNX shape inference "
                           f"{'x'.join(map(str, declared))} (onnxruntime and shape inference disagree)")
        return reasons

    def weight_input(self, node):
        return node.input("W")

    def float_weights(self, node):
        """As given: [C_in][C_out/group][KH][KW] (one per-tensor scale, so the layout does not matter here)."""
        b = node.input("B")
        return node.const(node.input("W")), (node.const(b) if b else None)

    def output_shift(self, node, weight_error, input_means):
        """The mean over output positions of the error, from inputs at their channel means: each kernel tap
        reaches only the outputs its input positions land on (about 1/stride^2 of them), so taps are
        weighted by how many input positions put them inside the output."""
        mean = np.asarray(input_means["axis1"], np.float64)
        ic, ocg, kh, kw = weight_error.shape
        groups = node.attr("group", 1)
        g = geometry(node)
        out = node.shape(node.output)[2:]
        reach = []  # per axis and tap: how many input positions it carries into the output
        for i, k in enumerate((kh, kw)):
            pos = (np.arange(node.shape(node.input("X"))[2 + i])[:, None] * g["strides"][i]
                   + np.arange(k) * g["dilations"][i] - g["pads"][i])
            reach.append(((pos >= 0) & (pos < out[i])).sum(axis=0))
        shift = np.einsum("gicyx,gi,y,x->gc", weight_error.reshape(groups, ic // groups, ocg, kh, kw),
                          mean.reshape(groups, ic // groups), *reach)
        return shift.reshape(groups * ocg) / (out[0] * out[1])

    @staticmethod
    def maps(node: NodeView) -> tuple[list[list[int]], dict]:
        """Per-axis maps (ONNX order) of the zero-inserted input, and the geometry of the conv after it."""
        n, c, h, w = node.shape(node.input("X"))
        t = geometry(node)
        spatial = [upsample_map(size, t["kernel"][i], t["strides"][i], t["dilations"][i], t["pads"][i],
                                t["pads"][i + 2], t["output_padding"][i]) for i, size in enumerate((h, w))]
        g = {"kernel": t["kernel"], "strides": [1, 1], "dilations": t["dilations"], "pads": [0, 0, 0, 0]}
        return [list(range(n)), list(range(c))] + spatial, g

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_nhwc(node, ctx, ctx.tensor(node.input("X")), lowered)
        maps, g = self.maps(node)
        # The node's tolerance rides on this exact step: onnxruntime does not fuse DQ->ConvTranspose->Q
        # into an integer kernel, so the golden sums in float32.
        up, up_t = lower_remap(node, ctx, x, maps, 0, "ConvTranspose: zero insertion and padding on the CPU, "
                               "so Gemmini runs an ordinary conv (onnxruntime's float ConvTranspose: 1 LSB)",
                               temp="upsampled", golden=FLOAT_GOLDEN)
        lowered.add(up)
        out_shape = node.shape(node.output)
        y = ctx.output(node.output, (out_shape[0], out_shape[2], out_shape[3], out_shape[1]), "NHWC")
        lowered.tensors.append(y)
        wq = ctx.weight(node.name)
        groups = node.attr("group", 1)
        ic, ocg, kh, kw = wq.q.shape
        # [C_in][C_out/g][KH][KW] -> per group [C_out/g][C_in/g], flipped: a grouped conv's [C_out][C_in/g][KH][KW]
        w_oihw = np.ascontiguousarray(wq.q.reshape(groups, ic // groups, ocg, kh, kw).transpose(0, 2, 1, 3, 4)
                                      [..., ::-1, ::-1].reshape(groups * ocg, ic // groups, kh, kw))
        # ConvHandler's lowering with the geometry of the conv after zero insertion, not the node's own
        return lowered.add(_CONV._lower_ranges(node, ctx, up_t, y, replace(wq, q=w_oihw), groups, g))
