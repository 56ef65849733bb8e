"""Per-layer quality figures for the reports: from a `diff` result when there is one, else measured on a
few calibration samples.

Why: the report should show where the quantization error comes from without asking for a separate
`diff` run. Without one, each layer's int8 output (the bit-exact emulator, errors of earlier layers
included) is compared with onnxruntime's float output over the first calibration samples: the same
SQNR as `diff`'s per-layer column, on other data. Mismatch counts against onnxruntime's QDQ golden need
the golden, so only a `diff` result carries them.
"""
from __future__ import annotations

import math

import numpy as np

from .data import Dataset
from .golden import build_float
from .metrics import blocks
from .run.emulator import Emulator
from .segments import Pieces, Taker

STATS_SAMPLES = 4  # calibration samples the report's SQNR is measured on (compile time stays small)
STATS_MACS = 2_000_000_000  # ... and at most this many MACs emulated (at least one sample: ResNet-50 gets 1)


def from_diff(result: dict) -> dict:
    """The report's `quality` entry from a `diff` result (CONTRACTS.md `diff --json`)."""
    layers = []
    for row in result.get("layers", []):
        compared = row.get("compared", 0)
        mismatches = row.get("mismatches_vs_ort_qdq")
        layers.append({"name": row["name"], "op": row.get("op", ""), "sqnr_db": row.get("sqnr_db"),
                       "mismatches": mismatches, "compared": compared,
                       "mismatch_rate": (mismatches / compared) if compared and mismatches is not None else None,
                       "max_lsb": row.get("max_lsb_vs_ort_qdq"), "tolerance_lsb": row.get("tolerance_lsb"),
                       "allowed_mismatches": row.get("allowed_mismatches")})
    return {"source": "diff", "samples": result.get("samples", 0), "data": "diff evaluation data",
            "layers": layers}


def from_calibration(compiled, data: Dataset | None, samples: int = STATS_SAMPLES) -> dict:
    """The report's `quality` entry measured on the first `samples` samples of `data` (None: no data kept,
    e.g. a pre-quantized model compiled without calibration)."""
    if data is None or data.num_samples == 0:
        return {"source": None, "samples": 0, "data": "", "layers": []}
    plan, graph = compiled.plan, compiled.graph
    macs = sum(step.macs for step in plan.steps if hasattr(step, "macs"))
    data = data.head(max(1, min(samples, STATS_MACS // max(macs, 1))))
    stepped = {step.node for step in plan.steps}
    layers = [(n.name, n.op_type, n.outputs[0]) for n in graph.nodes if n.name in stepped and n.outputs]
    holders = _holders(plan)
    layers = [layer for layer in layers if layer[2] in holders]
    if not layers:
        return {"source": "calibration", "samples": data.num_samples, "data": data.source, "layers": []}
    names = [t for _, _, t in layers]
    fp32 = Pieces(build_float(graph), names, compiled.limits.activation_bytes)
    emulator = Emulator(plan)
    # each layer is measured once its value is complete; the emulator drops what nothing needs any more
    due, hold = emulator.checkpoints([[holders[name]] for name in names])
    signal = dict.fromkeys(names, 0.0)
    noise = dict.fromkeys(names, 0.0)
    for i in range(data.num_samples):
        sample = data.sample(i)
        taker = Taker(fp32, sample)

        def visit(k: int, buffers) -> None:
            for name in (names[n] for n in due.get(k, ())):
                t = plan.tensors[holders[name]]
                ours = emulator.get(buffers, t.id)
                ref = np.asarray(taker.take(name))
                ref = ref.transpose(0, 2, 3, 1) if t.layout == "NHWC" else ref.reshape(ours.shape)
                scales = np.broadcast_to(np.asarray(t.scales(), np.float64), ours.shape)
                for ix in blocks(ours.shape):  # a large layer's float64 temporaries one block at a time
                    mine = (ours[ix].astype(np.float64) * scales[ix]).ravel()
                    r = np.asarray(ref[ix], np.float64).ravel()
                    signal[name] += float(np.dot(r, r))
                    noise[name] += float(np.dot(r - mine, r - mine))

        emulator.run(sample, visit=visit, hold=hold)
    rows = [{"name": name, "op": op, "sqnr_db": _sqnr(signal[t], noise[t]), "mismatches": None,
             "compared": None, "mismatch_rate": None, "max_lsb": None, "tolerance_lsb": None,
             "allowed_mismatches": None}
            for name, op, t in layers]
    return {"source": "calibration", "samples": data.num_samples, "data": data.source, "layers": rows}


def _holders(plan) -> dict[str, str]:
    """ONNX tensor name -> the plan tensor first holding its int8 value (not the float model input)."""
    index: dict[str, str] = {}
    for tid, t in plan.tensors.items():
        if t.onnx_name and t.kind != "input" and t.dtype == "int8" and t.scale:
            index.setdefault(t.onnx_name, tid)
    return index


def _sqnr(signal: float, noise: float) -> float | None:
    """metrics.sqnr_db from accumulated sums: None when exact, -noise power for an all-zero reference."""
    if noise == 0.0:
        return None
    if signal == 0.0:
        return -10.0 * math.log10(noise)
    return 10.0 * math.log10(signal / noise)
