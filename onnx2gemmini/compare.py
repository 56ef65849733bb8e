"""`onnx2gemmini diff`: the Gemmini int8 result against onnxruntime, per output and per layer.

Three executions meet here: onnxruntime on the float model (accuracy of the quantization),
onnxruntime on the QDQ model of the same quantization (the bit-exact golden), and the emulator.
Layers are compared in isolation: each layer's QDQ sub-model is fed the emulator's own layer inputs, so
one inexact layer does not hide or smear the others.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
from onnx.utils import Extractor

from . import limits
from .ort_session import probe, run, session
from .compiler import Compiled, check_count
from .data import Dataset
from .errors import DataError, OutputError
from .emit.report import step_macs
from .golden import build_float, build_qdq, input_tensor_name, softmax_call
from .metrics import blocks, cosine, sqnr_db, top1_agreement
from . import fidelity, kernels, normalizer
from . import reference as reference_mod
from .weight_check import check_weights
from .numerics import (accumulator_lsb, quantize, quantize_accumulator, resadd_explained, resadd_mismatch_rate,
                       resadd_tolerance)
from .parallel import map_ordered
from .per_output import per_output
from .plan import CpuOp, GlobalAverage, Matmul, Resadd, Tensor
from .run.emulator import Emulator
from .segments import HANDOVER, Pieces, Taker, activation_bytes, fits
from .tolerance import EXACT, Tolerance


def step_tolerance(step, plan, bert_scale: float | None = None) -> Tolerance:
    """How far Gemmini's semantics may take this step from onnxruntime's QDQ semantics: the residual add
    saturates each scaled input to int8 before adding, the global average rounds sum/count half to even,
    a CPU kernel states its own (cpu/), a full_C matmul's int32 accumulators come back through onnxruntime's
    float32 output (exact below 2^22), the normalizer's softmax approximates exp (normalizer.softmax_lsb, at
    `bert_scale`: the golden's, from the quantization table, never the step's own, so that a wrong constant in
    the plan cannot widen its own tolerance); matmuls and convs are bit-exact."""
    if isinstance(step, Resadd):
        return Tolerance(resadd_tolerance(step.C_scale), resadd_mismatch_rate(step.A_scale, step.B_scale, step.C_scale),
                         "resadd rounds the smaller-scale input to int8 first")
    if isinstance(step, GlobalAverage):
        return Tolerance(1, min(1.0, 2.0 / (step.dim * step.dim)), "global average: ties and float division")
    if isinstance(step, Matmul) and step.full_C:
        weights = plan.constants[step.B].reshape(step.K, step.J)  # full_C: constant weights only (ops/common.py)
        bound = kernels.accumulator_bound(weights, plan.constants.get(step.D))
        lsb = accumulator_lsb(bound)
        return EXACT if lsb == 0 else Tolerance(lsb, 1.0, f"int32 accumulators up to {bound}: onnxruntime's "
                                                          "float32 output rounds them")
    if isinstance(step, Matmul) and step.act == normalizer.SOFTMAX:
        if bert_scale is None:
            raise ValueError(f"step {step.node}: a softmax read-out is judged at the golden's bert scale; none given")
        biased = step.D is not None
        return Tolerance(normalizer.softmax_lsb(bert_scale, biased),
                         normalizer.softmax_mismatch_rate(bert_scale, step.J, biased),
                         f"Gemmini's normalizer: I-BERT's integer exp, within {normalizer.exp_error(bert_scale):.2%} "
                         "of exp, against onnxruntime's float softmax")
    if isinstance(step, Matmul) and step.mean_of:
        return Tolerance(1, min(1.0, 2.0 / step.mean_of), "global average: int32 sum times a multiplier, against "
                         "onnxruntime's float mean")
    if isinstance(step, CpuOp):
        return step.golden_tolerance(plan.call_site(step))
    return EXACT


# A float32 tensor (a model output kept float, quantize.float_tensors) is compared in units of this share of
# the largest magnitude its step can write: its own "LSB", far below the int8 step.
FLOAT_UNIT = 2.0 ** -20


def float_units(plan) -> dict[str, float]:
    """Tensor id -> the comparison unit of every float32 tensor a CPU step writes (FLOAT_UNIT of the bound
    its kernel states, cpu FloatLut / Concat.float_bound)."""
    bounds: dict[str, float] = {}
    for step in plan.steps:
        if isinstance(step, CpuOp) and plan.tensors[step.outputs[0]].dtype == "float32":
            bound = step.params.float_bound([bounds.get(i) for i in step.inputs])
            if bound is not None:
                bounds[step.outputs[0]] = bound
    return {tid: max(b * FLOAT_UNIT, float(np.finfo(np.float32).tiny)) for tid, b in bounds.items()}


def float_distance(ours: np.ndarray, gold: np.ndarray, unit: float) -> np.ndarray:
    """|ours - gold| in units (rounded up: 0 only where bit-equal in value)."""
    return np.ceil(np.abs(ours.astype(np.float64) - np.asarray(gold, np.float64)) / unit).astype(np.int64)


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
    resadd: "Resadd | None" = None  # the layer's one step, a resadd: its mismatches are explained value by value
    sums: list = field(default_factory=list)  # over the samples: |ref|^2, |ref - ours|^2, ref.ours, |ours|^2
    lsb: int = 0
    mismatches: int = 0
    compared: int = 0
    explained: int = 0  # mismatches where the resadd's input rounding may move the value (numerics.resadd_explained)


def _layers(compiled: Compiled) -> list[_Layer]:
    plan, graph = compiled.plan, compiled.graph
    holders = _holders(plan)
    by_node: dict[str, list] = {}
    for step in plan.steps:
        by_node.setdefault(step.node, []).append(step)
    layers = []
    for node in graph.nodes:
        steps = by_node.get(node.name, [])
        if not steps:
            continue  # a view, or a concat written entirely in place: no step of its own to compare
        inputs = list(dict.fromkeys(i for i in node.inputs if i and i not in graph.initializers))  # once each
        if node.fused.input_mask:  # a Softmax masked by an integer model input reads it too
            inputs.append(node.fused.input_mask[0])
        call = softmax_call(graph, compiled.quant, node) if node.fused.softmax is not None else None
        tolerance = EXACT
        for s in steps:
            tolerance = tolerance.combine(step_tolerance(s, plan, None if call is None else call[0]))
        unfused = any(isinstance(s, CpuOp) and s.params.golden_unfused for s in steps)
        resadd = steps[0] if len(steps) == 1 and isinstance(steps[0], Resadd) and len(inputs) == 2 and all(
            plan.tensors[t].onnx_name in holders for t in (steps[0].A, steps[0].B)) else None
        if resadd is not None:  # every mismatch must be explained: none beyond those positions
            tolerance = Tolerance(tolerance.lsb, 0.0, "resadd: only where rounding its inputs to int8 moves the "
                                                      "sum across a rounding boundary")
        layers.append(_Layer(node.name, node.op_type, node.outputs[0], inputs, tolerance, unfused, resadd))
    return layers


def _holders(plan) -> dict[str, str]:
    """ONNX tensor name -> the plan tensor first holding its int8 value."""
    index: dict[str, str] = {}
    for tid, t in plan.tensors.items():
        if t.onnx_name and t.kind != "input":
            index.setdefault(t.onnx_name, tid)
    return index


# With the default number of workers, each local process gets at least this much work (multiply-accumulates
# over its samples, a few seconds of emulation): starting one (imports, onnxruntime sessions) costs seconds.
MACS_PER_WORKER = 20e9


# diff's default batch (samples emulated together): the emulator's gain levels off near 512 GEMM rows per call
# (run.emulator.BATCH_ROWS), and each sample of a batch holds its float values until the batch is compared.
DEFAULT_BATCH = 8


def batch_size_for(float_bytes: int, budget: int) -> int:
    """diff's default batch: DEFAULT_BATCH samples, fewer when their float values together (a whole-model
    float run per sample, held twice as a run returns) would pass the `activation_bytes` budget; 1 for a
    model checked in pieces."""
    return max(1, min(DEFAULT_BATCH, budget // max(1, HANDOVER * float_bytes)))


# The rewrite passes keep the float function (BN folding, equalization, channel sorting, fusions), so the float
# model of the rewritten graph must give the user's model's outputs up to float rounding. Below this SQNR at an
# output a rewrite changed what the model computes, and diff fails whatever the int8 code does: both goldens
# are built from the rewritten graph and could not see it.
REWRITE_MIN_SQNR_DB = 60.0
# A model that arrives quantized computes with its own int8 noise: compared and reported, not bounded.
QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                           "QLinearMatMul", "MatMulInteger", "ConvInteger", "QGemm", "DynamicQuantizeMatMul",
                           "MatMulIntegerToFloat"})


class _Original:
    """onnxruntime on the model exactly as the user gave it (before load, onnxsim and the rewrite passes)."""

    def __init__(self, serialized: bytes, output_names: list[str], arena: bool = True, frozen: dict | None = None):
        self.session, self.names = None, []
        self.frozen = dict(frozen or {})  # inputs the compile froze (--input-value): fed their values
        if not serialized:  # over protobuf's 2 GiB
            return
        model = onnx.ModelProto.FromString(serialized)
        declared = {o.name for o in model.graph.output}
        self.names = [n for n in output_names if n in declared]
        try:
            self.session = session(model, arena=arena)
        except Exception:  # noqa: BLE001 - then its outputs are simply not compared
            return
        self.inputs = [i.name for i in self.session.get_inputs()]

    def run(self, sample: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.session is None or not self.names or any(i not in sample and i not in self.frozen
                                                         for i in self.inputs):
            return {}
        feeds = {i: self.frozen[i] if i in self.frozen else sample[i] for i in self.inputs}
        return dict(zip(self.names, self.session.run(self.names, feeds)))


class _Checker:
    """What one process needs to compare samples: the onnxruntime sessions (the user's model, the float model
    of the rewritten graph, the QDQ golden, one QDQ sub-model per layer) and the emulator. `__call__` compares
    one sample."""

    def __init__(self, compiled: Compiled, budget: int, reference: bytes | None = None):
        plan, graph, quant = compiled.plan, compiled.graph, compiled.quant
        self.plan, self.graph, self.quant = plan, graph, quant
        self.layers = _layers(compiled)
        qdq = build_qdq(graph, quant, plan.model_name)
        self.output_names = [o.name for o in graph.outputs]
        self.fp32 = Pieces(build_float(graph), [l.tensor for l in self.layers] + self.output_names,
                           budget)
        # a model run in pieces is large: its sessions return memory after each run (one per layer would
        # otherwise keep every layer's peak, together the whole model's activations)
        arena = self.fp32.whole
        self.original = _Original(compiled.loaded.original, self.output_names, arena, compiled.loaded.input_values)
        # onnxruntime's own quantization of the user's model (reference.py), when asked: a figure beside ours
        self.reference = _Original(reference or b"", self.output_names, arena, compiled.loaded.input_values)
        self.golden = session(qdq, arena=arena)
        extractor = Extractor(onnx.shape_inference.infer_shapes(qdq))
        self.sub_sessions = []
        for layer in self.layers:
            feeds = [input_tensor_name(graph, t) for t in layer.inputs]
            sub = extractor.extract_model(feeds, [layer.tensor])
            level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if layer.unfused else \
                ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            self.sub_sessions.append((session(sub, level=level, arena=arena), feeds))
        self.emulator = Emulator(plan)
        self.holders = _holders(plan)
        self.units = float_units(plan)
        # Each layer is compared once its value is complete, while the values it reads are still held: the
        # emulator then drops what no later step or comparison needs (a large model holds what is live).
        reads = []
        for layer in self.layers:
            read = [layer.tensor] + [t for t in layer.inputs if not graph.is_index(t)]
            if layer.resadd is not None:
                read += [plan.tensors[t].onnx_name for t in (layer.resadd.A, layer.resadd.B)]
            reads.append([self.holders[name] for name in read])
        self.due, self.hold = self.emulator.checkpoints(reads)

    def stored_value(self, buffers, onnx_name: str) -> np.ndarray:
        """The emulator's value of an ONNX tensor in ONNX layout: int8 (int32 accumulators, or float32 for an
        output kept float), as the plan stores it."""
        t = self.plan.tensors[self.holders[onnx_name]]
        return to_onnx_layout(t, self.emulator.get(buffers, t.id))

    def resadd_inputs(self, buffers, layer: _Layer, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """A resadd layer's two stored int8 inputs, broadcast to its output's `shape` (views)."""
        names = (self.plan.tensors[t].onnx_name for t in (layer.resadd.A, layer.resadd.B))
        return tuple(np.broadcast_to(self.stored_value(buffers, n), shape) for n in names)

    def explained(self, layer: _Layer, qa: np.ndarray, qb: np.ndarray, diff: np.ndarray) -> int:
        """A resadd layer's mismatches at positions its input rounding explains (numerics.resadd_explained),
        in one block of its output (qa, qb: its inputs' values there)."""
        step, quant = layer.resadd, self.quant
        a_name, b_name = (self.plan.tensors[t].onnx_name for t in (step.A, step.B))
        may = resadd_explained(qa, qb, quant.scales[a_name], quant.scales[b_name], quant.scales[layer.tensor],
                               step.A_scale, step.B_scale, step.C_scale)
        return int(np.count_nonzero((diff != 0) & may))

    def __call__(self, samples: list[dict[str, np.ndarray]]) -> list[dict]:
        """A batch of samples, emulated together (Emulator.run_batch): for each, per output the fp32 and int8
        values and the mismatch counts against the QDQ golden; per layer the mismatch counts against its QDQ
        sub-model and the float64 sums its SQNR and cosine come from (signal, noise, dot product, int8
        power). Each sample's figures are those of a batch of one, byte for byte."""
        fp32 = [Taker(self.fp32, sample) for sample in samples]
        rows: list[list] = [[None] * len(self.layers) for _ in samples]
        refs: list[dict[str, np.ndarray]] = [{} for _ in samples]

        def visit(k: int, per_sample) -> None:
            for n in self.due.get(k, ()):
                layer = self.layers[n]
                for b, buffers in enumerate(per_sample):
                    ref = fp32[b].take(layer.tensor)
                    rows[b][n] = self.layer_row(buffers, layer, self.sub_sessions[n], samples[b], ref)
                    if layer.tensor in self.output_names:
                        refs[b][layer.tensor] = ref

        produced = self.emulator.run_batch(samples, visit=visit, hold=self.hold)
        return [{"outputs": self.output_rows(sample, out, ref, taker), "layers": row}
                for sample, out, ref, taker, row in zip(samples, produced, refs, fp32, rows)]

    def output_rows(self, sample, produced: dict[str, np.ndarray], refs: dict[str, np.ndarray],
                    fp32: Taker) -> dict:
        """One sample's outputs against the QDQ golden, the float model and the user's model."""
        gold = dict(zip(self.output_names, run(self.golden, self.output_names, sample)))
        original = self.original.run(sample)
        reference = self.reference.run(sample)
        outputs = {}
        for name, tid in zip(self.output_names, self.plan.outputs):
            t = self.plan.tensors[tid]
            q = produced[tid]
            if t.dtype == "float32":
                diff = float_distance(q, gold[name], self.units[tid])
            else:
                q = q.astype(np.int32)
                diff = np.abs(q - quantize(gold[name], t.scales()).astype(np.int32))
            outputs[name] = {"compared": q.size, "mismatches": int(np.count_nonzero(diff)),
                             "max_lsb": int(np.max(diff)) if q.size else 0,
                             "fp32": refs[name] if name in refs else fp32.take(name), "int8": t.dequantize(q),
                             "original": original.get(name), "reference": reference.get(name)}
        return outputs

    def layer_row(self, buffers, layer: _Layer, sub, sample: dict[str, np.ndarray], ref: np.ndarray) -> tuple:
        """One layer on one sample: (largest LSB difference, mismatches, compared, explained, the float64 sums)."""
        quant = self.quant
        sess, feeds = sub
        holder = self.plan.tensors[self.holders[layer.tensor]]
        ours = self.stored_value(buffers, layer.tensor)
        feed = {}
        for src, name in zip(layer.inputs, feeds):
            if self.graph.is_index(src):  # token ids: fed as they are
                feed[name] = sample[src]
                continue
            q = self.stored_value(buffers, src)
            feed[name] = q if q.dtype == np.float32 else q.astype(np.float32) * quant.value_scales(src, q.ndim)
        gold_layer = run(sess, [layer.tensor], feed)[0]
        shape = ours.shape
        ref = np.asarray(ref).reshape(shape)
        scale = None if holder.dtype == "float32" else np.broadcast_to(quant.value_scales(layer.tensor, len(shape)),
                                                                         shape)
        to_int = quantize_accumulator if holder.dtype == "int32" else quantize  # a full_C matmul's
        inputs = self.resadd_inputs(buffers, layer, shape) if layer.resadd is not None else None
        worst = mismatches = explained = 0
        sums = np.zeros(4)
        for ix in blocks(shape):  # a large layer's float64 temporaries one block at a time
            if scale is None:  # a float32 model output (or its activation)
                diff = float_distance(ours[ix], gold_layer[ix], self.units[holder.id])
                mine = ours[ix].astype(np.float64).ravel()
            else:
                got = ours[ix].astype(np.int32)
                diff = np.abs(got - to_int(gold_layer[ix], scale[ix]).astype(np.int32))
                mine = (got.astype(np.float32) * scale[ix]).astype(np.float64).ravel()
            if diff.size:
                worst = max(worst, int(diff.max()))
            mismatches += int(np.count_nonzero(diff))
            if inputs is not None:
                explained += self.explained(layer, inputs[0][ix], inputs[1][ix], diff)
            r = np.asarray(ref[ix], np.float64).ravel()
            sums += (np.dot(r, r), np.dot(r - mine, r - mine), np.dot(r, mine), np.dot(mine, mine))
        return (worst, mismatches, int(np.prod(shape, dtype=np.int64)), explained, *map(float, sums))


def _checker(payload: tuple) -> _Checker:
    """parallel.map_ordered's setup: one checker per worker."""
    return _Checker(*payload)


def _payload(compiled: Compiled, reference: bytes | None = None) -> tuple:
    """What the workers need: the compiled model without the loaded model (its weights are the graph's; no
    need to ship twice), the activation budget in force here (a worker process does not inherit it) and the
    independent reference model (reference.py), serialized."""
    return (dataclasses.replace(compiled, loaded=dataclasses.replace(compiled.loaded, model=onnx.ModelProto())),
            limits.current().activation_bytes, reference)


def run_diff(compiled: Compiled, data: Dataset, workers: int | None = 1, ray: str | None = None,
             progress=None, checks: "OutputChecks | None" = None, save_to=None,
             batch_size: int | None = None, floors: "fidelity.Floors | None" = None,
             reference: bool = False, original_stream: "list[dict] | None" = None) -> dict:
    """Compare over every sample of `data`; returns the CONTRACTS.md `diff --json` document.

    `workers` local processes (None: every core, but none for less than MACS_PER_WORKER of work each, and
    one for a model whose activations exceed the `activation_bytes` limit: it is checked in pieces) or,
    with `ray` (an address or "auto"), Ray actors compare
    the samples; their results are folded in sample order, so the document is the same, bit for bit, for
    any number of workers. `batch_size` samples are emulated together (None: batch_size_for); each sample's
    figures are the same for any batch size, only the memory held at once grows with it. `progress(n, total)`
    is called as n more of the `total` samples are done.
    `checks`: elementwise atol/rtol checks of the outputs against fp32 or saved outputs (OutputChecks);
    `save_to`: a path (checked with check_save_path) for the int8 outputs, for a later `checks.saved`.
    `floors`: the user's fidelity floors (fidelity.Floors; default: each output kind's); every int8 weight is
    checked against its float weight (weight_check.py); `reference`: also run onnxruntime's own quantization of
    the original model (reference.py) and report its figures beside ours. `original_stream`: for a streaming
    model, the original's outputs at each step of its own fp32 stream (stream.py), which replace its outputs
    on the int8 stream's inputs wherever the int8 output is compared with the original."""
    layers = _layers(compiled)
    output_names = [o.name for o in compiled.graph.outputs]
    fp32_out = {n: [] for n in output_names}
    int8_out = {n: [] for n in output_names}
    original_out = {n: [] for n in output_names}
    reference_out = {n: [] for n in output_names}
    stats = {n: {"compared": 0, "mismatches": 0, "max_lsb": 0} for n in output_names}
    sums = [[0.0, 0.0, 0.0, 0.0] for _ in layers]
    samples = [data.sample(i) for i in range(data.num_samples)]
    report = None if progress is None else (lambda n: progress(n, len(samples)))
    macs = sum(step_macs(step, compiled.plan) for step in compiled.plan.steps)
    per_worker = max(1, math.ceil(MACS_PER_WORKER / max(macs, 1)))
    float_bytes = activation_bytes(build_float(compiled.graph))
    proto = onnx.ModelProto.FromString(compiled.loaded.original) if compiled.loaded.original else None
    quantized = proto is not None and any(n.op_type in QUANTIZED_OPS for n in proto.graph.node)
    ref_model, ref_info = None, {"who": reference_mod.WHO, "why": "not asked for (--reference)"}
    if reference and not fits(float_bytes, limits.current().activation_bytes):
        ref_info["why"] = "a model checked in pieces (over the activation_bytes limit) has no reference"
    elif reference and quantized:
        ref_info["why"] = "the original model is quantized already"
    elif reference:
        ref_model, ref_info = reference_mod.build(compiled, proto)
    payload = _payload(compiled, ref_model)
    if workers is None and ray is None and len(samples) > per_worker and not fits(float_bytes, payload[1]):
        workers = 1  # a model checked in pieces fills the activation limit in each process: one at a time
    check_count("--batch-size", batch_size)
    batch = batch_size_for(float_bytes, payload[1]) if batch_size is None else batch_size
    batches = [samples[i:i + batch] for i in range(0, len(samples), batch)]
    results = (row for rows in map_ordered(_checker, payload, batches, workers, ray, progress=report,
                                           per_worker=math.ceil(per_worker / batch), size=len)
               for row in rows)
    for result in results:
        for name, o in result["outputs"].items():
            st = stats[name]
            st["compared"] += o["compared"]
            st["mismatches"] += o["mismatches"]
            st["max_lsb"] = max(st["max_lsb"], o["max_lsb"])
            fp32_out[name].append(o["fp32"])
            int8_out[name].append(o["int8"])
            original_out[name].append(o["original"])
            reference_out[name].append(o["reference"])
        for layer, total, (lsb, mismatches, compared, explained, *parts) in zip(layers, sums, result["layers"]):
            layer.lsb = max(layer.lsb, lsb)
            layer.mismatches += mismatches
            layer.compared += compared
            layer.explained += explained
            for k, part in enumerate(parts):
                total[k] += part
    for layer, total in zip(layers, sums):
        layer.sums = total
    result = _summarize(compiled, data, layers, fp32_out, int8_out, stats)
    # a stream's int8 outputs are judged against the original's own fp32 stream (the drift accumulated), its
    # rewritten graph against the original on the same inputs
    judged_against = original_out if original_stream is None else \
        {n: [step.get(n) for step in original_stream] for n in output_names}
    _against_original(result, compiled, quantized, fp32_out, int8_out, original_out, judged_against)
    _check_outputs(result, int8_out, fp32_out, checks or OutputChecks())
    judge_fidelity(result, compiled, proto, fp32_out, int8_out, judged_against, reference_out, ref_info,
                   floors or fidelity.Floors())
    if save_to is not None:
        save_outputs(save_to, {n: stacked(v) for n, v in int8_out.items()})
    return result


def _summarize(compiled, data, layers, fp32_out, int8_out, stats) -> dict:
    outputs = {}
    for name in fp32_out:
        ref, ours = stacked(fp32_out[name]), stacked(int8_out[name])
        outputs[name] = {
            "fp32_vs_int8": {"max_abs": float(np.max(np.abs(ref - ours))), "cosine": cosine(ref, ours),
                             "sqnr_db": sqnr_db(ref, ours), "top1_agreement": top1_agreement(ref, ours),
                             **required_tolerance(ref, ours)},
            "int8_vs_ort_qdq": stats[name],
        }
        segments = output_segments(compiled, name, fp32_out[name], int8_out[name])
        if segments:
            outputs[name]["segments"] = segments
    layer_rows = []
    for layer in layers:
        signal, noise, dot, power = layer.sums
        layer_rows.append({"name": layer.name, "op": layer.op, "sqnr_db": _sqnr(signal, noise),
                           "cosine": _cosine(signal, dot, power), "max_lsb_vs_ort_qdq": layer.lsb,
                           "mismatches_vs_ort_qdq": layer.mismatches, "compared": layer.compared,
                           "explained_mismatches": layer.explained,
                           "tolerance_lsb": layer.tolerance.lsb,
                           "mismatch_rate": layer.mismatches / layer.compared if layer.compared else 0.0,
                           "allowed_mismatches": layer.explained + layer.tolerance.allowed(layer.compared),
                           "tolerance_why": layer.tolerance.why})
    result = {"samples": data.num_samples, "outputs": outputs, "layers": layer_rows}
    if data.labels is not None and len(fp32_out) >= 1:
        first = next(iter(fp32_out))
        ref, ours = np.concatenate(fp32_out[first]), np.concatenate(int8_out[first])
        labels = data.labels
        result["accuracy"] = {"fp32": float(np.mean(ref.reshape(len(labels), -1).argmax(-1) == labels)),
                              "int8": float(np.mean(ours.reshape(len(labels), -1).argmax(-1) == labels))}
    golden = probe()
    unverified = [l.name for l in layers if l.op in golden.inexact_ops]
    result["golden"] = {"exact": golden.exact, "cpu": golden.cpu, "unverified_layers": unverified,
                        "inexact_ops": list(golden.inexact_ops)}
    exact_model = all(l.tolerance == EXACT for l in layers)
    failures = [f"layer {l.name}: {why}" for l in layers
                if l.name not in unverified and (why := l.tolerance.failure(l.lsb, l.mismatches - l.explained,
                                                                            l.compared))]
    if exact_model and not unverified:  # an unverified layer's golden value reaches the outputs too
        failures += [f"output {n}: {s['mismatches']} mismatches vs onnxruntime QDQ"
                     for n, s in stats.items() if s["mismatches"]]
    result["verdict"] = {"passed": not failures, "exact_model": exact_model, "failures": failures,
                         "first_divergent_layer": next((l.name for l in layers
                                                         if l.lsb > 0 and l.name not in unverified), None)}
    return result


def _original_values(compiled: Compiled, name: str, fp32: list, original: list) -> tuple[list | None, str | None]:
    """An output's values from the user's original model, or None and why they cannot be compared."""
    if not compiled.loaded.original:
        return None, "the original model is over protobuf's 2 GiB"
    if not original or any(v is None for v in original):
        return None, "onnxruntime could not run the original model (or it has no output of this name)"
    if stacked(original).shape != stacked(fp32).shape:
        return None, (f"the original's output has shape {list(stacked(original).shape)}, the compiled model's "
                      f"{list(stacked(fp32).shape)}")
    return original, None


def _against_original(result: dict, compiled: Compiled, quantized: bool, fp32_out: dict, int8_out: dict,
                      original_out: dict, judged_against: dict) -> None:
    """Per output, int8 (against `judged_against`: the original on the same inputs, or on its own stream)
    and the rewritten graph's fp32 (against the original on the same inputs) against the user's original
    model; a rewritten fp32 below REWRITE_MIN_SQNR_DB fails the verdict (unless the original is `quantized`
    itself). An output that cannot be compared says why (`original_not_compared`)."""
    for name in int8_out:
        values, why_not = _original_values(compiled, name, fp32_out[name], original_out[name])
        judged, judged_why_not = _original_values(compiled, name, fp32_out[name], judged_against[name])
        if why_not is not None or judged_why_not is not None:
            result["outputs"][name]["original_not_compared"] = why_not or judged_why_not
            continue
        ref = stacked(judged).astype(np.float64)
        same_inputs = stacked(values).astype(np.float64)
        fp32, ours = stacked(fp32_out[name]), stacked(int8_out[name])
        rewrite_sqnr = sqnr_db(same_inputs, fp32)
        result["outputs"][name]["int8_vs_original"] = {
            "max_abs": float(np.max(np.abs(ref - ours))), "cosine": cosine(ref, ours), "sqnr_db": sqnr_db(ref, ours)}
        result["outputs"][name]["fp32_vs_original"] = {
            "max_abs": float(np.max(np.abs(same_inputs - fp32))), "sqnr_db": rewrite_sqnr,
            "min_sqnr_db": None if quantized else REWRITE_MIN_SQNR_DB}
        if not quantized and rewrite_sqnr is not None and rewrite_sqnr < REWRITE_MIN_SQNR_DB:
            verdict = result["verdict"]
            verdict["failures"].append(f"output {name}: the rewritten graph's fp32 is {rewrite_sqnr:.2f} dB SQNR "
                                       f"from the original model (< {REWRITE_MIN_SQNR_DB:g} dB): a rewrite changed "
                                       "what the model computes")
            verdict["passed"] = False


def judge_fidelity(result: dict, compiled: Compiled, proto: "onnx.ModelProto | None", fp32_out: dict,
                   int8_out: dict, original_out: dict, reference_out: dict, ref_info: dict,
                   floors: "fidelity.Floors") -> None:
    """The accuracy half of the verdict (fidelity.py): per output, int8 against the user's original model with
    the floors of its kind, every int8 weight against its float weight (weight_check.py), and, when asked,
    onnxruntime's own quantization of the original beside ours (reference.py). Where the original's outputs
    cannot be compared (_original_values), the rewritten graph's fp32 (held within REWRITE_MIN_SQNR_DB of the
    original where it can be) stands in, and the document says why."""
    document, failures = {}, []
    for name in int8_out:
        values, why_not = _original_values(compiled, name, fp32_out[name], original_out[name])
        ref = fp32_out[name] if why_not else values
        shape = tuple(np.shape(ref[0])) if ref else ()
        joined = name in compiled.quant.axis_scales
        kind, kind_why = ("state", fidelity.STATE_WHY) if name in dict(compiled.states) else \
            fidelity.output_kind(proto, compiled.graph, name, shape, joined)
        parts = [{k: seg[k] for k in ("input", "axis", "start", "stop", "sqnr_db")}
                 for seg in output_segments(compiled, name, ref, int8_out[name])] if joined else None
        entry = fidelity.judge_output(name, kind, kind_why, floors.for_output(name, kind), ref, int8_out[name],
                                      parts)
        entry["against"] = "the original model" if why_not is None else \
            f"the rewritten graph's fp32 (the original's outputs could not be compared: {why_not})"
        entry["reference"] = _reference_entry(ref, int8_out[name], reference_out[name], ref_info, why_not)
        failures += entry["failures"]
        document[name] = entry
    result["fidelity"] = document
    weights = check_weights(compiled)
    result["weights"] = weights
    failures += weights["failures"]
    verdict = result["verdict"]
    verdict["accurate"] = not failures
    verdict["accuracy_failures"] = failures
    if failures:
        losers = fidelity.losing_layers(result["layers"], compiled.graph)
        verdict["losing_layers"] = losers
        verdict["remedies"] = fidelity.remedies(losers, compiled)
        verdict["passed"] = False


def _reference_entry(ref: list, ours: list, theirs: list, info: dict, why_not: str | None) -> dict:
    """onnxruntime's quantization of the original (reference.py) and ours, both against the original: a figure
    to read beside ours, not a bound (where onnxruntime keeps an op float or computes it otherwise it leads by
    up to 11 dB on the test suite's one-op models; the weight check is the bound that catches shared bugs)."""
    entry = {"who": info["who"]}
    if "why" in info or why_not is not None:
        return {**entry, "made": False, "why": info.get("why") or "no original outputs to judge it against"}
    if not theirs or any(v is None for v in theirs):
        return {**entry, "made": False, "why": "onnxruntime could not run its quantized model"}
    r = stacked(ref)
    theirs_db, ours_db = sqnr_db(r, stacked(theirs)), sqnr_db(r, stacked(ours))
    return {**entry, "made": True, "overridden_scales": info["overridden"], "sqnr_db": theirs_db,
            "ours_sqnr_db": ours_db}


def output_segments(compiled: Compiled, name: str, fp32: list[np.ndarray], int8: list[np.ndarray]) -> list[dict]:
    """For a model output made by a Concat: each input's part of it, with the scale its values have and its
    error against fp32 (one int8 scale for parts of very different ranges rounds the small ones away)."""
    node = next((n for n in compiled.graph.nodes if name in n.outputs), None)
    if node is None or node.op_type != "Concat":
        return []
    shapes, quant = compiled.graph.shapes, compiled.quant
    axis = node.attrs["axis"] % len(shapes[name])
    per_index = quant.axis_scales[name][1] if name in quant.axis_scales else None
    rows, start = [], 0
    for part in (i for i in node.inputs if i):
        stop = start + shapes[part][axis]
        index = np.arange(start, stop)
        ref = np.concatenate([np.take(v, index, axis).ravel() for v in fp32])
        ours = np.concatenate([np.take(v, index, axis).ravel() for v in int8])
        rows.append({"input": part, "axis": axis, "start": start, "stop": stop,
                     "scale": float(per_index[start] if per_index else quant.scales[name]),
                     "sqnr_db": sqnr_db(ref, ours), "max_abs": float(np.max(np.abs(ref - ours))) if ref.size else 0.0})
        start = stop
    return rows


def _sqnr(signal: float, noise: float) -> float | None:
    """metrics.sqnr_db from sums over the samples: None when exact, -noise power for an all-zero reference."""
    if noise == 0.0:
        return None
    if signal == 0.0:
        return float(-10.0 * math.log10(noise))
    return 10.0 * math.log10(signal / noise)


def _cosine(signal: float, dot: float, power: float) -> float:
    """metrics.cosine from sums over the samples (|ref|^2, ref.ours, |ours|^2)."""
    if signal == 0.0 and power == 0.0:
        return 1.0
    if signal == 0.0 or power == 0.0:
        return 0.0
    return float(dot / (math.sqrt(signal) * math.sqrt(power)))


# ---- Polygraphy-style output checks: atol/rtol, the smallest tolerance that passes, saved outputs --------

@dataclass
class OutputChecks:
    """What `diff --atol/--rtol/--load-outputs` ask: each output's int8 values against a reference (the
    saved outputs when given, else fp32) elementwise, |ref - int8| <= atol + rtol * |ref| (Polygraphy's
    rule). atol/rtol: {output name: value}; with saved outputs and no tolerance, the check is exact."""

    atol: dict[str, float] = field(default_factory=dict)
    rtol: dict[str, float] = field(default_factory=dict)
    saved: dict[str, np.ndarray] | None = None
    saved_source: str = ""


def required_tolerance(ref: np.ndarray, ours: np.ndarray) -> dict:
    """The smallest atol (with rtol 0) and the smallest rtol (with atol 0) under which every value passes."""
    ref64, err = np.asarray(ref, np.float64), np.abs(np.asarray(ref, np.float64) - np.asarray(ours, np.float64))
    atol = float(err.max()) if err.size else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / np.abs(ref64))
    rtol = float(ratio.max()) if ratio.size else 0.0
    return {"required_atol": atol, "required_rtol": rtol if math.isfinite(rtol) else None}


