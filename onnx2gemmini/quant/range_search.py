"""Output-aware range search: each tensor's int8 range chosen by the error it causes at its consumers' outputs.

A tensor's own quantization MSE (the `mse` method) weighs every value alike and treats clipping and rounding
errors as interchangeable. Its consumers do not: a convolution sums many inputs, so the clipping of large
values, all of one sign, adds up coherently where independent rounding errors partly cancel; a max-pool
keeps exactly the values that clipping cut; a sigmoid or softmax head flattens errors where it saturates
and magnifies them where it does not. So for every tensor the candidates (its mse, percentile and minmax
thresholds) are tried one at a time: the tensor alone is quantized, its consumer nodes run in onnxruntime
in float on a few calibration samples, and the candidate with the smallest relative squared error at their
outputs wins. Consumers that only move values (reshapes, transposes) are looked through to the nodes that
compute. A tensor nobody consumes (a model output) keeps its first candidate, mse: for it the output's error
is its own.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx

from ..errors import ModelError
from ..numerics import dequantize, quantize, scale_for
from ..ort_session import session

SAMPLES = 8                 # calibration samples the candidates are compared on, at most
BUDGET_BYTES = 384 * 2**20  # float values of every tensor kept for them, at most
LOOK_THROUGH = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity"}


def choose(model: onnx.ModelProto, sess, outputs: list[str], samples: list[dict],
           candidates: dict[str, list[float]]) -> dict[str, float]:
    """{tensor: amax}: for each tensor of `candidates` (thresholds, preferred first), the one whose
    quantization disturbs its consumers' outputs least on `samples`. `sess` computes `outputs` (every
    float tensor) from a sample."""
    values = _values(sess, outputs, samples)
    consumers = _consumers(model)
    weights = {t.name: t for t in model.graph.initializer}
    chosen = {}
    for t, options in candidates.items():
        options = _distinct(options)
        nodes = _computing_consumers(t, consumers)
        if len(options) < 2 or not nodes or t not in values:
            chosen[t] = options[0] if options else 0.0
            continue
        chosen[t] = _best(t, options, nodes, weights, values, model)
    return chosen


def take_samples(data, budget_per_sample: int) -> list[dict]:
    """Up to SAMPLES samples spread over `data`, as many as BUDGET_BYTES allows for every tensor's values."""
    n = max(1, min(SAMPLES, data.num_samples, BUDGET_BYTES // max(budget_per_sample, 1)))
    picks = np.unique(np.linspace(0, data.num_samples - 1, n).round().astype(int))
    return [data.sample(int(i)) for i in picks]


def _values(sess, outputs: list[str], samples: list[dict]) -> dict[str, list[np.ndarray]]:
    values: dict[str, list[np.ndarray]] = defaultdict(list)
    for sample in samples:
        computed = dict(zip(outputs, sess.run(outputs, sample)))
        for name, v in {**sample, **computed}.items():
            values[name].append(np.asarray(v))
    return values


def _distinct(options: list[float]) -> list[float]:
    """Candidates that give different int8 scales, in order."""
    seen, kept = set(), []
    for a in options:
        s = scale_for(a)
        if s not in seen:
            seen.add(s)
            kept.append(a)
    return kept


def _consumers(model: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    by_input: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in model.graph.node:
        for name in dict.fromkeys(i for i in node.input if i):
            by_input[name].append(node)
    return by_input


def _computing_consumers(t: str, consumers) -> list[onnx.NodeProto]:
    """The nodes reading `t`, with the value-moving ones followed to the nodes they feed (kept too: the
    sub-model runs them)."""
    nodes, frontier, seen = [], [t], set()
    while frontier:
        name = frontier.pop()
        for node in consumers.get(name, []):
            if id(node) in seen:
                continue
            seen.add(id(node))
            nodes.append(node)
            if node.op_type in LOOK_THROUGH and node.input[0] == name:
                frontier.extend(o for o in node.output if o)
    return nodes


def _best(t: str, options: list[float], nodes, weights, values, model) -> float:
    """The candidate with the smallest summed relative squared error at the sub-model's outputs."""
    produced = {o for n in nodes for o in n.output if o}
    feeds = [i for i in dict.fromkeys(i for n in nodes for i in n.input if i)
             if i not in produced and i not in weights]
    if any(f not in values for f in feeds):
        return options[0]
    ends = [o for o in dict.fromkeys(o for n in nodes for o in n.output if o) if o in values]
    if not ends:
        return options[0]
    sess = _sub_session(model, nodes, feeds, ends, weights, values)
    if sess is None:
        return options[0]
    energy = {e: sum(float(np.sum(np.square(v, dtype=np.float64))) for v in values[e]) for e in ends}
    errors = []
    for amax in options:
        scale = scale_for(amax)
        err = 0.0
        for k in range(len(values[t])):
            feed = {f: values[f][k] for f in feeds}
            feed[t] = dequantize(quantize(values[t][k], scale), scale).astype(values[t][k].dtype)
            for e, got in zip(ends, sess.run(ends, feed)):
                diff = got.astype(np.float64) - values[e][k]
                err += float(np.sum(diff * diff)) / max(energy[e], 1e-30)
        errors.append(err)
    return options[int(np.argmin(errors))]


def _sub_session(model, nodes, feeds, ends, weights, values):
    """ort_session.session on just `nodes` (their weights included), fed `feeds`; None when onnxruntime
    will not build it."""
    used = {i for n in nodes for i in n.input}
    inputs = [onnx.helper.make_tensor_value_info(f, onnx.helper.np_dtype_to_tensor_dtype(values[f][0].dtype),
                                                 list(values[f][0].shape)) for f in feeds]
    outputs = [onnx.helper.make_tensor_value_info(e, onnx.helper.np_dtype_to_tensor_dtype(values[e][0].dtype),
                                                  None) for e in ends]
    graph = onnx.helper.make_graph(list(nodes), "consumers", inputs, outputs,
                                   [weights[w] for w in weights if w in used])
    sub = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    try:
        return session(sub)
    except ModelError:  # a sub-graph onnxruntime will not take keeps the preferred candidate
        return None
