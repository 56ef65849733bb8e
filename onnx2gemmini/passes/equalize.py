"""Cross-layer equalization (Nagel et al., "Data-Free Quantization", 2019), optional.

For conv1 -> ReLU (-> max-pool) -> conv2, scaling output channel i of conv1 by 1/s_i and the matching
input channel of conv2 by s_i leaves the float function unchanged (ReLU and max-pool are positively
homogeneous) while evening out the per-channel weight ranges, which per-tensor int8 weights need.
s_i = sqrt(r1_i / r2_i) with r the channel's largest |weight|. Depthwise convs (MobileNet) gain most.
"""
from __future__ import annotations

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph, Node
from ..numerics import channel_ranges
from .rewrite import add_initializer

ROUNDS = 4
BLOCK = 1 << 15  # weights scaled per block (float64 temporaries of 256 KiB)


def _pairs(graph: Graph) -> list[tuple[Node, Node]]:
    pairs = []
    for conv1 in graph.nodes:
        if conv1.op_type != "Conv" or not conv1.fused.relu or conv1.fused.clip:
            continue
        conv2 = graph.only_consumer(conv1.outputs[0])
        if conv2 is None or conv2.op_type != "Conv" or conv2.inputs[0] != conv1.outputs[0]:
            continue
        if any(graph.const(t) is None for t in conv1.inputs[1:] + conv2.inputs[1:2] if t):
            continue
        if conv1.attrs.get("group", 1) not in (1, graph.const(conv1.inputs[1]).shape[0]):
            continue  # grouped (not depthwise) conv1: its channels mix within groups only; keep it simple
        w2 = graph.const(conv2.inputs[1])
        if conv2.attrs.get("group", 1) not in (1, w2.shape[0]) or \
                (conv2.attrs.get("group", 1) != 1 and w2.shape[1] != 1):
            continue  # grouped conv2: its input channels are not one row of weights
        pairs.append((conv1, conv2))
    return pairs


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    if graph.fixed_weight_scales:  # a pre-quantized model's weights are what they are
        return []
    pairs = _pairs(graph)
    if not pairs:
        return []
    for _ in range(ROUNDS):
        for conv1, conv2 in pairs:
            w1, w2 = graph.const(conv1.inputs[1]), graph.const(conv2.inputs[1])
            depthwise2 = conv2.attrs.get("group", 1) == w2.shape[0] and w2.shape[1] == 1
            # ranges of the stored weights (exactly those of their float64 values), then the float64 scaling
            r1 = channel_ranges(w1, 0).astype(np.float64)
            r2 = channel_ranges(w2, 0 if depthwise2 else 1).astype(np.float64)
            s = np.where((r1 > 0) & (r2 > 0), np.sqrt(r1 / np.where(r2 > 0, r2, 1)), 1.0)
            w1 = _scaled(np.divide, w1, s.reshape(-1, 1, 1, 1))
            w2 = _scaled(np.multiply, w2, s.reshape(-1, 1, 1, 1) if depthwise2 else s.reshape(1, -1, 1, 1))
            conv1.inputs[1] = add_initializer(graph, f"{conv1.name}_cle_W", w1)
            if len(conv1.inputs) > 2 and conv1.inputs[2]:
                b1 = _scaled(np.divide, graph.const(conv1.inputs[2]), s)
                conv1.inputs[2] = add_initializer(graph, f"{conv1.name}_cle_B", b1)
            conv2.inputs[1] = add_initializer(graph, f"{conv2.name}_cle_W", w2)
    return [f"equalized {a.name} -> {b.name}" for a, b in pairs]


def _scaled(op, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """float32(op(float64 w, s)): computed in float64 and rounded once, as before, but block by block of
    output channels so that the float64 temporaries stay in cache (wide ResNet-50's weights are 267 MB:
    whole-tensor float64 copies made equalization most of its compile)."""
    out = np.empty(np.broadcast_shapes(w.shape, s.shape), np.float32)
    s = np.broadcast_to(s, (len(out),) + s.shape[1:])  # one scale row per output channel, or the same one
    rows = max(1, BLOCK // max(1, out[0].size))
    for lo in range(0, len(out), rows):
        out[lo:lo + rows] = op(w[lo:lo + rows].astype(np.float64), s[lo:lo + rows])
    return out
