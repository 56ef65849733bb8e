"""A spectrum's magnitude with one scale per frequency: sqrt(re² + im²) over a conv's paired output channels,
read by a conv, evened out bin by bin with the calibration data (a calibrated pass: it needs the ranges).

Why: audio models compute their spectrogram as a Conv1d with a Fourier basis (silero-vad and the detectors
derived from it), then the magnitude of each bin. Over speech the low bins are 20 to 50 times larger than the
high ones, so one int8 scale for the magnitude (and for the conv's output before it) leaves the high bins a few
levels: silero-vad's int8 speech decisions agreed with fp32 on 94.2% of the 500 held-out steps of
tests/test_real_vad.py, 97.0% with the bins evened out.

The rewrite keeps the float function: bin k's two channels (re_k, im_k) of the producing conv are divided by
s_k, so its magnitude is divided by s_k (the magnitude is positively homogeneous), and input channel k of the
reading conv is multiplied by s_k. s_k is bin k's largest calibrated magnitude over the geometric mean of all
bins' (SmoothQuant's migration of activation ranges into the next layer's weights, with alpha 1), so every bin
spans the same int8 range; a bin that never rises above zero keeps s_k = 1. That is the right amount when
each bin's weights have a scale of their own; with one weight scale for the conv, the evened-out rows of the
producing conv differ in range instead and its loud bins lose precision (tests/test_smooth_magnitude.py's
model, simulated: 37.5 dB as given, 37.0 at alpha 0.25, 0.6 evened out fully; with one weight scale per
channel 37.7, 39.5 at 0.75). So the amount is chosen per pattern, by measurement: s_k raised to
alpha in ALPHAS, each candidate simulated on the first calibration samples (the pattern alone, its weights
rounded as the compile will round them and every tensor in it quantized per tensor at its calibrated range),
and the most even one within TOLERANCE_DB of the best kept (alpha 0: the model as it is).

Pattern (after the default passes): Conv (constant weights, group 1) [-> Squeeze] -> two Slices of F channels
each (constant, step 1; the same ranges along the other axes) -> the magnitude Sqrt passes/fuse_magnitude.py
made of them [-> Unsqueeze] -> Conv (constant weights, group 1) reading all F channels; every tensor on the way
read only inside the pattern and none a model output.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..graph import Graph, Node
from ..numerics import channel_ranges, run_tops
from .rewrite import add_initializer

VIEWS = ("Squeeze", "Unsqueeze")


@dataclass(frozen=True)
class Magnitude:
    producer: Node              # the conv writing [re..., im...] channels
    starts: tuple[int, int]     # each slice's first channel in the producer's output
    bins: int                   # F: channels per slice
    magnitude: str              # the Sqrt's output: its per-channel ranges decide the scales
    reader: Node                # the conv reading the magnitude


def find(graph: Graph) -> list[Magnitude]:
    """Every magnitude pattern of the graph (module docstring)."""
    found = []
    for sqrt in graph.nodes:
        if sqrt.op_type != "Sqrt" or not sqrt.fused.magnitude:
            continue
        match = _match(graph, sqrt)
        if match is not None:
            found.append(match)
    return found


def run(graph: Graph, model: Callable[[], "onnx.ModelProto"], channel_ranges: Callable[[list[str]], dict[str, np.ndarray]],
        sample_values: Callable[[list[str], int], dict[str, list[np.ndarray]]], weight_group: int = 0,
        group: int = 0) -> list[str]:
    """Rescale every pattern of `graph` (`model()`: its float ONNX model, built only when there is one).
    `channel_ranges(tensors)` gives each
    tensor's largest |value| per channel (axis 1) over the calibration samples, `sample_values(tensors, n)`
    their values on the first n samples. `weight_group`: the compile's weight scales (0 one per tensor, 1 per
    channel, else per run of that many channels); `group` > 0: the producing conv's weights get one scale per
    `group` output channels (graph.channel_groups) where the rescale applies."""
    if graph.fixed_weight_scales or graph.fixed_scales:  # a pre-quantized model's scales are what they are
        return []
    patterns = find(graph)
    if not patterns:
        return []
    ranges = channel_ranges([p.magnitude for p in patterns])
    inputs = sample_values([p.producer.inputs[0] for p in patterns], SIMULATED_SAMPLES)
    changes = []
    for p in patterns:
        top = np.asarray(ranges[p.magnitude], np.float64)
        live = top > 0
        if live.sum() < 2:
            continue
        even = np.ones_like(top)
        even[live] = top[live] / np.exp(np.mean(np.log(top[live])))
        simulate = _Simulation(graph, model(), p, inputs[p.producer.inputs[0]])
        w1_group = weight_group if weight_group else group
        scores = {alpha: simulate(even ** alpha, w1_group, weight_group) for alpha in ALPHAS}
        best = max(scores.values())
        alpha = max(a for a in ALPHAS if scores[a] >= best - TOLERANCE_DB)
        figures = ", ".join(f"{a:g}: {scores[a]:.1f} dB" for a in ALPHAS)
        if alpha == 0:
            changes.append(f"{p.producer.name} -> {p.reader.name}: {p.bins} magnitude bins kept as they are "
                           f"(simulated output SQNR by alpha: {figures})")
            continue
        _rescale(graph, p, even ** alpha)
        if group:
            graph.channel_groups.setdefault(p.producer.name, group)
        changes.append(f"{p.producer.name} -> {p.reader.name}: {p.bins} magnitude bins evened out, alpha "
                       f"{alpha:g} (calibrated ranges {top[live].min():.3g} to {top.max():.3g}; simulated output "
                       f"SQNR by alpha: {figures})")
    return changes


ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
SIMULATED_SAMPLES = 16
# The simulated SQNR weighs the bins by their energy in the reading conv's output, so it undervalues the faint
# bins a trained detector reads downstream: the most even candidate within this margin of the best is kept.
# Set looking at silero-vad's streams (the simulated figures of its alphas lie within 1.5 dB, its decisions
# gain 7 points evened out fully); akiki's GRU detector is the model this rule was not chosen on.
TOLERANCE_DB = 1.0


def _rounded(w: np.ndarray, group: int) -> np.ndarray:
    """`w` rounded to symmetric int8 with one scale per tensor (group 0) or per run of `group` output
    channels (axis 0), as the compile rounds weights."""
    w = w.astype(np.float64)
    if group:
        tops = np.repeat(run_tops(channel_ranges(w, 0), group), group)[:w.shape[0]]
        step = np.maximum(tops, 1e-30).reshape((-1,) + (1,) * (w.ndim - 1)) / 127
    else:
        step = max(float(np.abs(w).max()), 1e-30) / 127
    return (np.round(w / step) * step).astype(np.float32)


class _Simulation:
    """The pattern alone (its sub-model from the producer's input to the reading conv's output) on the first
    calibration samples: `__call__(s, ...)` gives the reading conv's output SQNR (dB) against float with the
    pattern rescaled by `s`, its weights rounded and every tensor the compile stores quantized per tensor at its
    range on the samples."""

    def __init__(self, graph: Graph, model: "onnx.ModelProto", p: Magnitude, samples: list[np.ndarray]):
        from onnx.utils import Extractor

        from ..ort_session import session
        self.graph, self.p, self.samples = graph, p, samples
        self.x, self.y = p.producer.inputs[0], p.reader.outputs[0]
        self.sub = Extractor(onnx.shape_inference.infer_shapes(model)).extract_model([self.x], [self.y])
        stored = {o for n in graph.nodes for o in n.outputs}  # the quantized tensors (not the float model's own)
        self.inner = [o for n in self.sub.graph.node for o in n.output if o and o != self.y and o in stored]
        sess = session(self.sub)
        self.reference = np.concatenate([sess.run([self.y], {self.x: v})[0].ravel() for v in samples])

    def __call__(self, s: np.ndarray, w1_group: int, w2_group: int) -> float:
        import onnxruntime as ort

        from ..metrics import sqnr_db
        from ..ort_session import session
        p, x, y = self.p, self.x, self.y
        trial = self.graph.copy()
        producer = next(n for n in trial.nodes if n.name == p.producer.name)
        reader = next(n for n in trial.nodes if n.name == p.reader.name)
        _rescale(trial, Magnitude(producer, p.starts, p.bins, p.magnitude, reader), s)
        weights = {p.producer.inputs[1]: _rounded(trial.const(producer.inputs[1]), w1_group),
                   p.reader.inputs[1]: _rounded(trial.const(reader.inputs[1]), w2_group)}
        if len(producer.inputs) > 2 and producer.inputs[2]:
            weights[p.producer.inputs[2]] = trial.const(producer.inputs[2])
        sub = onnx.ModelProto()
        sub.CopyFrom(self.sub)
        for init in sub.graph.initializer:
            if init.name in weights:
                init.CopyFrom(numpy_helper.from_array(weights[init.name], init.name))
        probe = onnx.ModelProto()
        probe.CopyFrom(sub)
        probe.graph.output.extend(helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in self.inner)
        sess = session(probe)
        runs = [sess.run(self.inner, {x: v}) for v in self.samples]
        tops = {t: max(float(np.abs(r[k]).max()) for r in runs) for k, t in enumerate(self.inner)}
        tops[x] = max(float(np.abs(v).max()) for v in self.samples)
        qsess = session(_with_qdq(sub, x, tops), level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)  # as written
        ours = np.concatenate([qsess.run([y], {x: v})[0].ravel() for v in self.samples])
        value = sqnr_db(self.reference.astype(np.float64), ours.astype(np.float64))
        return -np.inf if value is None else float(value)


def _with_qdq(model, x: str, tops: dict[str, float]):
    """`model` with a per-tensor QuantizeLinear/DequantizeLinear pair (int8 at its largest |value|) after its
    input `x` and after each other tensor of `tops`, read by every node instead of the float tensor; the pairs
    placed right after their tensors' producers, so the node order stays topological."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    renamed = {t: f"{t}__sim_dq" for t in tops}

    def pair(t: str) -> list:
        out.graph.initializer.extend([
            numpy_helper.from_array(np.array(max(tops[t], 1e-30) / 127, np.float32), f"{t}__sim_s"),
            numpy_helper.from_array(np.array(0, np.int8), f"{t}__sim_z")])
        return [helper.make_node("QuantizeLinear", [t, f"{t}__sim_s", f"{t}__sim_z"], [f"{t}__sim_q"]),
                helper.make_node("DequantizeLinear", [f"{t}__sim_q", f"{t}__sim_s", f"{t}__sim_z"], [renamed[t]])]

    nodes = pair(x)
    for node in model.graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [renamed.get(name, name) for name in node.input]
        nodes.append(copy)
        nodes += [n for o in node.output if o in tops for n in pair(o)]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def _rescale(graph: Graph, p: Magnitude, s: np.ndarray) -> None:
    w1 = graph.const(p.producer.inputs[1]).astype(np.float64)
    divisor = np.ones(w1.shape[0])
    for start in p.starts:
        divisor[start:start + p.bins] = s
    shape = (-1,) + (1,) * (w1.ndim - 1)
    p.producer.inputs[1] = add_initializer(graph, f"{p.producer.name}_bins_W",
                                           (w1 / divisor.reshape(shape)).astype(np.float32))
    if len(p.producer.inputs) > 2 and p.producer.inputs[2]:
        b1 = graph.const(p.producer.inputs[2]).astype(np.float64)
        p.producer.inputs[2] = add_initializer(graph, f"{p.producer.name}_bins_B", (b1 / divisor).astype(np.float32))
    w2 = graph.const(p.reader.inputs[1]).astype(np.float64)
    p.reader.inputs[1] = add_initializer(graph, f"{p.reader.name}_bins_W",
                                         (w2 * s.reshape((1, -1) + (1,) * (w2.ndim - 2))).astype(np.float32))


