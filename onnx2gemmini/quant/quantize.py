"""Ranges (or a QDQ model's own scales) -> the QuantTable: Gemmini's symmetric int8 quantization.

One float32 scale per activation tensor, zero point 0; weights in [-127, 127] with one scale per tensor
or per run of output channels (each run then is its own Gemmini call, since a call applies one scale);
int32 biases at scale s_in*s_w; the output multiplier float32(float32(s_in*s_w)/s_out) (`multiplier`).

A concatenation that is a model output keeps each input's own scale (`QuantTable.axis_scales`): a detector
that joins box coordinates (0..640) and class scores (0..1) in one output would otherwise round every score
with the boxes' step. The int8 bytes are the same; only the output's dequantization is per segment.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .. import normalizer
from ..errors import UnsupportedError
from ..graph import Graph, NodeView, topological
from ..numerics import (along_axis, bias_scale, channel_ranges, quantize_bias, run_tops, scale_for,
                       symmetric_int8)

@dataclass(frozen=True)
class WeightQuant:
    """A node's weights in the handler's canonical float layout, quantized.

    Per tensor, one scale. With output-channel groups, `channel_scale` holds every output channel's
    scale (equal within a group) along `axis` of `q`; each group becomes its own Gemmini call."""

    q: np.ndarray                # int8, in [-127, 127]
    scale: float                 # the one scale (per tensor), or the largest group scale
    bias: np.ndarray | None      # int32, each channel at bias_scale(s_in, its scale)
    bias_scale: float
    channel_scale: np.ndarray | None = None  # float32 per output channel; None: per tensor
    axis: int = 0                            # output-channel axis of q (with channel_scale)
    input_scale: float = 0.0                 # s_in, which the bias scales are products with

    def groups(self) -> list[tuple[int, int, float]]:
        """(start, stop, scale) of each run of output channels sharing a scale."""
        if self.channel_scale is None:
            return [(0, self.q.shape[self.axis] if self.q.ndim else 1, self.scale)]
        runs, start = [], 0
        cs = self.channel_scale
        for c in range(1, len(cs) + 1):
            if c == len(cs) or cs[c] != cs[start]:
                runs.append((start, c, float(cs[start])))
                start = c
        return runs

    def bias_scales(self) -> np.ndarray | float:
        """The int32 bias's scale: one, or (with groups) one per output channel."""
        if self.channel_scale is None:
            return self.bias_scale
        return np.asarray([bias_scale(self.input_scale, s) for s in self.channel_scale], np.float32)


@dataclass(frozen=True)
class QuantTable:
    scales: dict[str, float]                 # activation tensor -> scale
    weights: dict[str, WeightQuant]          # node name -> weights
    amax: dict[str, float] = field(default_factory=dict)
    method: str = "minmax"
    num_samples: int = 0
    weight_group: int = 0                    # output channels per weight scale (0: per tensor)
    float_layers: frozenset = frozenset()    # nodes kept float (--keep-float): float32 weights, no entry above
    adarounded: tuple = ()                   # nodes whose weights AdaRound rounded (--adaround)
    # Model outputs made by a Concat whose inputs keep their own scales: tensor -> (axis, one scale per
    # index along it); `scales` then holds the largest of them.
    axis_scales: dict[str, tuple[int, tuple[float, ...]]] = field(default_factory=dict)
    # Tensors the int8 code writes as float32 (float_tensors): no Q/DQ in the golden; `scales` still holds
    # their calibrated range, for reports.
    float_tensors: frozenset = frozenset()

    def value_scales(self, tensor: str, rank: int):
        """The scale of every value of `tensor` (ONNX layout): one float32, or with axis scales an array of
        `rank` dims that broadcasts along their axis."""
        if tensor not in self.axis_scales:
            return np.float32(self.scales[tensor])
        axis, per_index = self.axis_scales[tensor]
        return along_axis(per_index, axis, rank)

    def weight_scheme(self) -> str:
        """How the weight scales were chosen, for the report."""
        grouped = sum(wq.channel_scale is not None for wq in self.weights.values())
        chosen = ("one per tensor" if self.weight_group == 0 else "one per output channel"
                  if self.weight_group == 1 else f"one per {self.weight_group} output channels")
        rounding = f"; {len(self.adarounded)} rounded by AdaRound" if self.adarounded else ""
        return f"{chosen}; {grouped} of {len(self.weights)} weighted layers use more than one scale{rounding}"


