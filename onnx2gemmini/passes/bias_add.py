"""MatMul/Conv followed by Add of a constant per-output-channel vector: the vector becomes the bias.

Gemmini adds an int32 bias in the accumulator before scaling, so this Add is free on the array.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph
from .rewrite import absorb_successor, add_initializer


def _channel_vector(value: np.ndarray, out_shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """`value` as a vector along `axis` of `out_shape` if it broadcasts only along that axis."""
    channels = out_shape[axis]
    full = np.broadcast_shapes(value.shape, out_shape) if value.ndim <= len(out_shape) else None
    if full != tuple(out_shape):
        return None
    padded = value.reshape((1,) * (len(out_shape) - value.ndim) + value.shape)
    for i, d in enumerate(padded.shape):
        if i != axis % len(out_shape) and d != 1:
            return None
    vec = padded.reshape(-1)
    return np.broadcast_to(vec, (channels,)).astype(np.float32) if vec.size in (1, channels) else None


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        if node not in graph.nodes or node.op_type not in ("MatMul", "Conv") or node.fused.bias:
            continue
        add = graph.only_consumer(node.outputs[0])
        if add is None or add.op_type != "Add":
            continue
        other = add.inputs[1] if add.inputs[0] == node.outputs[0] else add.inputs[0]
        value = graph.const(other)
        if value is None:
            continue
        if node.op_type == "MatMul":
            if graph.const(node.inputs[1]) is None or graph.const(node.inputs[1]).ndim != 2:
                continue  # an activation, or batched weights (one Gemmini call per batch, no bias row)
            vec = _channel_vector(value, graph.shapes[add.outputs[0]], -1)
            if vec is None or graph.shapes[add.outputs[0]] != graph.shapes[node.outputs[0]]:
                continue
            name = add_initializer(graph, node.name + "_bias", vec)
            node.fused = replace(node.fused, bias=name)
        else:
            vec = _channel_vector(value, graph.shapes[add.outputs[0]], 1)
            if vec is None or graph.shapes[add.outputs[0]] != graph.shapes[node.outputs[0]]:
                continue
            old = graph.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else 0.0
            name = add_initializer(graph, node.name + "_bias", (vec + old).astype(np.float32))
            node.inputs = node.inputs[:2] + [name]
        absorb_successor(graph, node, add)
        changes.append(f"{add.name} became the bias of {node.name}")
    return changes