def _through_views(graph: Graph, tensor: str, forward: bool) -> tuple[str, Node | None]:
    """Past the conv1d pass's Squeeze/Unsqueeze views, each read only by the next: forward to the reader of
    `tensor`, or backward to its producer. Returns (the tensor next to that node, the node)."""
    while True:
        node = graph.only_consumer(tensor) if forward else graph.producer(tensor)
        if node is None or node.op_type not in VIEWS:
            return tensor, node
        if forward:
            if node.inputs[0] != tensor:
                return tensor, None
            tensor = node.outputs[0]
        else:
            if graph.only_consumer(node.inputs[0]) is None:
                return tensor, None
            tensor = node.inputs[0]


def _channel_slice(graph: Graph, tensor: str, square: Node) -> tuple[str, int, int, tuple] | None:
    """(sliced tensor, first channel, count, the ranges along the other axes) of a constant step-1 Slice
    along axis 1 read only by `square`; else None."""
    node = graph.producer(tensor)
    if node is None or node.op_type != "Slice" or [c.name for c in graph.consumers(tensor)] != [square.name] \
            or graph.is_graph_output(tensor):
        return None
    source = node.inputs[0]
    shape = graph.shapes.get(source, ())
    if len(shape) < 2 or any(t and graph.const(t) is None for t in node.inputs[1:5]):
        return None
    starts, ends = (np.atleast_1d(graph.const(t)) for t in node.inputs[1:3])
    axes = np.atleast_1d(graph.const(node.inputs[3])) if len(node.inputs) > 3 and node.inputs[3] \
        else np.arange(len(starts))
    steps = np.atleast_1d(graph.const(node.inputs[4])) if len(node.inputs) > 4 and node.inputs[4] \
        else np.ones(len(axes), np.int64)
    ranges = {a: (0, d) for a, d in enumerate(shape)}
    for a, b, e, st in zip(axes, starts, ends, steps):
        a = int(a) % len(shape)
        if int(st) != 1:
            return None
        ranges[a] = tuple(max(0, min(int(x) + shape[a] if int(x) < 0 else int(x), shape[a])) for x in (b, e))
    start, stop = ranges.pop(1)
    if stop <= start:
        return None
    return source, start, stop - start, tuple(sorted(ranges.items()))


