"""MatMul(C, x) with a constant left operand C [..., M, 1] and x [..., 1, N]: every output is one product
C[..., m, 0] * x[..., 0, n], which is Mul(C, x) broadcast, exactly (a sum of one term). Attention over a
single key exports this way once the simplifier folds its softmax (which is 1) into a constant: MobileViT's
and LeViT's last stages in transformers."""
from __future__ import annotations

from ..config import GemminiConfig
from ..graph import Graph


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in graph.nodes:
        if node.op_type != "MatMul" or len(node.inputs) != 2:
            continue
        c, x = node.inputs
        value = graph.const(c)
        if value is None or graph.const(x) is not None or value.ndim < 2 or len(graph.shapes.get(x, ())) < 2:
            continue
        if value.shape[-1] == 1 and graph.shapes[x][-2] == 1:
            node.op_type, node.attrs = "Mul", {}
            changes.append(f"{node.name} (MatMul of a constant column by a row) is a broadcast Mul")
    return changes
