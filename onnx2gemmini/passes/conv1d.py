"""A 1-D Conv or pool (input [N, C, L]) as the 2-D one of height 1: Unsqueeze -> op [N, C, 1, L] -> Squeeze.

Why: Gemmini's conv and the pooling kernels are 2-D; a 1-D convolution is exactly the 2-D one with a 1-row
kernel over a 1-row image, so it reaches the same tiled conv (and the same golden: onnxruntime runs the
rewritten nodes). The Unsqueeze and Squeeze are views of the same bytes. Between two such ops, the Squeeze of
the first and the Unsqueeze of the second cancel: the second reads the first's 2-D output directly, so the
passes that pair a conv with the conv reading it (equalize, sort_channels) see 1-D models as they see 2-D ones.
"""
from __future__ import annotations

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph, Node
from .rewrite import add_initializer, fresh_name


def _pads(attrs: dict, length: int, kernel: int) -> tuple[int, int]:
    """The 1-D conv's (begin, end) padding, auto_pad resolved as ONNX defines it."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        return 0, 0
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        stride, dilation = (attrs.get("strides") or [1])[0], (attrs.get("dilations") or [1])[0]
        out = -(-length // stride)
        total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - length)
        small, big = total // 2, total - total // 2
        return (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    pads = list(attrs.get("pads") or [0, 0])
    return pads[0], pads[1]


POOLS = ("MaxPool", "AveragePool")


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes, made = [], []
    for node in list(graph.nodes):
        if node.op_type not in ("Conv",) + POOLS or not node.inputs:
            continue
        x, y = node.inputs[0], node.outputs[0]
        if len(graph.shapes.get(x, ())) != 3 or y not in graph.shapes or len(node.outputs) != 1:
            continue
        inputs = list(node.inputs)
        if node.op_type == "Conv":
            w = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
            if w is None or w.ndim != 3:
                continue
            inputs[1] = add_initializer(graph, f"{node.inputs[1]}__2d", w[:, :, None, :])
            kernel = w.shape[2]
        else:
            kernel = node.attrs["kernel_shape"][0]
        n, c, length = graph.shapes[x]
        out = graph.shapes[y]
        x2d, y2d = fresh_name(graph, f"{x}__2d"), fresh_name(graph, f"{y}__2d")
        graph.shapes[x2d], graph.dtypes[x2d] = (n, c, 1, length), graph.dtypes.get(x, np.dtype(np.float32))
        graph.shapes[y2d], graph.dtypes[y2d] = (out[0], out[1], 1, out[2]), graph.dtypes.get(y, np.dtype(np.float32))
        axes = add_initializer(graph, f"{node.name}__axes", np.array([2], np.int64))
        a = node.attrs
        attrs = dict(a)
        attrs["kernel_shape"] = [1, kernel]
        attrs["strides"] = [1] + list(a.get("strides") or [1])
        if "dilations" in a:  # AveragePool has them only from opset 19
            attrs["dilations"] = [1] + list(a.get("dilations") or [1])
        begin, end = _pads(a, length, kernel)
        attrs["pads"], attrs["auto_pad"] = [0, begin, 0, end], "NOTSET"
        index = graph.nodes.index(node)
        unsqueeze = Node(f"{node.name}__unsqueeze", "Unsqueeze", [x, axes], [x2d], {})
        op = Node(node.name, node.op_type, [x2d] + inputs[1:], [y2d], attrs, node.domain, node.fused)
        squeeze = Node(f"{node.name}__squeeze", "Squeeze", [y2d, axes], [y], {})
        graph.nodes[index:index + 1] = [unsqueeze, op, squeeze]
        made.append((unsqueeze, squeeze))
        changes.append(f"{node.name}: 1-D {node.op_type} as a 2-D {node.op_type} of height 1")
    return changes + _cancel(graph, made)


def _cancel(graph: Graph, made: list[tuple[Node, Node]]) -> list[str]:
    """Each Unsqueeze made here that reads the output of a Squeeze made here: its reader reads the Squeeze's
    input (the same bytes, already 2-D) instead; a Squeeze nothing reads any more goes too."""
    squeezes = {squeeze.outputs[0]: squeeze for _, squeeze in made}
    changes = []
    for unsqueeze, _ in made:
        squeeze = squeezes.get(unsqueeze.inputs[0])
        if squeeze is None:
            continue
        for reader in graph.consumers(unsqueeze.outputs[0]):
            reader.inputs[:] = [squeeze.inputs[0] if i == unsqueeze.outputs[0] else i for i in reader.inputs]
        graph.nodes.remove(unsqueeze)
        changes.append(f"{unsqueeze.name}: reads {squeeze.name}'s 2-D input directly")
        if not graph.consumers(squeeze.outputs[0]) and not graph.is_graph_output(squeeze.outputs[0]):
            graph.nodes.remove(squeeze)
    return changes