def segmented_concats(graph: Graph, handlers, fixed) -> list:
    """Concat nodes whose output is a model output that nothing else reads (and that a pre-quantized model does
    not fix): each input keeps its own scale up to the output, which is dequantized to float there anyway."""
    return [n for n in graph.nodes if handlers[n.name].output_scale == "shared" and n.op_type == "Concat"
            and graph.is_graph_output(n.outputs[0]) and not graph.consumers(n.outputs[0])
            and n.outputs[0] not in fixed and sum(1 for i in n.inputs if i) > 1]


def float_tensors(graph: Graph, handlers, segmented) -> frozenset:
    """Tensors a float CPU step writes as float32 instead of int8: a model output made by a lookup-table
    activation (a detector's sigmoid scores, mostly far below their largest value, keep their precision
    there), and a segmented concat's output with those of its inputs that such an activation makes for it
    alone, where there is one (each other input is dequantized at its own scale on the way). 4-D tensors
    stay int8: they are stored NHWC and reach the output through an int8 transpose (as float32, the PP-OCR
    detectors' maps measured the same)."""
    def float_writer(tensor: str) -> bool:
        node = graph.producer(tensor)
        return (node is not None and len(graph.shapes.get(tensor, ())) != 4
                and handlers[node.name].writes_float(NodeView(node, graph)))

    chosen: set[str] = set()
    by_output = {n.outputs[0]: n for n in segmented}
    for vo in graph.outputs:
        if float_writer(vo.name):
            chosen.add(vo.name)
        elif vo.name in by_output and len(graph.shapes.get(vo.name, ())) != 4:
            node = by_output[vo.name]
            floats = {i for i in node.inputs if i and float_writer(i)
                      and {c.name for c in graph.consumers(i)} == {node.name}}
            if floats:  # else the int8 bytes with one scale per segment lose nothing
                chosen.update(floats | {vo.name})
    return frozenset(chosen)


JOINED_RATIO = 100.0  # a concat joining ranges further apart than this is worth a warning


def joined_ranges(graph: Graph, quant: "QuantTable") -> list[str]:
    """Warnings for concats inside the network that join ranges JOINED_RATIO or more apart: they share one
    scale (their reader needs one), so the smaller inputs keep only a few int8 levels. Model outputs keep
    each input's scale instead (segmented_concats) and are not listed."""
    lines = []
    for node in graph.nodes:
        out = node.outputs[0] if node.outputs else ""
        if node.op_type != "Concat" or out in quant.axis_scales or out not in quant.scales:
            continue
        ranges = [quant.amax.get(i, 0.0) for i in graph.activations(node)]
        ranges = [r for r in ranges if r > 0]
        if len(ranges) > 1 and max(ranges) >= JOINED_RATIO * min(ranges):
            levels = min(ranges) / quant.scales[out]
            lines.append(f"Concat '{node.name}' joins ranges {min(ranges):.3g} to {max(ranges):.3g} under one int8 "
                         f"scale: its smallest input keeps about {max(levels, 0.0):.1f} of 127 levels")
    return lines


def segment_scales(graph: Graph, node, scales: dict[str, float]) -> tuple[int, tuple[float, ...]]:
    """(axis, one scale per index along it) of a segmented concat: each input's scale over its extent (a
    constant operand: the scale of its own largest magnitude)."""
    out = node.outputs[0]
    rank = len(graph.shapes[out])
    axis = node.attrs["axis"] % rank
    per_index: list[float] = []
    for name in (i for i in node.inputs if i):
        if name in graph.initializers:
            value = np.asarray(graph.initializers[name])
            per_index += [scale_for(float(np.max(np.abs(value))) if value.size else 0.0)] * value.shape[axis]
        else:
            per_index += [scales[name]] * graph.shapes[name][axis]
    return axis, tuple(per_index)


