"""A constant attention mask before a Softmax: Softmax(x + M) with M holding 0 where a position is kept and a
very large negative number (-inf, finfo.min, -10000) where it is masked (GPT-2's and CLIP's causal masks, a
mask of ones folded by the simplifier), or Softmax(Where(cond, -inf, x)) (DeBERTa's masked_fill).

Quantizing x + M would put every value in one int8 level next to -3.4e38, so the mask joins the Softmax
instead: masked positions take no part in the row's largest value nor in its sum, and come out 0. That is
what the float model computes (exp of a masked value is exactly 0, see MASKED_BELOW), and the golden QDQ
model computes it the same way (golden.py: Add(x, where(keep, 0, -inf)) -> Softmax).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import GemminiConfig
from ..errors import UnsupportedError
from ..graph import Graph

# A masked entry is at most this: x + MASKED_BELOW - max(x) stays below log(smallest float32) (-103.3) for
# any x of an int8 tensor whose scale is below (10000 - 104) / 255 (ops/softmax.py checks the scale).
MASKED_BELOW = -1e4


def is_mask(values: np.ndarray) -> bool:
    """Every value 0 (kept) or at most MASKED_BELOW (masked), at least one masked."""
    values = np.asarray(values, np.float64)
    masked = values <= MASKED_BELOW
    return bool(masked.any()) and bool(np.all(masked | (values == 0)))


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        if node.op_type != "Softmax" or node.fused.mask or len(node.inputs) != 1:
            continue
        found = _mask_of(graph, graph.producer(node.inputs[0]))
        if found is None or graph.only_consumer(node.inputs[0]) is not node:
            continue
        producer, x, masked = found
        x_shape = graph.shapes[x]
        keep = _suffix(~masked, x_shape)
        axis = node.attrs.get("axis", -1) % len(x_shape)
        graph.nodes.remove(producer)
        node.inputs = [x]
        if keep.all():
            changes.append(f"{producer.name} ({producer.op_type}) masks nothing: removed before {node.name}")
            continue
        if axis < len(x_shape) - keep.ndim or not keep.any(axis=axis - (len(x_shape) - keep.ndim)).all():
            raise UnsupportedError(f"node '{node.name}' (Softmax): its constant mask leaves a row with no position "
                                   f"to attend to")
        name = f"{node.name}__keep"
        graph.initializers[name] = keep.astype(np.int8)
        graph.shapes[name], graph.dtypes[name] = keep.shape, np.dtype(np.int8)
        node.fused = replace(node.fused, mask=name)
        changes.append(f"{producer.name} ({producer.op_type}) fused into {node.name}: a constant mask keeping "
                       f"{int(keep.sum())} of {keep.size} positions")
    return changes


def _mask_of(graph: Graph, producer):
    """(producer, the activation it masks, the masked positions) of Add(x, M) or Where(c, -inf, x) /
    Where(c, x, -inf) with constant M, c; None for anything else."""
    if producer is None or graph.is_graph_output(producer.outputs[0]):
        return None
    ins = producer.inputs
    if producer.op_type == "Add" and len(ins) == 2:
        for x, m in (ins, ins[::-1]):
            values = graph.const(m)
            if graph.const(x) is None and values is not None and is_mask(values):
                return producer, x, np.asarray(values) <= MASKED_BELOW
    if producer.op_type == "Where" and len(ins) == 3 and graph.const(ins[0]) is not None:
        cond = np.asarray(graph.const(ins[0]), bool)
        for x, fill, masked in ((ins[2], ins[1], cond), (ins[1], ins[2], ~cond)):
            values = graph.const(fill)
            if graph.const(x) is None and values is not None and np.all(np.asarray(values) <= MASKED_BELOW):
                return producer, x, np.broadcast_to(masked, np.broadcast_shapes(masked.shape, np.shape(values)))
    return None


def _suffix(keep: np.ndarray, x_shape: tuple[int, ...]) -> np.ndarray:
    """`keep` broadcast to the trailing axes of x from its first axis of more than one entry: the kernel reads
    it again for every leading index (flat index modulo its size)."""
    keep = np.asarray(keep, bool)
    keep = keep.reshape((1,) * (len(x_shape) - keep.ndim) + keep.shape)
    lead = next((i for i, d in enumerate(keep.shape) if d != 1), len(x_shape) - 1)
    lead = min(lead, len(x_shape) - 1)
    return np.ascontiguousarray(np.broadcast_to(keep.reshape(keep.shape[lead:]), x_shape[lead:]))
