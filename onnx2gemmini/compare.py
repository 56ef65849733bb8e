"""`onnx2gemmini diff`: the Gemmini int8 result against onnxruntime, per output and per layer.

Three executions meet here: onnxruntime on the float model (accuracy of the quantization),
onnxruntime on the QDQ model of the same quantization (the bit-exact golden), and the emulator.
Layers are compared in isolation: each layer's QDQ sub-model is fed the emulator's own layer inputs, so
one inexact layer does not hide or smear the others.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
from onnx.utils import Extractor

from .calibrate import session
from .compiler import Compiled
from .data import Dataset
from .golden import build_float, build_qdq, input_tensor_name
from .metrics import cosine, sqnr_db, top1_agreement
from .numerics import quantize, resadd_mismatch_rate, resadd_tolerance
from .plan import CpuOp, GlobalAverage, Resadd, Tensor
from .run.emulator import Emulator
from .tolerance import EXACT, Tolerance


def step_tolerance(step, plan) -> Tolerance:
    """How far Gemmini's semantics may take this step from onnxruntime's QDQ semantics: the residual add
    saturates each scaled input to int8 before adding, the global average rounds sum/count half to even,
    a CPU kernel states its own (cpu/); matmuls and convs are bit-exact."""
    if isinstance(step, Resadd):
        return Tolerance(resadd_tolerance(step.C_scale), resadd_mismatch_rate(step.A_scale, step.B_scale, step.C_scale),
                         "resadd rounds the smaller-scale input to int8 first")
    if isinstance(step, GlobalAverage):
        return Tolerance(1, min(1.0, 2.0 / (step.dim * step.dim)), "global average: ties and float division")
    if isinstance(step, CpuOp):
        return step.golden_tolerance(plan.call_site(step))
    return EXACT


def to_onnx_layout(t: Tensor, value: np.ndarray) -> np.ndarray:
    return value.transpose(0, 3, 1, 2) if t.layout == "NHWC" else value


@dataclass
class _Layer:
    name: str
    op: str
    tensor: str
    inputs: list[str]
    tolerance: Tolerance
    unfused: bool = False  # checked against onnxruntime's basic level (cpu.CpuKernel.golden_unfused)
    ref: list = field(default_factory=list)
    ours: list = field(default_factory=list)
    lsb: int = 0
    mismatches: int = 0
    compared: int = 0


def _layers(compiled: Compiled) -> list[_Layer]:
    plan, graph = compiled.plan, compiled.graph
    by_node: dict[str, list] = {}
    for step in plan.steps:
        by_node.setdefault(step.node, []).append(step)
    layers = []
    for node in graph.nodes:
        steps = by_node.get(node.name, [])
        if not steps:
            continue  # a view, or a concat written entirely in place: no step of its own to compare
        inputs = list(dict.fromkeys(i for i in node.inputs if i and i not in graph.initializers))  # once each
        tolerance = EXACT
        for s in steps:
            tolerance = tolerance.combine(step_tolerance(s, plan))
        unfused = any(isinstance(s, CpuOp) and s.params.golden_unfused for s in steps)
        layers.append(_Layer(node.name, node.op_type, node.outputs[0], inputs, tolerance, unfused))
    return layers


def _holders(plan) -> dict[str, str]:
    """ONNX tensor name -> the plan tensor first holding its int8 value."""
    index: dict[str, str] = {}
    for tid, t in plan.tensors.items():
        if t.onnx_name and t.kind != "input":
            index.setdefault(t.onnx_name, tid)
    return index


def run_diff(compiled: Compiled, data: Dataset) -> dict:
    """Compare over every sample of `data`; returns the CONTRACTS.md `diff --json` document."""
    plan, graph, quant = compiled.plan, compiled.graph, compiled.quant
    layers = _layers(compiled)
    qdq = build_qdq(graph, quant, plan.model_name)
    output_names = [o.name for o in graph.outputs]
    fp32 = session(build_float(graph), [l.tensor for l in layers])
    golden = session(qdq)
    extractor = Extractor(onnx.shape_inference.infer_shapes(qdq))
    sub_sessions = {}
    for layer in layers:
        feeds = [input_tensor_name(graph, t) for t in layer.inputs]
        sub = extractor.extract_model(feeds, [layer.tensor])
        level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if layer.unfused else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sub_sessions[layer.name] = (session(sub, level=level), feeds)
    emulator = Emulator(plan)
    holders = _holders(plan)

    def int8_value(buffers, onnx_name: str) -> np.ndarray:
        t = plan.tensors[holders[onnx_name]]
        return to_onnx_layout(t, emulator.get(buffers, t.id))

    fp32_out = {n: [] for n in output_names}
    int8_out = {n: [] for n in output_names}
    stats = {n: {"compared": 0, "mismatches": 0, "max_lsb": 0} for n in output_names}
    fp32_layer_names = [l.tensor for l in layers]
    for i in range(data.num_samples):
        sample = data.sample(i)
        buffers = emulator.run(sample, keep=True)
        ref_values = dict(zip(output_names + fp32_layer_names,
                              fp32.run(output_names + fp32_layer_names, sample)))
        gold = dict(zip(output_names, golden.run(output_names, sample)))
        for name, tid in zip(output_names, plan.outputs):
            t = plan.tensors[tid]
            q = emulator.get(buffers, tid).astype(np.int32)
            g = quantize(gold[name], t.scale).astype(np.int32)
            st = stats[name]
            st["compared"] += q.size
            st["mismatches"] += int(np.count_nonzero(q != g))
            st["max_lsb"] = max(st["max_lsb"], int(np.max(np.abs(q - g))) if q.size else 0)
            fp32_out[name].append(ref_values[name])
            int8_out[name].append(q.astype(np.float32) * np.float32(t.scale))
        for layer in layers:
            ours = int8_value(buffers, layer.tensor).astype(np.int32)
            scale = np.float32(quant.scales[layer.tensor])
            sess, feeds = sub_sessions[layer.name]
            feed = {}
            for src, name in zip(layer.inputs, feeds):
                feed[name] = int8_value(buffers, src).astype(np.float32) * np.float32(quant.scales[src])
            gold_layer = quantize(sess.run([layer.tensor], feed)[0], scale).astype(np.int32)
            diff = np.abs(ours - gold_layer)
            layer.lsb = max(layer.lsb, int(diff.max()) if diff.size else 0)
            layer.mismatches += int(np.count_nonzero(diff))
            layer.compared += diff.size
            layer.ref.append(ref_values[layer.tensor])
            layer.ours.append(ours.astype(np.float32) * scale)
    return _summarize(compiled, data, layers, fp32_out, int8_out, stats)


def _summarize(compiled, data, layers, fp32_out, int8_out, stats) -> dict:
    outputs = {}
    for name in fp32_out:
        # samples one after the other (a scalar output is one value per sample)
        ref = np.concatenate([np.atleast_1d(r) for r in fp32_out[name]])
        ours = np.concatenate([np.atleast_1d(o) for o in int8_out[name]])
        outputs[name] = {
            "fp32_vs_int8": {"max_abs": float(np.max(np.abs(ref - ours))), "cosine": cosine(ref, ours),
                             "sqnr_db": sqnr_db(ref, ours), "top1_agreement": top1_agreement(ref, ours)},
            "int8_vs_ort_qdq": stats[name],
        }
    layer_rows = []
    for layer in layers:
        ref, ours = np.concatenate([r.ravel() for r in layer.ref]), np.concatenate([o.ravel() for o in layer.ours])
        layer_rows.append({"name": layer.name, "op": layer.op, "sqnr_db": sqnr_db(ref, ours),
                           "cosine": cosine(ref, ours), "max_lsb_vs_ort_qdq": layer.lsb,
                           "mismatches_vs_ort_qdq": layer.mismatches, "compared": layer.compared,
                           "tolerance_lsb": layer.tolerance.lsb,
                           "mismatch_rate": layer.mismatches / layer.compared if layer.compared else 0.0,
                           "allowed_mismatches": layer.tolerance.allowed(layer.compared),
                           "tolerance_why": layer.tolerance.why})
    result = {"samples": data.num_samples, "outputs": outputs, "layers": layer_rows}
    if data.labels is not None and len(fp32_out) >= 1:
        first = next(iter(fp32_out))
        ref, ours = np.concatenate(fp32_out[first]), np.concatenate(int8_out[first])
        labels = data.labels
        result["accuracy"] = {"fp32": float(np.mean(ref.reshape(len(labels), -1).argmax(-1) == labels)),
                              "int8": float(np.mean(ours.reshape(len(labels), -1).argmax(-1) == labels))}
    exact_model = all(l.tolerance == EXACT for l in layers)
    failures = [f"layer {l.name}: {why}" for l in layers
                if (why := l.tolerance.failure(l.lsb, l.mismatches, l.compared))]
    if exact_model:
        failures += [f"output {n}: {s['mismatches']} mismatches vs onnxruntime QDQ"
                     for n, s in stats.items() if s["mismatches"]]
    result["verdict"] = {"passed": not failures, "exact_model": exact_model, "failures": failures,
                         "first_divergent_layer": next((l.name for l in layers if l.lsb > 0), None)}
    return result
