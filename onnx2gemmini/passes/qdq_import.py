"""Models that arrive quantized: Q/DQ pairs and DQ'd constant weights become fixed scales.

The float graph that remains is compiled as usual, but quantize.py takes these scales (and re-derives the
very same int8 weights and int32 biases) instead of calibrating, so the result is bit-exact with
onnxruntime running the user's QDQ model. Only what Gemmini can express is accepted: symmetric int8,
zero point 0, one scale per activation tensor; weights may have one scale per output channel (the
handler gives every run of equal scales its own Gemmini call). Anything else is refused naming the tensor.
"""
from __future__ import annotations

import numpy as np

from ..config import GemminiConfig
from ..errors import UnsupportedError
from ..graph import Graph, Node

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def _scale_and_check(graph: Graph, node: Node, what: str, per_channel: bool = False):
    """The scale of a Q or DQ node: a float, or (with `per_channel`, for constant weights) a float32
    array with its axis. Refuses other per-channel scales and non-zero zero points."""
    scale = graph.const(node.inputs[1])
    if scale is None:
        raise UnsupportedError(f"{node.op_type} '{node.name}': scale of {what} is not constant")
    if scale.size != 1 and per_channel:
        _check_zero(graph, node, what)
        return np.asarray(scale, np.float32).reshape(-1), int(node.attrs.get("axis", 1))
    if scale.size != 1:
        raise UnsupportedError(f"tensor '{what}': per-channel scales ({scale.size} values); Gemmini applies one "
                               f"scale per call — quantize it per tensor")
    _check_zero(graph, node, what)
    return float(np.float32(scale.reshape(())))


def _check_zero(graph: Graph, node: Node, what: str) -> None:
    zero = graph.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if zero is not None and (np.any(zero != 0) or zero.dtype not in (np.int8, np.int32)):
        raise UnsupportedError(f"tensor '{what}': zero point {zero.reshape(-1)[0]} ({zero.dtype}); Gemmini's "
                               f"int8 arithmetic is symmetric (zero point 0, int8)")


def _rename(graph: Graph, old: str, new: str) -> None:
    for node in graph.nodes:
        node.inputs = [new if i == old else i for i in node.inputs]
        node.outputs = [new if o == old else o for o in node.outputs]
    if old in graph.shapes:
        graph.shapes[new] = graph.shapes[old]


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    if not any(n.op_type in QDQ_OPS for n in graph.nodes):
        return []
    changes = []
    # Constant weights and biases: DQ(int) -> float initializer, remembering the scale.
    for node in [n for n in graph.nodes if n.op_type == "DequantizeLinear" and graph.const(n.inputs[0]) is not None]:
        q = graph.const(node.inputs[0])
        scale = _scale_and_check(graph, node, node.inputs[0], per_channel=True)
        out = node.outputs[0]
        if isinstance(scale, tuple):  # per channel: the handler maps it to one Gemmini call per scale
            values, axis = scale
            shape = [1] * q.ndim
            shape[axis % q.ndim] = -1
            graph.initializers[out] = (q.astype(np.float32) * values.reshape(shape)).astype(np.float32)
            what = f"{len(values)} scales along axis {axis % q.ndim}"
            scale = (values, axis % q.ndim)
        else:
            graph.initializers[out] = (q.astype(np.float32) * np.float32(scale)).astype(np.float32)
            what = f"scale {scale:.6g}"
        graph.shapes[out] = tuple(q.shape)
        graph.fixed_weight_scales[out] = scale
        graph.nodes.remove(node)
        changes.append(f"weights {node.inputs[0]} ({q.dtype}) dequantized, {what} kept")
    # Activation Q -> DQ pairs: the tensor keeps the scale, the pair disappears.
    for q_node in [n for n in graph.nodes if n.op_type == "QuantizeLinear"]:
        src = q_node.inputs[0]
        scale = _scale_and_check(graph, q_node, src)
        readers = graph.consumers(q_node.outputs[0])
        if not readers or any(r.op_type != "DequantizeLinear" for r in readers) or \
                graph.is_graph_output(q_node.outputs[0]):
            raise UnsupportedError(f"tensor '{src}': QuantizeLinear not followed by DequantizeLinear "
                                   f"(integer tensors between ops are not supported)")
        for dq in readers:
            if _scale_and_check(graph, dq, src) != scale:
                raise UnsupportedError(f"tensor '{src}': QuantizeLinear and DequantizeLinear scales differ")
            if graph.is_graph_output(dq.outputs[0]):  # keep the output's name, move the tensor to it
                _rename(graph, src, dq.outputs[0])
                src = dq.outputs[0]
            else:
                for node in graph.nodes:
                    node.inputs = [src if i == dq.outputs[0] else i for i in node.inputs]
            graph.nodes.remove(dq)
        graph.nodes.remove(q_node)
        if src in graph.fixed_scales and graph.fixed_scales[src] != scale:
            raise UnsupportedError(f"tensor '{src}': quantized twice with different scales")
        graph.fixed_scales[src] = scale
        changes.append(f"{src}: scale {scale:.6g} from the model")
    return changes
