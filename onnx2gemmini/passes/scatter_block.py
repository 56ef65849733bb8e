"""ScatterND that overwrites one block of its data (PyTorch's `x[:, :, 1:, 1:] = y`, MViTv2's relative
positions) becomes Slices of the data around the block, Concatenated with the updates.

The indices must be constant and list every position of a box in row-major order (the meshgrid of one
contiguous range per indexed axis; the axes after them are copied whole), with reduction none. Then the
result is exactly the data with the box replaced, and Slice and Concat are int8 moves: no arithmetic, the
same values onnxruntime writes.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph, Node
from .rewrite import add_initializer, fresh_name


def box(indices: np.ndarray, data_shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """[(start, stop)] per indexed axis when `indices` ([..., r]) enumerate a box in row-major order."""
    r = indices.shape[-1]
    grid = indices.shape[:-1]
    if len(grid) != r or r > len(data_shape):
        return None
    ranges = []
    for axis in range(r):
        n = grid[axis]
        start = int(indices.reshape(-1, r)[0, axis])
        if start < 0 or start + n > data_shape[axis]:
            return None
        ranges.append((start, start + n))
    want = np.stack(np.meshgrid(*[np.arange(a, b) for a, b in ranges], indexing="ij"), axis=-1)
    return ranges if np.array_equal(indices, want) else None


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        if node.op_type != "ScatterND" or node.attrs.get("reduction", "none") != "none":
            continue
        indices = graph.const(node.inputs[1])
        data, updates, out = node.inputs[0], node.inputs[2], node.outputs[0]
        if indices is None or graph.const(data) is not None or graph.const(updates) is not None:
            continue
        ranges = box(np.asarray(indices), graph.shapes[data])
        if ranges is None:
            continue
        nodes = _replace_box(graph, node, data, updates, out, ranges)
        at = graph.nodes.index(node)
        graph.nodes[at:at + 1] = nodes
        changes.append(f"{node.name}: the block {ranges} of its data replaced by slices and concats")
    return changes


def _replace_box(graph: Graph, node: Node, data: str, updates: str, out: str,
                 ranges: list[tuple[int, int]]) -> list[Node]:
    """Nodes computing `out` = `data` with the box `ranges` replaced by `updates`, axis by axis: along the
    first axis the box does not span whole, the rows before it, the rest recursively, the rows after it."""
    nodes: list[Node] = []
    counter = itertools.count()

    def sliced(src: str, axis: int, start: int, stop: int) -> str:
        k = next(counter)
        shape = list(graph.shapes[src])
        shape[axis] = stop - start
        name = fresh_name(graph, f"{out}__part{k}")
        graph.shapes[name] = tuple(shape)
        graph.dtypes[name] = graph.dtypes.get(data, np.dtype(np.float32))
        consts = [add_initializer(graph, f"{node.name}__{what}{k}", np.array([v], np.int64))
                  for what, v in (("starts", start), ("ends", stop), ("axes", axis))]
        nodes.append(Node(f"{node.name}__slice{k}", "Slice", [src] + consts, [name], {}))
        return name

    def build(src: str, axis: int, target: str | None) -> str:
        shape = graph.shapes[src]
        while axis < len(ranges) and ranges[axis] == (0, shape[axis]):
            axis += 1
        if axis == len(ranges):
            return updates
        start, stop = ranges[axis]
        parts = ([sliced(src, axis, 0, start)] if start else []) + [build(sliced(src, axis, start, stop), axis + 1,
                                                                          None)]
        parts += [sliced(src, axis, stop, shape[axis])] if stop < shape[axis] else []
        name = target or fresh_name(graph, f"{out}__joined{next(counter)}")
        if target is None:
            graph.shapes[name] = tuple(shape)
            graph.dtypes[name] = graph.dtypes.get(data, np.dtype(np.float32))
        label = node.name if target is not None else f"{node.name}__concat{len(nodes)}"
        nodes.append(Node(label, "Concat", parts, [name], {"axis": axis}))
        return name

    if build(data, 0, out) == updates:  # the box is the whole tensor: the result is the updates
        nodes.append(Node(node.name, "Identity", [updates], [out], {}))
    return nodes
