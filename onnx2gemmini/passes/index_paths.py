"""Lookups whose indices are computed from token ids (an integer model input) by a small integer subgraph:

* indices that come out the same whatever the ids (RoBERTa's token types: a constant buffer of zeros gathered
  at the position ids) make the lookup a constant: the Gather becomes an initializer;
* RoBERTa's position ids (pad + the running count of non-padding ids, pad at padding ids;
  create_position_ids_from_input_ids) make the Gather read the ids themselves (fused.positions = the pad id),
  and the CPU step derives the positions as it copies rows.

As for attention masks (input_mask.py), which function the subgraph computes is not read off its ops: it is
run by onnxruntime on probe ids, and the form must hold on every probe, or nothing changes.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph
from ..kernels import padding_positions
from .probe import LAYER_OPS, MAX_NODES, ancestors, drop_dead, probe_session

PROBES = 6


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        if node.op_type != "Gather" or len(node.inputs) != 2:
            continue
        data, indices = node.inputs
        table = graph.const(data)
        if table is None or graph.const(indices) is not None or graph.is_index(indices):
            continue
        nodes, leaves = ancestors(graph, indices)
        if len(leaves) != 1 or len(nodes) > MAX_NODES or any(n.op_type in LAYER_OPS for n in nodes):
            continue
        ids = next(iter(leaves))
        info = next((vi for vi in graph.inputs if vi.name == ids), None)
        if info is None or not graph.is_index(ids):
            continue
        try:
            session = probe_session(graph, nodes, info, indices)
        except Exception:  # noqa: BLE001 - a subgraph onnxruntime cannot run alone is left as it is
            continue
        pads = _pad_candidates(graph, nodes, info.index_limit)
        probes = list(_probes(info, pads))
        values = [session.run([indices], {ids: p})[0] for p in probes]
        axis = node.attrs.get("axis", 0) % table.ndim
        if all(np.array_equal(v, values[0]) for v in values):
            graph.initializers[node.outputs[0]] = np.take(table, values[0], axis=axis)
            graph.nodes.remove(node)
            changes.append(f"{node.name} (Gather at indices that do not depend on '{ids}') folded to a constant")
            continue
        pad = next((c for c in pads if all(np.array_equal(v, padding_positions(p, c)) for v, p in zip(values, probes))),
                   None)
        if pad is None or axis != 0 or pad + info.shape[-1] >= table.shape[0]:
            continue
        node.inputs = [data, ids]
        node.fused = replace(node.fused, positions=int(pad))
        changes.append(f"{node.name} (Gather at position ids counted over the non-padding '{ids}', pad {pad}) "
                       f"reads '{ids}'")
    if changes:
        drop_dead(graph)
    return changes


def _pad_candidates(graph: Graph, nodes, limit: int | None) -> list[int]:
    """The integer scalars the subgraph compares with or adds: where a pad id would appear."""
    found = []
    for n in nodes:
        for i in n.inputs:
            value = graph.const(i)
            if value is not None and value.size == 1 and value.dtype.kind in "iu":
                v = int(value.reshape(-1)[0])
                if v >= 0 and (limit is None or v < limit) and v not in found:
                    found.append(v)
    return found


def _probes(info, pads: list[int]):
    """Random ids, and for every pad candidate the same ids padded at the end and at random places."""
    rng = np.random.default_rng(0)
    shape, high = tuple(info.shape), info.index_limit or 2
    for _ in range(PROBES):
        ids = rng.integers(0, high, shape).astype(info.dtype)
        yield ids
        for pad in pads:
            padded = ids.copy()
            padded[..., rng.integers(1, shape[-1]):] = pad
            yield padded
            scattered = ids.copy()
            scattered[rng.random(shape) < 0.3] = pad
            yield scattered