def parse_tolerances(spec, names: list[str], option: str) -> dict[str, float]:
    """A tolerance per output (per_output's forms): {output: value}, every output filled in."""
    values: dict[str, float] = {}
    for name, value in per_output(spec, names, option, _tolerance):
        values.update({n: value for n in ([name] if name is not None else names)})
    return values


def _tolerance(text) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError("a finite number >= 0")
    return value


def load_outputs(path, names: list[str]) -> dict[str, np.ndarray]:
    """Outputs saved by `diff --save-outputs`: {output name: values over the samples}, checked against the
    model's outputs (a file of another model is a DataError naming what differs)."""
    import zipfile
    from pathlib import Path
    if Path(path).is_file() and not zipfile.is_zipfile(path):
        raise DataError(f"--load-outputs {path}: not an .npz file of saved outputs (--save-outputs writes one)")
    try:
        with np.load(Path(path), allow_pickle=False) as archive:
            saved = {k: np.asarray(archive[k]) for k in archive.files}
    except FileNotFoundError:
        raise DataError(f"--load-outputs {path}: no such file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"--load-outputs {path}: not an .npz file of saved outputs ({str(exc)[:120]})") from None
    missing = [n for n in names if n not in saved]
    if missing:
        raise DataError(f"--load-outputs {path}: no saved values for output '{missing[0]}' "
                        f"(the file has: {', '.join(sorted(saved))[:200]})")
    return {n: saved[n] for n in names}


def check_save_path(path, inputs=()) -> None:
    """Before a long run: `--save-outputs` names a file in an existing, writable directory, and none of the
    files the run reads (model, data, config, saved outputs; outdir.protected_paths), which it would destroy."""
    import os
    from pathlib import Path

    from .outdir import protected_paths
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"--save-outputs {path}: is a directory (give a file name, e.g. outputs.npz)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"--save-outputs {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"--save-outputs {path}: cannot write in {parent} (permission denied)")
    target = path.resolve()
    if any(p.exists() and p.resolve() == target for p in protected_paths(inputs)):
        raise OutputError(f"--save-outputs {path}: is an input of this run; it would be overwritten")


def save_outputs(path, int8_out: dict[str, np.ndarray]) -> None:
    """The int8 outputs (dequantized, samples on axis 0) as an .npz for `--load-outputs`, written whole or
    not at all."""
    import contextlib
    import os
    import tempfile
    import zipfile
    from pathlib import Path
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".o2g-outputs-", suffix=".npz", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as archive:
            for name, values in int8_out.items():  # as np.savez does, but any output name is a key
                with archive.open(name + ".npy", "w", force_zip64=True) as entry:
                    np.lib.format.write_array(entry, np.asanyarray(values), allow_pickle=False)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise OutputError(f"--save-outputs {path}: cannot write ({exc.strerror or exc})") from None


def stacked(values: list[np.ndarray]) -> np.ndarray:
    """Per-sample values one after the other on axis 0 (a scalar output is one value per sample)."""
    return np.concatenate([np.atleast_1d(v) for v in values])


def _check_outputs(result: dict, int8_out: dict, fp32_out: dict, checks: OutputChecks) -> None:
    """Adds each output's check against the saved outputs and/or the atol/rtol rule; failures to the verdict."""
    failures = result["verdict"]["failures"]
    for name, per_sample in int8_out.items():
        ours = stacked(per_sample)
        entry = result["outputs"][name]
        if checks.saved is not None:
            ref = checks.saved[name].astype(np.float32, copy=False)
            if ref.shape != ours.shape:
                raise DataError(f"--load-outputs {checks.saved_source}: output '{name}' was saved with shape "
                                f"{list(ref.shape)}, this run has {list(ours.shape)} (same data and samples?)")
            differ = int(np.count_nonzero(ref != ours))
            entry["int8_vs_saved"] = {"compared": int(ours.size), "mismatches": differ,
                                      "max_abs": float(np.max(np.abs(ref - ours))) if ours.size else 0.0,
                                      **required_tolerance(ref, ours)}
            reference = "saved"
        elif name in checks.atol or name in checks.rtol:
            ref, reference = stacked(fp32_out[name]), "fp32"
        else:
            continue
        atol, rtol = checks.atol.get(name, 0.0), checks.rtol.get(name, 0.0)
        err = np.abs(ref.astype(np.float64) - ours.astype(np.float64))
        outside = int(np.count_nonzero(err > atol + rtol * np.abs(ref.astype(np.float64))))
        entry["tolerance_check"] = {"reference": reference, "atol": atol, "rtol": rtol, "compared": int(ours.size),
                                    "outside": outside, "passed": outside == 0}
        if outside:
            failures.append(f"output {name}: {outside} of {ours.size} values outside atol {atol:g} + rtol {rtol:g} "
                            f"of the {reference} outputs")
    result["verdict"]["passed"] = not failures