def group_scales(w: np.ndarray, axis: int, size: int) -> np.ndarray:
    """One scale per run of `size` output channels (along `axis`), from each run's largest magnitude."""
    tops = run_tops(channel_ranges(w, axis), size)
    return np.repeat(np.asarray([scale_for(float(t)) for t in tops], np.float32), size)[:w.shape[axis]]


def quantize_weights(w: np.ndarray, b: np.ndarray | None, s_in: float, s_w=None, axis: int | None = None,
                     group: int = 0) -> WeightQuant:
    """Symmetric int8 weights and int32 bias at s_in*s_w.

    `s_w` is a given scale (a float, or one per output channel along `axis`); without it the scale comes
    from the data: per tensor, or with `group` > 0 one per run of `group` output channels along `axis`."""
    if s_w is None and axis is not None and group > 0:
        s_w = group_scales(w, axis, group)
    if s_w is None:
        s_w = scale_for(float(np.max(np.abs(w))) if w.size else 0.0)
    cs = np.asarray(s_w, np.float32).reshape(-1)
    per_channel = len(set(cs.tolist())) > 1  # equal scales everywhere are one scale
    divisor = np.float32(cs[0])
    if per_channel:
        shape = [1] * w.ndim
        shape[axis] = len(cs)
        divisor = cs.reshape(shape)
    q = symmetric_int8(w, divisor)
    top = float(cs.max())
    wq = WeightQuant(q, top, None, bias_scale(s_in, top), cs if per_channel else None, axis or 0, s_in)
    if b is None:
        return wq
    return dataclasses.replace(wq, bias=quantize_bias(b, wq.bias_scales()))


def _scale_groups(graph: Graph, order, handlers, segmented=frozenset()) -> dict[str, str]:
    """Tensors that must share one scale -> a representative (union-find).

    A scale-preserving op ("input" rule) ties its output to its input; a "shared" op (Concat) ties all
    its inputs to its output, so the concatenation moves int8 bytes without requantizing, except a
    `segmented` one (node names), whose inputs keep their own scales. Tensors whose scale is fixed by a
    fused Clip(0, hi) never join a group.
    """
    parent: dict[str, str] = {}

    def find(t: str) -> str:
        while parent.get(t, t) != t:
            t = parent[t]
        return t

    fixed = set()
    for node in order:
        rule = handlers[node.name].output_scale
        acts = graph.activations(node)
        out = node.outputs[0]
        if node.fused.clip or node.fused.softmax is not None or (rule == "input" and acts and acts[0] in fixed):
            fixed.add(out)
            continue
        tied = acts[:1] if rule == "input" else acts if rule == "shared" and node.name not in segmented else []
        for t in tied:
            if t not in fixed:
                parent[find(t)] = find(out)
    return {t: find(t) for t in list(parent) + [p for p in parent.values()]}


@dataclass(frozen=True)
class ScaleUnit:
    """Activations that get one scale from their calibrated ranges (build_table): the scale of the largest
    range of `calibrated`; `scaled` are every tensor that carries it (views and splits of them too)."""
    calibrated: tuple[str, ...]
    scaled: tuple[str, ...]


