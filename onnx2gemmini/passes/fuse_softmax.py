"""MatMul(A, B) -> [Mul or Div by a scalar] -> [Add of a constant] -> [a Flatten or Reshape keeping the last
axis] -> Softmax(last axis): attention scores (with Swin's relative position bias: the matmul's int32 D) and
their softmax as one Gemmini call, the softmax applied by the normalizer as the accumulators are read out
(normalizer.py), where the config has one (has_normalizations) and asks for it (normalizer_softmax).

Unlike the other passes this one runs after calibration (compiler.py): whether the normalizer computes a
softmax right depends on the scores' scale and span (normalizer.softmax_call, fits_scores), which only the
calibrated ranges tell. A softmax that does not suit it stays on the CPU, and the compile says why.

Only a product of two activations, a softmax without an attention mask, and rows that fit half the
accumulator (gemmini.h double-buffers: J padded to DIM <= acc_rows / 2). The golden computes the scores and
their softmax in float, one quantization at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import normalizer
from ..config import GemminiConfig
from ..graph import Fused, Graph, Node
from .rewrite import absorb_successor


@dataclass(frozen=True)
class Match:
    matmul: Node
    between: tuple[Node, ...]  # the scalar Mul/Div, the Add of a constant and the Flatten/Reshape, in order
    softmax: Node
    factor: float              # what the scores are multiplied by between the MatMul and the Softmax
    bias: str | None = None    # the constant then added to them


def wanted(config: GemminiConfig) -> bool:
    return config.has_normalizations and config.normalizer_softmax


def run_calibrated(graph: Graph, config: GemminiConfig, scales: dict[str, float],
                   amax: dict[str, float]) -> tuple[list[str], list[str]]:
    """Fuse every match whose scores suit the normalizer at the calibrated `scales` (of the unfused graph)
    and ranges `amax`: (the change log, a warning per softmax left on the CPU)."""
    changes, kept = [], []
    for m in candidates(graph, config):
        a, b = m.matmul.inputs
        k, j = graph.shapes[a][-1], graph.shapes[m.matmul.outputs[0]][-1]
        call = normalizer.softmax_call(scales[a] * scales[b] * m.factor, j, k, graph.const(m.bias) if m.bias else None)
        span = 2 * amax.get(m.softmax.inputs[0], float("inf"))  # the scores as the Softmax reads them
        if call is None:
            kept.append(f"softmax '{m.softmax.name}' stays on the CPU: its scores' scale "
                        f"({scales[a] * scales[b] * m.factor:.3g}) does not suit Gemmini's normalizer (its int32 "
                        "sums would wrap, or its exp would be too coarse)")
        elif not normalizer.fits_scores(call[0], span / 2):
            kept.append(f"softmax '{m.softmax.name}' stays on the CPU: its scores span {span:.3g} on the "
                        f"calibration data; Gemmini's normalizer exponentiates right up to "
                        f"{normalizer.score_range(call[0]) / normalizer.SCORE_HEADROOM:.3g}")
        else:
            changes.append(fuse(graph, m))
    return changes, kept


def candidates(graph: Graph, config: GemminiConfig) -> list[Match]:
    found = []
    for node in graph.nodes:
        if node.op_type != "MatMul" or node.fused != Fused() or len(node.inputs) != 2:
            continue
        if any(graph.const(i) is not None or graph.is_index(i) for i in node.inputs):
            continue
        shape = graph.shapes.get(node.outputs[0])
        factor, between, last = 1.0, [], node.outputs[0]
        follower = graph.only_consumer(last)
        if follower is not None and follower.op_type in ("Mul", "Div") and follower.fused == Fused():
            factor = _scalar_factor(graph, follower, last)
            if factor is None:
                continue
            between.append(follower)
            last, follower = follower.outputs[0], graph.only_consumer(follower.outputs[0])
        bias = None
        if follower is not None and follower.op_type == "Add" and follower.fused == Fused():
            bias = _constant_addend(graph, follower, last, shape)
            if bias is not None:
                between.append(follower)
                last, follower = follower.outputs[0], graph.only_consumer(follower.outputs[0])
        if follower is not None and follower.op_type in ("Flatten", "Reshape") and _keeps_rows(graph, follower):
            between.append(follower)  # an opset-11 Softmax arrives as Flatten -> Softmax(last axis) -> Reshape
            last, follower = follower.outputs[0], graph.only_consumer(follower.outputs[0])
        softmax = follower
        if softmax is None or softmax.op_type != "Softmax" or softmax.fused != Fused() or not shape or len(shape) < 2:
            continue
        rank = len(graph.shapes[last])
        if softmax.attrs.get("axis", -1) % rank != rank - 1 or (graph.opset < 13 and rank != 2):
            continue  # before opset 13 Softmax flattens every axis from `axis` on
        if -(-shape[-1] // config.dim) * config.dim > config.acc_rows // 2:
            continue
        if any(t in graph.fixed_scales for n in [node, *between, softmax] for t in n.outputs):
            continue
        found.append(Match(node, tuple(between), softmax, factor, bias))
    return found


def fuse(graph: Graph, m: Match) -> str:
    """The MatMul takes over the Softmax's output; the nodes between disappear. Returns the change line."""
    for absorbed in m.between + (m.softmax,):
        absorb_successor(graph, m.matmul, absorbed)
    m.matmul.fused = replace(m.matmul.fused, softmax=m.factor, softmax_bias=m.bias)
    via = "".join(f" and {n.name} ({n.op_type})" for n in m.between)
    return f"{m.matmul.name} (MatMul){via} and {m.softmax.name} (Softmax) fused: the softmax on Gemmini's normalizer"


def _other_operand(node, scores: str) -> str | None:
    """The input of a two-input node that is not the scores."""
    if len(node.inputs) != 2 or scores not in node.inputs:
        return None
    return node.inputs[1] if node.inputs[0] == scores else node.inputs[0]


def _constant_addend(graph: Graph, node, scores: str, shape) -> str | None:
    """The float constant x + c adds to the scores x, if it broadcasts to their shape without growing it."""
    other = _other_operand(node, scores)
    value = None if other is None else graph.const(other)
    if value is None or value.dtype.kind != "f" or value.ndim > len(shape):
        return None
    try:
        return other if np.broadcast_shapes(value.shape, shape) == tuple(shape) else None
    except ValueError:
        return None


def _keeps_rows(graph: Graph, node) -> bool:
    """A Flatten or Reshape that keeps the last axis: every row of scores stays one row."""
    before, after = graph.shapes.get(node.inputs[0]), graph.shapes.get(node.outputs[0])
    return bool(before and after) and before[-1] == after[-1]


def _scalar_factor(graph: Graph, node, scores: str) -> float | None:
    """x * c or x / c with c a positive scalar constant, as the factor on x; None otherwise."""
    other = _other_operand(node, scores)
    value = None if other is None else graph.const(other)
    if value is None or value.size != 1 or (node.op_type == "Div" and node.inputs[1] != other):
        return None
    c = float(value.reshape(()))
    if c <= 0:
        return None
    return 1.0 / c if node.op_type == "Div" else c
