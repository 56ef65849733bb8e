"""Small graph edits the passes share."""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..graph import Graph


def absorb_successor(graph: Graph, node, successor) -> None:
    """`node` takes over `successor`'s output tensor; `successor` disappears."""
    node.outputs[0] = successor.outputs[0]
    graph.nodes.remove(successor)


def add_initializer(graph: Graph, base: str, value: np.ndarray) -> str:
    """Store `value` under a fresh name derived from `base`."""
    name, i = base, 1
    while name in graph.initializers or name in graph.shapes:
        name, i = f"{base}_{i}", i + 1
    graph.initializers[name] = value
    graph.shapes[name] = tuple(value.shape)
    graph.dtypes[name] = value.dtype
    return name


def fresh_name(graph: Graph, base: str) -> str:
    """A tensor name not used yet in the graph."""
    taken = set(graph.shapes) | set(graph.initializers) | {o for n in graph.nodes for o in n.outputs}
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def require_same_fixed_scale(graph: Graph, before: str, after: str, op: str) -> None:
    """A fusion keeps one scale: a pre-quantized model must not requantize between the fused ops."""
    a, b = graph.fixed_scales.get(before), graph.fixed_scales.get(after)
    if a is not None and b is not None and a != b:
        raise UnsupportedError(f"tensor '{before}': quantized at {a:.6g} before {op} and {b:.6g} after; Gemmini "
                               f"applies the {op} inside one scale")
