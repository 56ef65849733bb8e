"""Which judged output parts each tensor can change: the branches of a model, for the default calibration.

Why: a detector's boxes and its class scores come from one backbone and a branch each, and the branches can
want different ranges: YOLOv8n's class branch feeds a sigmoid and wants its peaks (minmax) where the
backbone wants mse's clip (on calibration-split draws: class-score rows 8.57 dB with mse everywhere, 7.38
with minmax everywhere, 10.10 with minmax on the class branch alone, the boxes unchanged). A whole-model
candidate gives every tensor one estimator, so refine.py tries each branch's ranges as one change.

Finding the branches takes more than the graph's edges: YOLOv8's two branches meet in a Concat, are
reshaped and concatenated again, and only a Split parts them before the output. So which output elements a
tensor reaches is followed element by element back through the ops that only move values (Concat, Split,
Slice, Transpose and the reshapes): each is run forward on element ids, which says where every output
element came from. Any other op is taken to mix all of its inputs into every output element it writes: a
tensor may be said to reach a part it does not (then it is not told apart), never the other way round.
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, NodeView, topological

RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
MOVES = RESHAPES | {"Concat", "Split", "Slice", "Transpose"}


def reach(graph: Graph, handlers, parts: list[tuple[str, tuple]]) -> dict[str, frozenset[int]]:
    """Tensor -> the indices of `parts` ((output, index tuple) each) whose elements it can change; tensors
    that reach none are left out."""
    masks: dict[str, dict[int, np.ndarray | None]] = {}  # tensor -> part -> elements reached (None: all)
    for k, (output, index) in enumerate(parts):
        if output not in graph.shapes:
            masks.setdefault(output, {})[k] = None
            continue
        mask = np.zeros(graph.shapes[output], bool)
        mask[index] = True
        _merge(masks.setdefault(output, {}), k, mask)
    order = topological(graph.nodes, [i.name for i in graph.inputs] + list(graph.initializers))
    for node in reversed(order):
        reached = {o: masks[o] for o in node.outputs if o in masks}
        if not reached:
            continue
        data = [i for i in node.inputs if i and i not in graph.initializers]
        moved = _moved(graph, handlers, node, data) if node.op_type in MOVES else None
        for out, by_part in reached.items():
            for k, mask in by_part.items():
                for i in data:
                    if moved is None or out not in moved:
                        _merge(masks.setdefault(i, {}), k, None)
                        continue
                    ids, (first, size) = moved[out], moved[i]
                    picked = ids if mask is None else ids[mask]
                    picked = picked[(picked >= first) & (picked < first + size)] - first
                    if picked.size:
                        into = np.zeros(size, bool)
                        into[picked] = True
                        _merge(masks.setdefault(i, {}), k, into.reshape(graph.shapes[i]))
    return {t: frozenset(by_part) for t, by_part in masks.items() if by_part}


def _merge(by_part: dict[int, np.ndarray | None], k: int, mask: np.ndarray | None) -> None:
    if k in by_part and by_part[k] is None:
        return
    if mask is None or k not in by_part:
        by_part[k] = mask
    else:
        by_part[k] = by_part[k] | mask


def _moved(graph: Graph, handlers, node, data: list[str]) -> dict | None:
    """For a node that only moves values: {output: the element id each of its elements came from} and
    {input: (its first id, its size)}; None when the node is not one this follows (unknown shapes, a
    parameter that is not constant)."""
    if any(t not in graph.shapes for t in list(data) + [o for o in node.outputs if o]):
        return None
    spans, ids, first = {}, [], 0
    for i in dict.fromkeys(data):
        size = int(np.prod(graph.shapes[i], dtype=np.int64))
        spans[i] = (first, size)
        ids.append(np.arange(first, first + size, dtype=np.int64).reshape(graph.shapes[i]))
        first += size
    by_name = dict(zip(dict.fromkeys(data), ids))
    try:
        outs = _forward(graph, handlers, node, [by_name[i] for i in data])
    except (KeyError, ValueError, TypeError, IndexError):
        return None
    if outs is None:
        return None
    found = {o: a for o, a in zip(node.outputs, outs) if o}
    if any(a.shape != tuple(graph.shapes[o]) for o, a in found.items()):
        return None
    return {**found, **spans}


def _forward(graph: Graph, handlers, node, xs: list[np.ndarray]) -> list[np.ndarray] | None:
    op = node.op_type
    if op in RESHAPES:
        return [xs[0].reshape(graph.shapes[node.outputs[0]])]
    if op == "Concat":
        return [np.concatenate(xs, axis=int(node.attrs["axis"]))]
    if op == "Transpose":
        perm = node.attrs.get("perm")
        return [np.transpose(xs[0], None if perm is None else [int(p) for p in perm])]
    view = NodeView(node, graph)
    handler = handlers.get(node.name) if hasattr(handlers, "get") else None
    if op == "Split" and handler is not None and hasattr(handler, "sizes"):
        sizes = handler.sizes(view)
        if sizes is None:
            return None
        return np.split(xs[0], np.cumsum(sizes)[:-1], axis=handler.axis(view))
    if op == "Slice" and handler is not None and hasattr(handler, "maps"):
        return [xs[0][np.ix_(*handler.maps(view))]]
    return None
