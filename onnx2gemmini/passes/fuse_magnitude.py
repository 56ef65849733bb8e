"""Sqrt(x*x + y*y) of two activations (a spectrum's magnitude from its real and imaginary parts, as audio
models export it after their Fourier conv): one CPU step computing the magnitude from the two int8 inputs.

Why: unfused, the squares and their sum are int8 tensors of their own, and a square's dynamic range is the
square of its input's: over speech the power of the faint bins falls below one int8 step of the loud ones'
(silero-vad's squares keep about 2 dB SQNR, the magnitude after them 7 dB, against 15 dB for the parts). Fused,
x*x + y*y is never rounded to int8: the Sqrt node reads x and y and computes sqrt(x*x + y*y) in float32 between
their DequantizeLinear and its QuantizeLinear (cpu.Binary "hypot"; the golden builds the same float ops, and
the rounding of each, as IEEE operations, is the same in NumPy, C and onnxruntime).

Pattern: Sqrt(Add(s1, s2)) where each s is Pow(x, 2) or Mul(x, x) of an activation, read only by the Add, and
the Add is read only by the Sqrt; x and y of the same shape. A pre-quantized model keeps its own scales.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph


def squared(graph: Graph, tensor: str) -> str | None:
    """x where `tensor` is x*x (Pow(x, 2) or Mul(x, x)) of an activation read only once; else None."""
    node = graph.producer(tensor)
    if node is None or graph.only_consumer(tensor) is None or graph.is_graph_output(tensor):
        return None
    if node.op_type == "Pow" and graph.const(node.inputs[1]) is not None and \
            graph.const(node.inputs[1]).size == 1 and float(graph.const(node.inputs[1]).reshape(())) == 2.0:
        x = node.inputs[0]
    elif node.op_type == "Mul" and len(node.inputs) == 2 and node.inputs[0] == node.inputs[1] \
            and not node.fused.gate and not node.fused.relu:
        x = node.inputs[0]
    else:
        return None
    return None if graph.const(x) is not None or graph.is_index(x) else x


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    if graph.fixed_scales:  # a pre-quantized model quantizes the squares on their own
        return []
    changes = []
    for sqrt in list(graph.nodes):
        if sqrt.op_type != "Sqrt" or sqrt.fused.magnitude or sqrt.fused.relu:
            continue
        add = graph.producer(sqrt.inputs[0])
        if add is None or add.op_type != "Add" or len(add.inputs) != 2 or add.fused.relu \
                or graph.only_consumer(sqrt.inputs[0]) is not sqrt or graph.is_graph_output(sqrt.inputs[0]):
            continue
        parts = [squared(graph, t) for t in add.inputs]
        if any(p is None for p in parts) or graph.shapes.get(parts[0]) != graph.shapes.get(parts[1]) \
                or np.dtype(graph.dtypes.get(parts[0], np.float32)).kind != "f":
            continue
        squares = [graph.producer(t) for t in add.inputs]
        sqrt.inputs = list(parts)
        sqrt.fused = replace(sqrt.fused, magnitude=True)
        for node in squares + [add]:
            graph.nodes.remove(node)
        changes.append(f"{sqrt.name}: sqrt({parts[0]}^2 + {parts[1]}^2) fused into one step "
                       f"({', '.join(n.name for n in squares + [add])} dropped)")
    return changes
