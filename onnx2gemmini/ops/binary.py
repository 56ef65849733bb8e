"""Sub, Mul, Div, PRelu, and the Adds Gemmini's resadd cannot take (broadcasting, constants): a float kernel
on the CPU — dequantize, compute in float32, quantize (exact against onnxruntime's float kernels)."""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp, Tensor
from .activations import FINITE, lower_gated
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler

NAMES = {"Add": "add", "Sum": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min",
         "PRelu": "prelu"}


def lower_binary(node: NodeView, ctx: LowerContext, reason: str, fn: str | None = None) -> Lowered:
    """Two operands (activations or constants) with ONNX broadcasting, in NHWC when the activations are;
    `fn`: the kernel's function (default: the node's op)."""
    lowered = Lowered()
    out_shape = node.shape(node.output)
    acts = [ctx.tensor(t) for t in node.inputs if not node.is_const(t)]
    nhwc = len(out_shape) == 4 and all(t.layout == "NHWC" for t in acts) and acts
    operands, scales = [], []
    for i, name in enumerate(node.inputs):
        if node.is_const(name):
            value = np.asarray(node.const(name), np.float32)
            if nhwc:
                value = value.reshape((1,) * (4 - value.ndim) + value.shape).transpose(0, 2, 3, 1)
            cid = ctx.const_id(node.name, f"operand{i}")
            lowered.constants[cid] = np.ascontiguousarray(value)
            operands.append(cid)
            scales.append(None)
        else:
            t: Tensor = ctx.tensor(name)
            if not nhwc:
                t = to_plain(node, ctx, t, lowered)
            operands.append(t.id)
            scales.append(t.scale)
    shape = (out_shape[0], out_shape[2], out_shape[3], out_shape[1]) if nhwc else out_shape
    y = ctx.output(node.output, shape, "NHWC" if nhwc else "plain")
    lowered.tensors.append(y)
    lowered.steps.append(CpuOp(node.name, inputs=tuple(operands), outputs=(y.id,),
                               params=cpu.Binary(fn or NAMES[node.op_type], tuple(scales), y.scale, node.fused.relu),
                               reason=reason))
    return lowered


class _CpuBinary(Handler):
    gemmini = "none: a float kernel on the CPU (broadcasting, constants)"
    limits = "exact against onnxruntime's float evaluation of the QDQ model"

    def check(self, node, ctx):
        return ["both operands constant"] if all(node.is_const(t) for t in node.inputs) else []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        if node.fused.gate:  # Mul(x, f(x)) fused into one lookup table of x
            return lower_gated(node, ctx)
        return lower_binary(node, ctx, f"{node.op_type}: Gemmini has no elementwise {node.op_type.lower()}")

    def writes_float(self, node: NodeView) -> bool:
        return bool(node.fused.gate) and node.fused.gate[0] in FINITE  # a gate's lookup table


for _op in ("Sub", "Mul", "Div"):
    handler(_op, since=7)(type(f"{_op}Handler", (_CpuBinary,), {}))


@handler("PRelu", since=9)
class PReluHandler(Handler):
    gemmini = "none: a float kernel on the CPU"
    limits = "constant slope (scalar, per channel or any shape broadcasting to the input); exact"

    def check(self, node, ctx):
        return [] if node.is_const(node.inputs[1]) else ["non-constant slope"]

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        return lower_binary(node, ctx, "PRelu: Gemmini has no parametric ReLU; x < 0 ? x * slope : x in float32")
