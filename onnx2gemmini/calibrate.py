"""Run the float model in onnxruntime over calibration data and estimate a range for every tensor.

Estimators: minmax (largest |x|), percentile (99.99th percentile of |x|), mse (the clipping threshold that
minimises the expected int8 quantisation error). Histograms are collected in a second pass over the data.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from .data import Dataset
from .errors import ModelError, UsageError

METHODS = ("minmax", "percentile", "mse")
BINS = 2048
PERCENTILE = 99.99


def float_tensors(model: onnx.ModelProto) -> list[str]:
    """Every float tensor the graph computes or receives, in graph order."""
    if not model.graph.value_info:
        model = onnx.shape_inference.infer_shapes(model)
    g = model.graph
    typed = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    names = [vi.name for vi in g.input if vi.name not in {t.name for t in g.initializer}]
    for node in g.node:
        names.extend(o for o in node.output if o)
    return [n for n in dict.fromkeys(names) if typed.get(n) == onnx.TensorProto.FLOAT]


def session(model: onnx.ModelProto, outputs: list[str] | None = None,
            level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL) -> ort.InferenceSession:
    """An onnxruntime CPU session; `outputs` adds intermediate tensors as graph outputs."""
    if outputs:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        present = {o.name for o in model.graph.output}
        typed = {vi.name: vi for vi in model.graph.value_info}
        for name in outputs:
            if name not in present:
                model.graph.output.append(typed.get(name) or onnx.helper.make_empty_tensor_value_info(name))
                present.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelError(f"onnxruntime cannot run the model: {str(exc).splitlines()[0][:300]}") from None


def run_float(model: onnx.ModelProto, data: Dataset, tensors: list[str]):
    """Yield {tensor: float array} per sample."""
    sess = session(model, tensors)
    for i in range(data.num_samples):
        values = sess.run(tensors, data.sample(i))
        yield dict(zip(tensors, values))


def calibrate(model: onnx.ModelProto, data: Dataset, method: str = "minmax") -> dict[str, float]:
    """{tensor: amax} — the symmetric range to map onto int8 for every float tensor."""
    if method not in METHODS:
        raise UsageError(f"--calib-method: unknown method '{method}' (choose from {', '.join(METHODS)})")
    tensors = float_tensors(model)
    amax = {t: 0.0 for t in tensors}
    for values in run_float(model, data, tensors):
        for t, v in values.items():
            if v.size:
                amax[t] = max(amax[t], float(np.max(np.abs(v))))
    if method == "minmax":
        return amax
    hist = {t: np.zeros(BINS, np.int64) for t in tensors}
    for values in run_float(model, data, tensors):
        for t, v in values.items():
            if amax[t] > 0:
                hist[t] += np.histogram(np.abs(v), bins=BINS, range=(0.0, amax[t]))[0]
    pick = _percentile if method == "percentile" else _mse
    return {t: (pick(hist[t], amax[t]) if amax[t] > 0 else 0.0) for t in tensors}


def _percentile(hist: np.ndarray, amax: float) -> float:
    cdf = np.cumsum(hist) / max(hist.sum(), 1)
    idx = int(np.searchsorted(cdf, PERCENTILE / 100.0))
    return amax * min(idx + 1, BINS) / BINS


def _mse(hist: np.ndarray, amax: float) -> float:
    """Threshold among 128 candidates minimising clipping + rounding error of the histogram."""
    centers = (np.arange(BINS) + 0.5) * amax / BINS
    best, best_err = amax, np.inf
    for k in range(1, 129):
        t = amax * k / 128
        step = t / 127
        inside = centers <= t
        err = np.sum(hist[inside]) * step * step / 12 + np.sum(hist[~inside] * (centers[~inside] - t) ** 2)
        if err < best_err:
            best, best_err = t, err
    return best


def channel_means(model: onnx.ModelProto, data: Dataset, tensors: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Per-channel means of `tensors` over the data, along axis 1 ("axis1": conv inputs) and along the last
    axis ("last": matmul inputs). Bias correction uses them to cancel the mean error of int8 weights."""
    tensors = list(dict.fromkeys(tensors))
    sums: dict[str, dict[str, np.ndarray]] = {}
    for values in run_float(model, data, tensors):
        for t, v in values.items():
            v = v.astype(np.float64)
            entry = sums.setdefault(t, {"axis1": 0.0, "last": 0.0})
            if v.ndim >= 2:
                entry["axis1"] = entry["axis1"] + v.mean(axis=tuple(a for a in range(v.ndim) if a != 1))
            entry["last"] = entry["last"] + v.reshape(-1, v.shape[-1]).mean(axis=0)
    n = data.num_samples
    return {t: {k: np.asarray(s) / n for k, s in entry.items()} for t, entry in sums.items()}
