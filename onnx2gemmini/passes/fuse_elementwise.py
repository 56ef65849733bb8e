"""Chains of elementwise ops that compute a function of one tensor x become one node, ElementwiseChain: GELU
as exporters write it out (x * 0.5 * (1 + Erf(x / sqrt 2)), five nodes; the tanh form, eight), Mish, and any
other mix of unary activations and Add/Sub/Mul/Div/Pow with scalar constants. Every int8 x has exactly one
output, so the chain is one 256-entry lookup table: one pass over the tensor on the CPU instead of one per
op, and one rounding instead of one per op.

A chain grows backwards from its last op through producers whose result nothing outside the chain reads;
it is fused when everything it reads, apart from scalar constants, is one tensor. The golden QDQ model
computes the chain in float between x's DequantizeLinear and the output's QuantizeLinear (golden.py).
"""
from __future__ import annotations

from dataclasses import replace

from ..config import GemminiConfig
from ..graph import Fused, Graph, Node, topological

# Unary ops a lookup table evaluates (ops/activations.FUNCTIONS; a test keeps the two in step), and the
# binary ones a chain may hold when an operand is a scalar constant or both are functions of x.
UNARY = frozenset({"Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Softplus",
                   "Softsign", "Erf", "Gelu", "Neg", "Abs", "Exp", "Sqrt", "Reciprocal", "Log"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow"})
OP_TYPE, DOMAIN = "ElementwiseChain", "onnx2gemmini"


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in set(n.inputs):
            readers.setdefault(i, []).append(n)
    order = topological(graph.nodes, [i.name for i in graph.inputs] + list(graph.initializers))
    position = {id(n): k for k, n in enumerate(order)}
    outputs = {o.name for o in graph.outputs}
    changes, fused = [], set()
    for last in reversed(order):
        if id(last) in fused or not _elementwise(graph, last):
            continue
        region = _grow(graph, last, producers, readers, outputs, fused)
        if region is None or len(region) < 2:
            continue
        region.sort(key=lambda n: position[id(n)])
        x = _leaves(graph, region)[0]
        chain = _chain(graph, region, x)
        for n in region[:-1]:
            graph.nodes.remove(n)
        fused.update(id(n) for n in region)
        ops = ", ".join(n.op_type for n in region)
        last.op_type, last.domain, last.inputs, last.attrs = OP_TYPE, DOMAIN, [x], {}
        last.fused = replace(last.fused, chain=chain)
        changes.append(f"{', '.join(n.name for n in region)} ({ops}) fused: one lookup table of '{x}'")
    return changes


def _scalar(graph: Graph, tensor: str) -> bool:
    value = graph.const(tensor)
    return value is not None and value.size == 1 and value.dtype.kind in "fiu"


def _elementwise(graph: Graph, node: Node) -> bool:
    """An op a chain may hold: one float output of the shape it reads, no fusion of its own, and every
    operand either a scalar constant or an activation (not both constants)."""
    if node.domain or node.fused != Fused() or len(node.outputs) != 1 or not node.outputs[0]:
        return False
    ins = [i for i in node.inputs if i]
    if len(ins) != len(node.inputs):
        return False
    if node.op_type in UNARY:
        if len(ins) != 1 or graph.const(ins[0]) is not None:
            return False
    elif node.op_type in BINARY:
        if len(ins) != 2 or all(graph.const(i) is not None for i in ins):
            return False
        if any(graph.const(i) is not None and not _scalar(graph, i) for i in ins):
            return False
    else:
        return False
    out = node.outputs[0]
    if graph.dtypes.get(out) is not None and graph.dtypes[out].kind != "f":
        return False
    shape = graph.shapes.get(out)
    return shape is not None and all(graph.shapes.get(i) == shape for i in ins if graph.const(i) is None)


def _leaves(graph: Graph, region: list[Node]) -> list[str]:
    """The activations the region reads that none of its nodes makes."""
    made = {n.outputs[0] for n in region}
    return sorted({i for n in region for i in n.inputs if i not in made and graph.const(i) is None})


def _grow(graph: Graph, last: Node, producers, readers, outputs, taken: set[int]) -> list[Node] | None:
    """The largest chain ending at `last` whose inner results only the chain reads; None unless it reads a
    single activation."""
    region = [last]
    grown = True
    while grown:
        grown = False
        members = {id(n) for n in region}
        for leaf in _leaves(graph, region):
            p = producers.get(leaf)
            if (p is None or id(p) in members or id(p) in taken or leaf in outputs or leaf in graph.fixed_scales
                    or not _elementwise(graph, p) or any(id(r) not in members for r in readers.get(leaf, []))):
                continue
            region.append(p)
            grown = True
            break
    leaves = _leaves(graph, region)
    if len(leaves) != 1 or graph.dtypes.get(leaves[0]) is not None and graph.dtypes[leaves[0]].kind != "f":
        return None
    if any(n.outputs[0] in graph.fixed_scales for n in region[1:]):  # a pre-quantized model rounds in between
        return None
    return region


def _chain(graph: Graph, region: list[Node], x: str) -> tuple:
    """The region as Fused.chain: its ops in order, operands referring to x, earlier ops or constants."""
    step = {n.outputs[0]: k for k, n in enumerate(region)}
    chain = []
    for n in region:
        operands = []
        for i in n.inputs:
            if i == x:
                operands.append(("x",))
            elif i in step:
                operands.append(("step", step[i]))
            else:
                value = graph.const(i)
                operands.append(("const", value.reshape(()).item(), value.dtype.name))
        chain.append((n.op_type, tuple(operands), tuple(sorted(n.attrs.items()))))
    return tuple(chain)
