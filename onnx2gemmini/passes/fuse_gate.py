"""Mul(x, f(x)) with f a sigmoid-like activation: SiLU (x * sigmoid(x), EfficientNet, YOLOv8) and hard swish
written out (x * hardsigmoid(x), MobileNetV3 exports). The product is a function of the one int8 x, so it
becomes one 256-entry lookup table instead of two CPU steps (a table, then a float multiply).

The fused Mul computes x * f(x) in float between x's DequantizeLinear and its own QuantizeLinear: f(x) is
no longer quantized on its own (one rounding fewer), and the golden QDQ model says so (golden.py).
"""
from __future__ import annotations

from dataclasses import replace

from ..config import GemminiConfig
from ..graph import Graph

GATES = ("Sigmoid", "HardSigmoid")


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        if node.op_type != "Mul" or len(node.inputs) != 2 or node.fused.gate or node.fused.relu:
            continue
        for x, g in (node.inputs, node.inputs[::-1]):
            gate = graph.producer(g)
            if (gate is None or gate.op_type not in GATES or gate.inputs[0] != x or x == g
                    or graph.const(x) is not None or graph.only_consumer(g) is not node
                    or g in graph.fixed_scales):  # a pre-quantized model quantizes f(x) on its own
                continue
            node.inputs = [x]
            node.fused = replace(node.fused, gate=(gate.op_type, tuple(sorted(gate.attrs.items()))))
            graph.nodes.remove(gate)
            changes.append(f"{gate.name} ({gate.op_type}) and {node.name} (Mul) fused: x * {gate.op_type}(x)")
            break
    return changes
