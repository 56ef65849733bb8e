"""Concat: an int8 copy on the CPU. Its inputs share its scale when quantize.py could tie them (then the
copy is exact); an input with another scale (e.g. fixed by a fused Clip) is requantized on the way.
After lowering, slices.concat_in_place lets Gemmini producers write their channels in place instead."""
from __future__ import annotations

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .common import to_nhwc, to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler

NCHW_TO_NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}


@handler("Concat", since=4)
class ConcatHandler(Handler):
    gemmini = ("none: inputs that a Gemmini matmul/conv produces are written in place into their channel range "
               "(strided rows, zero copy); the rest is an int8 copy (inputs share the output's scale)")
    limits = ("in place only on the channel (last storage) axis, for inputs read by nothing but Gemmini convs and "
              "matmuls; inputs with a different fixed scale are requantized (1 LSB tolerance)")
    output_scale = "shared"

    def check(self, node, ctx):
        return ["constant operand"] if any(node.is_const(t) for t in node.inputs) else []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        sources = [ctx.tensor(t) for t in node.inputs if t]
        rank = len(node.shape(node.output))
        axis = node.attr("axis") % rank
        out_shape = node.shape(node.output)
        if rank == 4 and all(t.layout == "NHWC" for t in sources):
            y = ctx.output(node.output, (out_shape[0], out_shape[2], out_shape[3], out_shape[1]), "NHWC")
            axis = NCHW_TO_NHWC_AXIS[axis]
        elif rank == 4 and axis == 1:
            sources = _each_once(lambda t: to_nhwc(node, ctx, t, lowered), sources)
            y = ctx.output(node.output, (out_shape[0], out_shape[2], out_shape[3], out_shape[1]), "NHWC")
            axis = 3
        else:
            sources = _each_once(lambda t: to_plain(node, ctx, t, lowered), sources)
            y = ctx.output(node.output, out_shape)
        lowered.tensors.append(y)
        scales = [t.scale for t in sources]
        requant = any(s != y.scale for s in scales)
        lowered.steps.append(CpuOp(node.name, inputs=tuple(t.id for t in sources), outputs=(y.id,),
                                   params=cpu.Concat(axis, tuple(scales), y.scale),
                                   reason="concatenation is a memory copy" +
                                   (" with requantization of inputs at another scale" if requant else "")))
        return lowered


def _each_once(convert, sources: list) -> list:
    """`convert` applied once per distinct tensor: an input may be concatenated with itself."""
    done = {}
    for t in sources:
        if t.id not in done:
            done[t.id] = convert(t)
    return [done[t.id] for t in sources]
