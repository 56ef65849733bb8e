"""Concat: an int8 copy on the CPU. Its inputs share its scale when quantize.py could tie them (then the
copy is exact); an input with another scale (e.g. fixed by a fused Clip) is requantized on the way.
A model output that keeps its inputs' scales (quantize.segmented_concats) copies every input as it is and
carries one scale per index along the axis, or, kept float32 (quantize.float_tensors), dequantizes each int8
input at its own scale and copies the float32 ones (a detector's sigmoid scores). After lowering,
slices.concat_in_place lets Gemmini producers write their channels in place instead."""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..numerics import quantize
from ..plan import CpuOp
from .common import to_nhwc, to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler

NCHW_TO_NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}


@handler("Concat", since=4)
class ConcatHandler(Handler):
    gemmini = ("none: inputs that a Gemmini matmul/conv produces are written in place into their channel range "
               "(strided rows, zero copy); the rest is an int8 copy (inputs share the output's scale, except in a "
               "model output that nothing else reads: there each input keeps its own, one scale per index along "
               "the axis)")
    limits = ("in place only on the channel (last storage) axis, for inputs read by nothing but Gemmini convs and "
              "matmuls; inputs with a different fixed scale are requantized (1 LSB tolerance)")
    output_scale = "shared"

    def check(self, node, ctx):
        return [] if any(t and not node.is_const(t) for t in node.inputs) else ["only constant operands"]

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        names = [t for t in node.inputs if t]
        sources = {t: ctx.tensor(t) for t in names if not node.is_const(t)}
        rank = len(node.shape(node.output))
        axis = node.attr("axis") % rank
        out_shape = node.shape(node.output)
        nhwc = rank == 4 and (axis == 1 or all(t.layout == "NHWC" for t in sources.values()))
        if nhwc:
            converted = _each_once(lambda t: to_nhwc(node, ctx, t, lowered), list(sources.values()))
            y = ctx.output(node.output, (out_shape[0], out_shape[2], out_shape[3], out_shape[1]), "NHWC")
            axis = NCHW_TO_NHWC_AXIS[axis]
        else:
            converted = _each_once(lambda t: to_plain(node, ctx, t, lowered), list(sources.values()))
            y = ctx.output(node.output, out_shape)
        sources = dict(zip(sources, converted))
        floats = y.dtype == "float32"
        segments = ctx.quant.axis_scales.get(node.output)
        if segments is not None and not floats:
            y = dataclasses.replace(y, scale_axis=segments[0], axis_scales=segments[1])
        lowered.tensors.append(y)
        ids, scales = [], []
        for k, name in enumerate(names):
            if name in sources:
                ids.append(sources[name].id)
                scales.append(1.0 if sources[name].dtype == "float32" else sources[name].scale)
                continue
            # a constant operand (ViT's class token): int8 at the output's scale (with axis scales, its own),
            # as the golden's Q makes it
            value = np.asarray(node.const(name), np.float32)
            value = value.transpose(0, 2, 3, 1) if nhwc else value
            cid = ctx.const_id(node.name, f"const{k}")
            if floats:  # written as it is
                lowered.constants[cid] = np.ascontiguousarray(value)
                ids.append(cid)
                scales.append(1.0)
                continue
            scale = y.scale if segments is None else _own_scale(segments, names, k, node)
            lowered.constants[cid] = quantize(value, scale)
            ids.append(cid)
            scales.append(scale)
        if floats:
            lowered.steps.append(CpuOp(node.name, inputs=tuple(ids), outputs=(y.id,),
                                       params=cpu.Concat(axis, tuple(scales), 1.0, float_out=True),
                                       reason="concatenation into a float32 model output: each int8 input "
                                              "dequantized at its own scale, float32 inputs copied"))
            return lowered
        keeps = segments is not None
        requant = not keeps and any(s != y.scale for s in scales)
        reason = ("concatenation is a memory copy" + (" with requantization of inputs at another scale" if requant
                  else "") + ("; each input keeps its scale up to the model output" if keeps else ""))
        lowered.steps.append(CpuOp(node.name, inputs=tuple(ids), outputs=(y.id,),
                                   params=cpu.Concat(axis, tuple(scales), y.scale, keeps_scales=keeps),
                                   reason=reason))
        return lowered


def _own_scale(segments, names: list[str], k: int, node: NodeView) -> float:
    """The scale quantize.py gave operand `k` of a segmented concat: that of its first index along the axis."""
    axis, per_index = segments
    start = sum(node.shape(n)[axis] for n in names[:k])
    return per_index[start]


def _each_once(convert, sources: list) -> list:
    """`convert` applied once per distinct tensor: an input may be concatenated with itself."""
    done = {}
    for t in sources:
        if t.id not in done:
            done[t.id] = convert(t)
    return [done[t.id] for t in sources]
