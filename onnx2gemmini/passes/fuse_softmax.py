"""MatMul(A, B) -> [Mul or Div by a scalar] -> Softmax(last axis): attention scores and their softmax as one
Gemmini call, the softmax applied by the normalizer as the accumulators are read out (normalizer.py), where
the config has one (has_normalizations) and asks for it (normalizer_softmax).

Only a product of two activations (the normalizer reads one row of the whole J dimension from the
accumulator, which a weight matmul would also allow, but no model was seen to need it), a softmax without an
attention mask, and rows that fit half the accumulator (gemmini.h double-buffers: J padded to DIM <=
acc_rows / 2). The golden computes the scores and their softmax in float, one quantization at the end.
"""
from __future__ import annotations

from dataclasses import replace

from ..config import GemminiConfig
from ..graph import Fused, Graph
from .rewrite import absorb_successor


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    if not (config.has_normalizations and config.normalizer_softmax):
        return []
    changes = []
    for node in list(graph.nodes):
        if node.op_type != "MatMul" or node.fused != Fused() or len(node.inputs) != 2:
            continue
        if any(graph.const(i) is not None or graph.is_index(i) for i in node.inputs):
            continue
        factor, scaled = 1.0, graph.only_consumer(node.outputs[0])
        between = None
        if scaled is not None and scaled.op_type in ("Mul", "Div") and scaled.fused == Fused():
            factor = _scalar_factor(graph, scaled, node.outputs[0])
            if factor is not None:
                between, scaled = scaled, graph.only_consumer(scaled.outputs[0])
        softmax = scaled
        if softmax is None or softmax.op_type != "Softmax" or softmax.fused != Fused() or factor is None:
            continue
        shape = graph.shapes.get(node.outputs[0])
        if not shape or len(shape) < 2 or softmax.attrs.get("axis", -1) % len(shape) != len(shape) - 1:
            continue
        if graph.opset < 13 and len(shape) != 2:  # before opset 13 Softmax flattens every axis from `axis` on
            continue
        j_rows = -(-shape[-1] // config.dim) * config.dim
        if j_rows > config.acc_rows // 2 or any(t in graph.fixed_scales for t in node.outputs + softmax.outputs):
            continue
        for absorbed in ([between] if between is not None else []) + [softmax]:
            absorb_successor(graph, node, absorbed)
        node.fused = replace(node.fused, softmax=factor)
        via = f" and {between.name} ({between.op_type} by {factor:g})" if between is not None else ""
        changes.append(f"{node.name} (MatMul){via} and {softmax.name} (Softmax) fused: the softmax on Gemmini's "
                       "normalizer")
    return changes


def _scalar_factor(graph: Graph, node, scores: str) -> float | None:
    """x * c or x / c with c a scalar constant, as the factor on x; None otherwise."""
    if len(node.inputs) != 2 or scores not in node.inputs:
        return None
    other = node.inputs[1] if node.inputs[0] == scores else node.inputs[0]
    value = graph.const(other)
    if value is None or value.size != 1 or (node.op_type == "Div" and node.inputs[1] != other):
        return None
    c = float(value.reshape(()))
    if node.op_type == "Div":
        return 1.0 / c if c > 0 else None
    return c if c > 0 else None
