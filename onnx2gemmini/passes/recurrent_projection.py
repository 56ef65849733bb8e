"""LSTM/GRU -> MatMul(X, Wᵀ) with Wb as its bias, then the node on that projection (ops/recurrent.py).

Why: the input projections of every time step and direction do not depend on the recurrence, so they
are one matmul for Gemmini; as a node of their own they are an ordinary tensor that calibration ranges,
quantize.py scales and the golden quantizes, like any MatMul output. The recurrent node keeps its ONNX
semantics exactly: its X becomes the projection [..., directions * gates * hidden], its W the 0/1
matrix selecting each direction's columns (a product onnxruntime computes exactly in float), its B
only the recurrence bias Rb. Where the configuration reads the accumulator out at full width
(acc_read_full_width), the projection keeps Gemmini's int32 accumulators (Fused.accumulate): an int8
projection would round every gate input to a step of its whole range before the float recurrence, which
reads floats anyway. Unnamed outputs get names, so the kernel has a buffer for each. A batch-first
node (layout 1, which onnxruntime does not run) becomes layout 0 between int8 transposes.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import GemminiConfig
from ..graph import Fused, Graph, Node, NodeView
from ..ops.recurrent import refusals
from .rewrite import add_initializer, fresh_name

OUTPUTS = {"LSTM": 3, "GRU": 2}
NAMES = ("Y", "Y_h", "Y_c")
BATCH_FIRST = ((2, 0, 1, 3), (1, 0, 2), (1, 0, 2))  # Y, Y_h, Y_c: layout 0 -> layout 1


def _node_name(graph: Graph, base: str) -> str:
    taken = {n.name for n in graph.nodes}
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def _tensor(graph: Graph, base: str, shape: tuple[int, ...]) -> str:
    name = fresh_name(graph, base)
    graph.shapes[name], graph.dtypes[name] = tuple(shape), np.dtype(np.float32)
    return name


def _transpose(graph: Graph, name: str, src: str, dst: str, perm) -> Node:
    return Node(_node_name(graph, name), "Transpose", [src], [dst], {"perm": list(perm)})


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        if node.op_type not in OUTPUTS or node.domain or node.fused.projected:
            continue
        view = NodeView(node, graph)
        if refusals(view):
            continue  # the handler's check reports why
        before, after = [], []
        x, w, r = view.input("X"), view.const(view.input("W")), view.const(view.input("R"))
        dirs, width, _ = w.shape
        hidden = r.shape[-1]
        inputs = list(node.inputs) + [""] * (3 - len(node.inputs))
        batch_first = bool(node.attrs.get("layout", 0))
        if batch_first:  # onnxruntime runs layout 0 only: the sequence moves first, the outputs back
            seq_first = _tensor(graph, f"{x}__seq_first", tuple(graph.shapes[x][i] for i in (1, 0, 2)))
            before.append(_transpose(graph, f"{node.name}__seq_first", x, seq_first, (1, 0, 2)))
            x = seq_first
            for k in (5, 6):
                if k < len(inputs) and inputs[k]:
                    inputs[k] = add_initializer(graph, f"{inputs[k]}__seq_first",
                                                np.ascontiguousarray(graph.const(inputs[k]).transpose(1, 0, 2)))
            node.attrs = {**node.attrs, "layout": 0}
        seq, batch = graph.shapes[x][:2]
        shapes = [(seq, dirs, batch, hidden), (dirs, batch, hidden), (dirs, batch, hidden)]
        outputs = list(node.outputs) + [""] * (OUTPUTS[node.op_type] - len(node.outputs))
        for k, name in enumerate(outputs):
            outputs[k] = _tensor(graph, f"{name or node.name}__{NAMES[k]}", shapes[k]) if batch_first or not name \
                else name
            if batch_first and name:
                after.append(_transpose(graph, f"{node.name}__{NAMES[k]}_batch_first", outputs[k], name,
                                        BATCH_FIRST[k]))
        weights = np.ascontiguousarray(w.transpose(2, 0, 1).reshape(-1, dirs * width), np.float32)
        b = view.const(view.input("B"))
        bias = None
        if b is not None:
            bias = add_initializer(graph, f"{node.name}__Wb",
                                   np.ascontiguousarray(b[:, :width].reshape(-1), np.float32))
            inputs[3] = add_initializer(graph, f"{node.name}__Rb_only", np.concatenate(
                [np.zeros_like(b[:, :width]), b[:, width:]], axis=1).astype(np.float32))
        projection = _tensor(graph, f"{node.outputs[0] or node.name}__projection", (seq, batch, dirs * width))
        before.append(Node(_node_name(graph, f"{node.name}__projection"), "MatMul",
                           [x, add_initializer(graph, f"{node.name}__W_projection", weights)], [projection], {},
                           fused=Fused(bias=bias, accumulate=config.acc_read_full_width)))
        select = np.zeros((dirs, width, dirs * width), np.float32)
        for d in range(dirs):
            select[d, :, d * width:(d + 1) * width] = np.eye(width, dtype=np.float32)
        inputs[0], inputs[1] = projection, add_initializer(graph, f"{node.name}__W_select", select)
        node.inputs = inputs if any(inputs[3:]) else inputs[:3]
        node.outputs = outputs
        node.fused = replace(node.fused, projected=True)
        at = graph.nodes.index(node)
        graph.nodes[at:at + 1] = before + [node] + after
        changes.append(f"{node.name}: input projection as MatMul {before[-1].name} ({dirs} direction(s) x {width} "
                       f"gates){'; layout 1 as 0 between transposes' if batch_first else ''}")
    return changes
