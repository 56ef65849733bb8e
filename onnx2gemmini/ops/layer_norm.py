"""LayerNormalization and InstanceNormalization: a float kernel on the CPU (Gemmini's int8 configs have no
normalization unit). An InstanceNormalization with one scale and bias for all channels (what GroupNorm
exports to: Reshape -> InstanceNormalization(ones, zeros) -> Reshape -> Mul -> Add) is a layer norm over
the spatial axes."""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler


@handler("LayerNormalization", since=17)
class LayerNormHandler(Handler):
    gemmini = "none on int8 configs (only configs with normalizations have a LayerNorm unit)"
    limits = "float kernel on the CPU (1 LSB tolerance)"

    def check(self, node, ctx):
        return [] if all(node.is_const(t) for t in node.inputs[1:] if t) else ["non-constant scale or bias"]

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        beta = node.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(1, np.float32)
        return _layer_norm(node, ctx, node.attr("axis", -1), node.const(node.inputs[1]), beta,
                           "layer normalization: float kernel on the CPU")


@handler("InstanceNormalization", since=6)
class InstanceNormHandler(Handler):
    gemmini = "none on int8 configs"
    limits = "one scale and one bias for every channel (GroupNorm's export), else refused; float kernel on " \
             "the CPU (1 LSB tolerance)"

    def check(self, node, ctx):
        scale, bias = node.const(node.inputs[1]), node.const(node.inputs[2])
        if scale is None or bias is None:
            return ["non-constant scale or bias"]
        if np.ptp(scale) != 0 or np.ptp(bias) != 0:
            return ["InstanceNormalization: scale or bias differ between channels"]
        return []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        scale, bias = node.const(node.inputs[1]).reshape(-1)[:1], node.const(node.inputs[2]).reshape(-1)[:1]
        return _layer_norm(node, ctx, 2, scale, bias, "instance normalization: float kernel on the CPU")


def _layer_norm(node: NodeView, ctx: LowerContext, axis: int, gamma, beta, reason: str) -> Lowered:
    """Normalization over the axes [axis, rank) with gamma and beta broadcast over them, in plain layout."""
    lowered = Lowered()
    x = to_plain(node, ctx, ctx.tensor(node.inputs[0]), lowered)
    axis = axis % len(x.shape)
    norm_shape = x.shape[axis:]
    gamma = np.broadcast_to(gamma, norm_shape).astype(np.float32)
    beta = np.broadcast_to(beta, norm_shape).astype(np.float32)
    g_id, b_id = ctx.const_id(node.name, "gamma"), ctx.const_id(node.name, "beta")
    lowered.constants[g_id], lowered.constants[b_id] = np.ascontiguousarray(gamma), np.ascontiguousarray(beta)
    y = ctx.output(node.output, x.shape)
    lowered.tensors.append(y)
    params = cpu.LayerNorm(axis, float(node.attr("epsilon", 1e-5)), x.scale, y.scale)
    lowered.steps.append(CpuOp(node.name, inputs=(x.id, g_id, b_id), outputs=(y.id,), params=params, reason=reason))
    return lowered
