"""BatchNormalization -> Mul / Add by per-channel constants becomes one BatchNormalization.

Caffe-converted nets (DenseNet's Scale layers) follow a standalone BatchNormalization with a per-channel
Mul and Add; each would be its own CPU pass over the tensor. Scaling and shifting the normalization's
gamma and beta gives the same affine map in one step: (x - mean) * g / sqrt(var + eps) + b, then * s + t.
A pre-quantized model that fixes a scale between the ops is left alone (its rounding is part of it).
"""
from __future__ import annotations

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph
from .rewrite import absorb_successor, add_initializer


def _per_channel(value: np.ndarray | None, channels: int, rank: int) -> np.ndarray | None:
    """A constant that broadcasts over the channel axis (1) only, as a [channels] vector; else None."""
    if value is None or value.ndim > rank or not np.issubdtype(value.dtype, np.floating):
        return None
    if value.size == 1:
        return np.full(channels, float(value.reshape(-1)[0]))
    shape = (1,) * (rank - value.ndim) + value.shape
    if shape[1] == channels and all(d == 1 for i, d in enumerate(shape) if i != 1):
        return value.reshape(channels).astype(np.float64)
    return None


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization" or bn not in graph.nodes or len(bn.outputs) != 1:
            continue
        params = [graph.const(t) for t in bn.inputs[1:5]]
        if any(p is None for p in params):
            continue
        rank = len(graph.shapes.get(bn.inputs[0], ()))
        channels = params[0].size
        while True:
            nxt = graph.only_consumer(bn.outputs[0])
            if nxt is None or nxt.op_type not in ("Mul", "Add") or bn.outputs[0] in graph.fixed_scales \
                    or graph.is_graph_output(bn.outputs[0]):
                break
            other = [t for t in nxt.inputs if t != bn.outputs[0]]
            value = _per_channel(graph.const(other[0]), channels, rank) if len(other) == 1 else None
            if value is None:
                break
            scale, shift = graph.const(bn.inputs[1]).astype(np.float64), graph.const(bn.inputs[2]).astype(np.float64)
            if nxt.op_type == "Mul":
                scale, shift = scale * value, shift * value
            else:
                shift = shift + value
            bn.inputs[1] = add_initializer(graph, bn.name + "_affine_scale", scale.astype(np.float32))
            bn.inputs[2] = add_initializer(graph, bn.name + "_affine_B", shift.astype(np.float32))
            absorb_successor(graph, bn, nxt)
            changes.append(f"{nxt.name} ({nxt.op_type} by a per-channel constant) merged into {bn.name}")
    return changes
