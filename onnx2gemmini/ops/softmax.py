"""Softmax: a float kernel on the CPU (dequantize, softmax, quantize): Gemmini's int8 configs have none. A
constant attention mask fused into it (passes/fuse_mask.py) leaves the masked positions out."""
from __future__ import annotations

from .. import cpu
from ..errors import UnsupportedError
from ..graph import NodeView
from ..passes.fuse_mask import MASKED_BELOW
from ..plan import CpuOp
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler

# exp(-104) is below float32's smallest subnormal: a masked value MASKED_BELOW + (x - max) comes out exactly 0
# in onnxruntime's float softmax while the row's int8 values span less than -MASKED_BELOW - EXP_ZERO_BELOW.
EXP_ZERO_BELOW = 104.0


@handler("Softmax", since=13)
class SoftmaxHandler(Handler):
    gemmini = "none (only configs with normalizations have a softmax unit)"
    limits = ("float32 on the CPU, 1 LSB tolerance vs onnxruntime; an attention mask (constant: x + M with M 0 or "
              f"<= {MASKED_BELOW:g}; or built from an integer input: padding, causal or query-and-key) fused in, rows up to "
              f"{cpu.float_ops.MASKED_SOFTMAX_MAX_ROW}")

    def check(self, node, ctx):
        axis = node.attr("axis", -1) % len(node.shape(node.inputs[0]))
        if (node.fused.mask or node.fused.input_mask) and \
                node.shape(node.inputs[0])[axis] > cpu.float_ops.MASKED_SOFTMAX_MAX_ROW:
            return [f"a masked softmax over more than {cpu.float_ops.MASKED_SOFTMAX_MAX_ROW} positions"]
        return []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_plain(node, ctx, ctx.tensor(node.inputs[0]), lowered)
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        rank = len(x.shape)
        axis = node.attr("axis", -1) % rank
        inputs, params = (x.id,), cpu.Softmax(axis, x.scale, y.scale)
        if (node.fused.mask or node.fused.input_mask) and 255 * x.scale >= -MASKED_BELOW - EXP_ZERO_BELOW:
            raise UnsupportedError(f"node '{node.name}' (Softmax): its input's range ({127 * x.scale:.4g}) is "
                                   f"too wide for its attention mask to mask exactly")
        if node.fused.input_mask:
            name, form = node.fused.input_mask
            inputs = (x.id, ctx.tensor(name).id)
            params = cpu.InputMaskedSoftmax(axis, x.scale, y.scale, form)
        if node.fused.mask:
            keep_id = ctx.const_id(node.name, "keep")
            lowered.constants[keep_id] = node.const(node.fused.mask)
            inputs, params = (x.id, keep_id), cpu.MaskedSoftmax(axis, x.scale, y.scale)
        lowered.steps.append(CpuOp(node.name, inputs=inputs, outputs=(y.id,), params=params,
                                   reason="Gemmini's int8 configs have no softmax unit"))
        return lowered
