"""Conv/Gemm/MatMul followed by Relu or Clip(0, hi): the activation moves into the Gemmini call.

Gemmini applies ReLU after scaling and clips to int8; with the output scale chosen as hi/127 the int8
clip performs Clip(0, hi) exactly (quantize.py picks that scale).
"""
from __future__ import annotations

from dataclasses import replace

from ..config import GemminiConfig
from ..graph import Graph
from .rewrite import absorb_successor, require_same_fixed_scale

PRODUCERS = ("Conv", "Gemm", "MatMul", "Add", "Sum", "BatchNormalization")


def clip_bounds(attrs, inputs, const) -> tuple[float, float] | None:
    """Constant (lo, hi) of a Clip node (attribute or input form), or None if they are not constant."""
    if "min" in attrs and len(inputs) == 1:  # opset < 11 form
        return float(attrs["min"]), float(attrs.get("max", float("inf")))
    bounds = []
    for i, default in ((1, float("-inf")), (2, float("inf"))):
        if i < len(inputs) and inputs[i]:
            value = const(inputs[i])
            if value is None or value.size != 1:
                return None
            bounds.append(float(value.reshape(())))
        else:
            bounds.append(default)
    return bounds[0], bounds[1]


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    changes = []
    for node in list(graph.nodes):
        if node not in graph.nodes or node.op_type not in PRODUCERS or node.fused.relu:
            continue
        act = graph.only_consumer(node.outputs[0])
        if act is None:
            continue
        if act.op_type == "Relu":
            clip = None
        elif act.op_type == "Clip":
            clip = clip_bounds(act.attrs, act.inputs, graph.const)
            if clip is None or clip[0] != 0.0 or not 0.0 < clip[1] < float("inf"):
                continue
        else:
            continue
        require_same_fixed_scale(graph, node.outputs[0], act.outputs[0], act.op_type)
        node.fused = replace(node.fused, relu=True, clip=clip, activation_node=act.name)
        absorb_successor(graph, node, act)
        changes.append(f"{act.name} ({act.op_type}) fused into {node.name}")
    return changes
