"""Empty tensors that only feed Concats (the zero-width pass-through half of a partial rotary embedding)
are dropped with the nodes that make them: a Concat input with no elements adds nothing, and an empty tensor
has no buffer to plan. A Concat left with one input becomes an Identity.
"""
from __future__ import annotations

from ..config import GemminiConfig
from ..graph import Graph


def _empty(graph: Graph, tensor: str) -> bool:
    return 0 in graph.shapes.get(tensor, (1,))


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        outputs = [o for o in node.outputs if o]
        if not outputs or not all(_empty(graph, o) for o in outputs):
            continue
        if any(graph.is_graph_output(o) for o in outputs):
            continue
        readers = [c for o in outputs for c in graph.consumers(o)]
        if not all(r.op_type == "Concat" for r in readers):
            continue
        for concat in readers:
            concat.inputs = [i for i in concat.inputs if i not in outputs]
            if len(concat.inputs) == 1:
                concat.op_type, concat.attrs = "Identity", {}
        graph.nodes.remove(node)
        changes.append(f"{node.name}: empty output, dropped from {', '.join(sorted({r.name for r in readers}))}")
    return changes