def scale_units(graph: Graph, handlers) -> tuple[list[ScaleUnit], list]:
    """(the units whose scale a range choice sets, in graph order; the segmented concats, whose output scales
    follow their inputs'). Left out: scales a pre-quantized model fixes, a fused Clip's, int32 accumulators'
    (they follow the weights), and every tensor that shares one of those."""
    order = topological(graph.nodes, [i.name for i in graph.inputs] + list(graph.initializers))
    fixed = propagate_fixed_scales(graph, order, handlers)
    segmented = segmented_concats(graph, handlers, fixed)
    groups = _scale_groups(graph, order, handlers, frozenset(n.name for n in segmented))
    derived = set(fixed) | {n.outputs[0] for n in segmented}
    unit_of: dict[str, str] = {}
    for vi in graph.inputs:
        if not graph.is_index(vi.name):
            unit_of[vi.name] = groups.get(vi.name, vi.name)
    for node in order:
        acts = graph.activations(node)
        follows = handlers[node.name].output_scale == "input" and acts
        for out in (o for o in node.outputs if o):
            if out in derived:
                continue
            if node.fused.clip or node.fused.accumulate or node.fused.softmax is not None or \
                    (follows and acts[0] not in unit_of):
                derived.add(out)
                continue
            unit_of[out] = unit_of[acts[0]] if follows else groups.get(out, out)
    spoiled = {groups.get(t, t) for t in derived} | {unit_of[t] for t in derived if t in unit_of}
    units: dict[str, tuple[list, list]] = {}
    for t, root in unit_of.items():
        if root in spoiled:
            continue
        calibrated, scaled = units.setdefault(root, ([], []))
        scaled.append(t)
        if groups.get(t, t) == root:
            calibrated.append(t)
    return [ScaleUnit(tuple(c), tuple(s)) for c, s in units.values() if c], segmented


def propagate_fixed_scales(graph: Graph, order, handlers) -> dict[str, float]:
    """A model's fixed output scale flows back through scale-preserving ops (views, pools) to their input."""
    fixed = dict(graph.fixed_scales)
    for node in reversed(order):
        acts = graph.activations(node)
        if handlers[node.name].output_scale == "input" and acts and node.outputs[0] in fixed:
            src, scale = acts[0], fixed[node.outputs[0]]
            if fixed.setdefault(src, scale) != scale:
                raise UnsupportedError(f"tensor '{src}': scale {fixed[src]:.6g}, but {node.op_type} "
                                       f"'{node.name}' (which moves int8 values) gives it {scale:.6g}")
    return fixed


def corrected_bias(w: np.ndarray, b: np.ndarray | None, wq: WeightQuant, shift_of) -> np.ndarray | None:
    """Bias correction (Nagel et al. 2019, empirical): subtract the mean output error of the int8 weights."""
    scale = np.float64(np.float32(wq.scale))
    if wq.channel_scale is not None:
        shape = [1] * w.ndim
        shape[wq.axis] = -1
        scale = wq.channel_scale.astype(np.float64).reshape(shape)
    error = wq.q.astype(np.float64) * scale - w.astype(np.float64)
    shift = shift_of(error)
    if shift is None:
        return b
    return ((0.0 if b is None else b.astype(np.float64)) - shift).astype(np.float32)


def fixed_weight_scale(graph: Graph, handler, view: NodeView):
    """A pre-quantized model's weight scale: a float, or one per output channel when the model's
    DequantizeLinear axis is the handler's output-channel axis (anything else is refused)."""
    name = handler.weight_input(view) or ""
    if name not in graph.fixed_weight_scales:
        return None
    scale = graph.fixed_weight_scales[name]
    if not isinstance(scale, tuple):
        return scale
    values, axis = scale
    axes = handler.channel_axis(view)
    if axes is None or axes[0] != axis % len(view.shape(name)):
        raise UnsupportedError(f"tensor '{name}': per-channel scales along axis {axis}; {view.op_type} "
                               f"'{view.name}' can only split its output channels into separate Gemmini calls")
    return values


