"""Conv -> BatchNormalization (inference) becomes one Conv with scaled weights and a shifted bias."""
from __future__ import annotations

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph
from .rewrite import absorb_successor, add_initializer


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        if node.op_type != "Conv" or node not in graph.nodes:
            continue
        bn = graph.only_consumer(node.outputs[0])
        if bn is None or bn.op_type != "BatchNormalization" or len(bn.outputs) != 1:
            continue
        params = [graph.const(t) for t in bn.inputs[1:5]]
        weight = graph.const(node.inputs[1])
        if weight is None or any(p is None for p in params):
            continue
        scale, shift, mean, var = (p.astype(np.float64) for p in params)
        bias = graph.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        bias = np.zeros(weight.shape[0]) if bias is None else bias.astype(np.float64)
        factor = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
        new_w = (weight.astype(np.float64) * factor.reshape(-1, *([1] * (weight.ndim - 1)))).astype(np.float32)
        new_b = ((bias - mean) * factor + shift).astype(np.float32)
        w_name = add_initializer(graph, node.name + "_bnfold_W", new_w)
        b_name = add_initializer(graph, node.name + "_bnfold_B", new_b)
        node.inputs = [node.inputs[0], w_name, b_name]
        absorb_successor(graph, node, bn)
        changes.append(f"folded {bn.name} into {node.name}")
    return changes