def _match(graph: Graph, sqrt: Node) -> Magnitude | None:
    if not sqrt.fused.magnitude:  # passes/fuse_magnitude.py: the Sqrt reads the two parts
        return None
    slices = [_channel_slice(graph, part, sqrt) for part in sqrt.inputs]
    if any(s is None for s in slices) or slices[0][0] != slices[1][0] or slices[0][2:] != slices[1][2:]:
        return None  # not the same channel count of one tensor, or not the same positions along the others
    source, bins = slices[0][0], slices[0][2]
    starts = (slices[0][1], slices[1][1])
    if abs(starts[0] - starts[1]) < bins:
        return None  # overlapping channels
    if len(graph.consumers(source)) != 2 or graph.is_graph_output(source):
        return None
    produced, producer = _through_views(graph, source, forward=False)
    if producer is None or not _plain_conv(graph, producer) or graph.is_graph_output(produced):
        return None
    _, reader = _through_views(graph, sqrt.outputs[0], forward=True)
    if reader is None or not _plain_conv(graph, reader) or graph.const(reader.inputs[1]).shape[1] != bins:
        return None
    if graph.is_graph_output(sqrt.outputs[0]):
        return None
    return Magnitude(producer, starts, bins, sqrt.outputs[0], reader)


def _plain_conv(graph: Graph, node: Node) -> bool:
    """A conv with constant weights and bias, group 1."""
    return (node.op_type == "Conv" and node.attrs.get("group", 1) == 1 and len(node.inputs) > 1
            and graph.const(node.inputs[1]) is not None
            and all(graph.const(t) is not None for t in node.inputs[2:] if t))