def build_table(graph: Graph, handlers: Mapping[str, object], amax: dict[str, float], method: str,
                num_samples: int, means: dict | None = None, weight_group: int = 0,
                keep_float: frozenset = frozenset(), rounder=None) -> QuantTable:
    """Assign a scale to every activation and quantize every node's weights, in graph order.

    With `means` (per-channel input means from calibration) biases are corrected for the mean error
    of the int8 weights, except where a pre-quantized model fixes the weights. `weight_group` > 0 gives
    every run of that many output channels its own weight scale, where the handler can split its output
    channels into separate Gemmini calls (`Handler.channel_axis`). `handlers`: each node's handler by
    node name (ops.registry.handlers_for), for its scale rule and its weights. `keep_float`: node names whose
    weights stay float32 (--keep-float, ops/keep_float.py): they get an output scale but no weight entry.
    `rounder` (adaround.Rounder, --adaround): rounds the weights of the layers it handles, at the scales
    chosen here, to minimise their output error instead of to the nearest integer. Model outputs that a
    lookup table (or a segmented concat joining one) makes are written as float32 (float_tensors).
    A node that writes int32 accumulators (Fused.accumulate) gets one weight scale and the accumulator's
    scale s_in*s_w as its output's.
    """
    order = topological(graph.nodes, [i.name for i in graph.inputs] + list(graph.initializers))
    fixed = propagate_fixed_scales(graph, order, handlers)
    segmented = segmented_concats(graph, handlers, fixed)
    groups = _scale_groups(graph, order, handlers, frozenset(n.name for n in segmented))
    group_amax: dict[str, float] = {}
    for t, root in groups.items():
        group_amax[root] = max(group_amax.get(root, 0.0), amax.get(t, 0.0))

    def calibrated(t: str) -> float:
        if t in fixed:  # a pre-quantized model's own scale
            return fixed[t]
        return scale_for(group_amax[groups[t]] if t in groups else amax.get(t, 0.0))

    scales: dict[str, float] = {vi.name: calibrated(vi.name) for vi in graph.inputs if not graph.is_index(vi.name)}
    weights: dict[str, WeightQuant] = {}
    for node in order:
        handler = handlers[node.name]
        activations = graph.activations(node)
        for out in (o for o in node.outputs if o):
            if out in fixed:
                scales[out] = fixed[out]
            elif node.fused.clip:
                scales[out] = scale_for(node.fused.clip[1])
            elif node.fused.softmax is not None:  # the normalizer writes 127 * softmax
                scales[out] = normalizer.OUT_SCALE
            elif handler.output_scale == "input" and activations:
                scales[out] = scales[activations[0]]
            else:
                floor = handler.output_scale_floor(NodeView(node, graph), scales[activations[0]]) \
                    if activations else 0.0
                scales[out] = max(calibrated(out), floor)
        float_w = handler.float_weights(NodeView(node, graph)) if node.name not in keep_float else None
        if float_w is not None:
            w, b = float_w
            view = NodeView(node, graph)
            fixed_w = fixed_weight_scale(graph, handler, view)
            axes = handler.channel_axis(view)
            axis = axes[1] if axes else None
            s_in = scales[activations[0]]
            accumulates = node.fused.accumulate  # int32 accumulators out: one scale for all their columns
            group = 0 if accumulates else graph.channel_groups.get(node.name, weight_group)
            wq = quantize_weights(w, b, s_in, fixed_w, axis, group)
            rounded = rounder(node.name, w, wq) if rounder is not None and fixed_w is None else None
            if rounded is not None:
                wq = dataclasses.replace(wq, q=rounded)
            if means and fixed_w is None and activations[0] in means:
                b = corrected_bias(w, b, wq, lambda e: handler.output_shift(view, e, means[activations[0]]))
                same = wq.channel_scale if wq.channel_scale is not None else wq.scale
                wq = quantize_weights(w, b, s_in, same, axis) if rounded is None else \
                    dataclasses.replace(wq, bias=None if b is None else quantize_bias(b, wq.bias_scales()))
            weights[node.name] = wq
            if accumulates:
                scales[node.outputs[0]] = wq.bias_scale
    axis_scales = {}
    for node in segmented:
        axis, per_index = segment_scales(graph, node, scales)
        if len(set(per_index)) > 1:
            axis_scales[node.outputs[0]] = (axis, per_index)
        scales[node.outputs[0]] = max(per_index)  # equal scales everywhere: the one scale, bytes copied as they are
    return QuantTable(scales, weights, dict(amax), method, num_samples, weight_group, frozenset(keep_float),
                      tuple(rounder.rounded) if rounder is not None else (), axis_scales,
                      float_tensors(graph, handlers, segmented))
