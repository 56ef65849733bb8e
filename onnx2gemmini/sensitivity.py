"""`diff --sensitivity`: which layers cost the output its accuracy, one layer quantized at a time.

Why one at a time: `diff`'s per-layer SQNR includes the error of every earlier layer, so it shows where the
error is, not where it comes from. Here each layer (a graph node with a plan step, as `diff` compares them)
is quantized alone, exactly as the QDQ golden quantizes it (golden.build_qdq with `only`: its int8 input
activations, int8 weights, int32 bias and int8 output), every other node stays float, and onnxruntime runs
that model over the data. The output error it leaves is the error the layer adds by itself.

Figures, per layer:
  sqnr_db       output SQNR against the float model with only this layer quantized, over every sample;
                with several outputs the worst (lowest) one. None: the outputs are exact.
  noise_share   that layer's output noise power over the noise power of the whole int8 model (the QDQ
                golden, every layer quantized), on the same data; the largest over the outputs. About 1:
                this layer alone explains the int8 model's error. Noise adds up roughly, so a model's shares
                sum to about 1, somewhat more because a tensor's rounding is charged both to the layer that
                writes it (its output) and to the layers that read it (their inputs).
  sqnr_db_cost  10*log10(1 + noise_share) dB, >= 0, growing with the layer's noise: the drop in output SQNR
                that this layer's noise causes on top of the int8 model's own noise. 3.01 dB: the layer
                alone is as noisy as the whole int8 model; a small cost c is about 4.34 * noise_share.
                Relative to the whole int8 model's noise, not to an absolute level.
The list is sorted by sqnr_db_cost, largest first (ties keep the graph order).
A layer reading a model input is charged with that input's quantization too (it reads the int8 value).
An output the whole int8 model reproduces exactly has no noise to share and is left out of the cost.
"""
from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort

from .ort_session import session
from .compare import _layers
from .compiler import Compiled
from .data import Dataset
from .golden import build_float, build_qdq
from .metrics import sqnr_db


def sensitivity(compiled: Compiled, dataset: Dataset, progress=None) -> list[dict]:
    """Per layer {name, op, sqnr_db, noise_share, sqnr_db_cost}, most costly first (see the module doc).

    One onnxruntime session per layer, each run over every sample of `dataset`; `progress(n, total)` is
    called as n more of the `total` layers are done."""
    graph, quant = compiled.graph, compiled.quant
    outputs = [o.name for o in graph.outputs]
    samples = [dataset.sample(i) for i in range(dataset.num_samples)]
    reference = _outputs(session(build_float(graph)), outputs, samples)
    whole = _noise(reference, _outputs(session(build_qdq(graph, quant)), outputs, samples))
    layers = _layers(compiled)
    rows = []
    for layer in layers:
        level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if layer.unfused else \
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # as diff checks the layer (cpu.CpuKernel.golden_unfused)
        model = build_qdq(graph, quant, only={layer.name})
        values = _outputs(session(model, level=level), outputs, samples)
        noise = _noise(reference, values)
        share = max((noise[n] / whole[n] for n in outputs if whole[n] > 0.0), default=0.0)
        sqnrs = [v for n in outputs if (v := sqnr_db(reference[n], values[n])) is not None]
        rows.append({"name": layer.name, "op": layer.op, "sqnr_db": min(sqnrs, default=None),
                     "noise_share": share, "sqnr_db_cost": 10.0 * math.log10(1.0 + share)})
        if progress is not None:
            progress(1, len(layers))
    return sorted(rows, key=lambda r: -r["sqnr_db_cost"])


def _outputs(sess, names: list[str], samples: list[dict]) -> dict[str, np.ndarray]:
    """Every output over every sample, flattened to one float64 vector per output."""
    values = {n: [] for n in names}
    for sample in samples:
        for name, value in zip(names, sess.run(names, sample)):
            values[name].append(np.asarray(value, np.float64).ravel())
    return {n: np.concatenate(v) if v else np.zeros(0) for n, v in values.items()}


def _noise(reference: dict[str, np.ndarray], values: dict[str, np.ndarray]) -> dict[str, float]:
    """Noise power |ref - x|^2 per output (the numerator of metrics.sqnr_db's ratio)."""
    return {n: float(np.dot(reference[n] - values[n], reference[n] - values[n])) for n in reference}

