"""Einsum of an activation with a constant (MViTv2's relative positions, `byhwc,hkc->byhwk`) becomes
Transpose -> Reshape -> MatMul by a constant -> Reshape -> Transpose, the product on Gemmini.

The constant operand is rearranged here, once, to [batch..., K, N]; the activation is brought to
[batch..., M, K] (m and k may be several letters each: a transpose puts them together, a reshape merges
them), so the MatMul is one Gemmini matmul per batch with int8 weights (ops/gemm.py), and the result goes
back to the equation's output order. The arithmetic is a matrix product either way; only the layout moves.
"""
from __future__ import annotations

import numpy as np

from ..config import GemminiConfig
from ..einsum import grouped_form
from ..graph import Graph, Node
from .rewrite import add_initializer, fresh_name


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        if node.op_type != "Einsum" or len(node.inputs) != 2:
            continue
        a, b = node.inputs
        weights = graph.const(b)
        if weights is None or graph.const(a) is not None:
            continue
        equation = node.attrs.get("equation", "").replace(" ", "")  # graph.py decodes attribute bytes
        form = grouped_form(equation)
        if form is None:
            continue
        at = graph.nodes.index(node)
        graph.nodes[at:at + 1] = _rewrite(graph, node, a, np.asarray(weights, np.float32), equation, form)
        changes.append(f"{node.name}: {equation} with a constant operand as a MatMul by [batch, K, N] weights")
    return changes


def _rewrite(graph: Graph, node: Node, a: str, weights: np.ndarray, equation: str, form) -> list[Node]:
    (ta, tb), out = equation.split("->")[0].split(","), equation.split("->")[1]
    size = {c: d for term, shape in ((ta, graph.shapes[a]), (tb, weights.shape)) for c, d in zip(term, shape)}
    dims = lambda letters: [size[c] for c in letters]  # noqa: E731
    prod = lambda letters: int(np.prod(dims(letters), dtype=np.int64))  # noqa: E731
    nodes: list[Node] = []
    dtype = graph.dtypes.get(a, np.dtype(np.float32))

    def tensor(suffix: str, shape) -> str:
        name = fresh_name(graph, f"{node.outputs[0]}__{suffix}")
        graph.shapes[name], graph.dtypes[name] = tuple(shape), dtype
        return name

    def transpose(src: str, have: str, want: str, suffix: str, target: str | None = None) -> str:
        if have == want and target is None:
            return src
        dst = target or tensor(suffix, dims(want))
        if have == want:
            nodes.append(Node(f"{node.name}__{suffix}", "Identity", [src], [dst], {}))
        else:
            nodes.append(Node(f"{node.name}__{suffix}", "Transpose", [src], [dst],
                              {"perm": [have.index(c) for c in want]}))
        return dst

    def reshape(src: str, shape, suffix: str) -> str:
        if tuple(graph.shapes[src]) == tuple(shape):
            return src
        dst = tensor(suffix, shape)
        target = add_initializer(graph, f"{node.name}__{suffix}_shape", np.array(shape, np.int64))
        nodes.append(Node(f"{node.name}__{suffix}", "Reshape", [src, target], [dst], {}))
        return dst

    batch = dims(form.batch)
    lhs = reshape(transpose(a, ta, form.batch + form.m + form.k, "a_order"),
                  batch + [prod(form.m), prod(form.k)], "a_matrix")
    w = weights.transpose([tb.index(c) for c in form.batch + form.k + form.n])
    w = add_initializer(graph, f"{node.name}__W", np.ascontiguousarray(
        w.reshape(batch + [prod(form.k), prod(form.n)]), np.float32))
    product = tensor("product", batch + [prod(form.m), prod(form.n)])
    nodes.append(Node(node.name, "MatMul", [lhs, w], [product], {}))
    grouped = form.batch + form.m + form.n
    expanded = reshape(product, dims(grouped), "expanded")
    transpose(expanded, grouped, out, "out_order", target=node.outputs[0])
    return nodes
