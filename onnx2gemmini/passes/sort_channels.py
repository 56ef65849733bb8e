"""A conv's output channels sorted by weight range, so each group of DIM channels shares a scale that fits it.

Gemmini applies one scale per call, so weight-scale groups (`--weight-scales sorted`) are runs of DIM
output channels, each its own call. After BatchNorm folding a conv's channel ranges can differ 20x or more
(23x in the ddddocr detector's stem), and a run of neighbouring channels mixes them: the small ones keep a
few of the 127 levels. Sorting the channels by their largest |weight| puts channels of like range in one
run. The sorting itself costs nothing at run time (the readers' input channels are permuted to match, so the
float function is unchanged); each extra run is one more Gemmini call, hence MIN_GAIN_DB.

A conv is sorted only where every reader of its output, through channel-wise ops (activations, lookup tables,
pools, PReLU with its slopes permuted too), is another conv reading all its channels, and no tensor on the way
is a model output: the model's outputs and every tensor a Concat, Add or reshape sees keep their order.
"""
from __future__ import annotations

import numpy as np

from ..config import GemminiConfig
from ..graph import Graph, Node
from ..numerics import channel_ranges, run_tops
from .rewrite import add_initializer

# A conv is sorted and grouped only where it pays: when the finest group's scale is at most a quarter of the
# tensor's (two more bits for its channels). Below that, the extra calls buy little.
MIN_GAIN_DB = 20.0 * float(np.log10(4.0))

# One activation input, the same channels out: a permutation of the channels commutes with them.
CHANNELWISE = ("Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Softplus",
               "Clip", "Identity", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")


def _plain_conv(graph: Graph, node: Node) -> bool:
    """A conv with constant weights whose every output channel reads every input channel."""
    return (node.op_type == "Conv" and node.attrs.get("group", 1) == 1 and len(node.inputs) > 1
            and graph.const(node.inputs[1]) is not None and graph.const(node.inputs[1]).ndim >= 3
            and all(graph.const(t) is not None for t in node.inputs[2:] if t))


def _followers(graph: Graph, tensor: str) -> tuple[list[Node], list[Node]] | None:
    """The convs reading `tensor` through channel-wise ops, and the PReLUs on the way; None if any reader
    needs the channel order kept."""
    convs, prelus, todo, seen = [], [], [tensor], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if graph.is_graph_output(t):
            return None
        for reader in graph.consumers(t):
            if reader.inputs[0] != t or t in reader.inputs[1:]:
                return None
            if _plain_conv(graph, reader):
                convs.append(reader)
                continue
            if len([o for o in reader.outputs if o]) != 1:
                return None  # a MaxPool's indices
            if reader.op_type == "PRelu":
                slope = graph.const(reader.inputs[1])
                rank = len(graph.shapes[t]) if t in graph.shapes else 0
                if slope is None or slope.size > 1 and _slope_axis(slope.shape, rank) is None:
                    return None
                prelus.append(reader)
            elif reader.op_type == "Mul" and reader.fused.gate is not None and len(reader.inputs) == 1:
                pass  # x * f(x) as one lookup table (passes/fuse_gate.py)
            elif reader.fused.chain is not None:
                pass  # an elementwise chain of x as one lookup table (passes/fuse_elementwise.py)
            elif reader.op_type not in CHANNELWISE or any(graph.const(i) is None for i in reader.inputs[1:] if i):
                return None
            todo.extend(o for o in reader.outputs if o)
    return convs, prelus


def group_gain_db(ranges: np.ndarray, size: int) -> float:
    """How much finer the finest group's scale is than one scale for all, for channel ranges in their order and
    groups of `size` (dB; 0 when all are zero)."""
    tops = run_tops(ranges, size)
    finest = tops[tops > 0]
    return 20.0 * float(np.log10(tops.max() / finest.min())) if finest.size else 0.0


def _slope_axis(shape: tuple[int, ...], rank: int) -> int | None:
    """The axis of a PReLU slope that broadcasts along the channel axis (1) of a rank-`rank` NCHW tensor;
    None if it varies along any other axis."""
    axis = len(shape) - rank + 1
    if not 0 <= axis < len(shape) or any(d != 1 for i, d in enumerate(shape) if i != axis):
        return None
    return axis


def _permuted(graph: Graph, tensor: str, order: np.ndarray, axis: int, base: str) -> str:
    return add_initializer(graph, base, np.ascontiguousarray(np.take(graph.const(tensor), order, axis=axis)))


def run(graph: Graph, config: GemminiConfig) -> list[str]:
    if graph.fixed_weight_scales or graph.fixed_scales:  # a pre-quantized model's scales are what they are
        return []
    changes = []
    for node in list(graph.nodes):
        if not _plain_conv(graph, node):
            continue
        ranges = channel_ranges(graph.const(node.inputs[1]))
        order = np.argsort(-ranges, kind="stable")
        if group_gain_db(ranges[order], config.dim) < MIN_GAIN_DB:
            continue  # also every conv of at most DIM channels: one group either way
        found = _followers(graph, node.outputs[0])
        if found is None:
            continue
        convs, prelus = found
        if not np.array_equal(order, np.arange(len(order))):
            _permute(graph, node, convs, prelus, order)
        graph.channel_groups[node.name] = config.dim
        changes.append(f"{node.name}: {len(order)} output channels sorted by weight range, one scale per "
                       f"{config.dim} (read by {', '.join(c.name for c in convs)})")
    return changes


def _permute(graph: Graph, node: Node, convs: list[Node], prelus: list[Node], order: np.ndarray) -> None:
    """`node`'s output channels in `order`, and the channels its readers see to match."""
    node.inputs[1] = _permuted(graph, node.inputs[1], order, 0, f"{node.name}_sorted_W")
    if len(node.inputs) > 2 and node.inputs[2]:
        node.inputs[2] = _permuted(graph, node.inputs[2], order, 0, f"{node.name}_sorted_B")
    for prelu in prelus:
        slope = graph.const(prelu.inputs[1])
        if slope.size > 1:
            axis = _slope_axis(slope.shape, len(graph.shapes[prelu.inputs[0]]))
            prelu.inputs[1] = _permuted(graph, prelu.inputs[1], order, axis, f"{prelu.name}_sorted_slope")
    for conv in convs:
        conv.inputs[1] = _permuted(graph, conv.inputs[1], order, 1, f"{conv.name}_sorted_W")
