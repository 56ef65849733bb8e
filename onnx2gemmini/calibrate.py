"""Run the float model in onnxruntime over calibration data and estimate a range for every tensor.

Estimators: minmax (largest |x|), percentile (99.99th percentile of |x|), mse (the clipping threshold that
minimises the expected int8 quantisation error; for a tensor a max-pool reads, at least the level POOLED_SHARE
of the calibration samples reach), output (of minmax, percentile and the plain mse threshold, the one that
disturbs the tensor's consumers' outputs least: range_search.py). One pass over the data records everything
later steps need (each sample's largest |x|, the nonzero |x| for the histograms, per-channel means for bias
correction): the
histograms' range is the largest |x| over all samples, so their values are kept until the pass ends, or,
past KEEP_BYTES, histogrammed in a second pass instead.
"""
from __future__ import annotations

import functools
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import onnx

from . import range_search
from .data import Dataset
from .errors import UsageError
from .ort_session import session
from .parallel import usable_cores

METHODS = ("minmax", "percentile", "mse", "output")
BINS = 2048
PERCENTILE = 99.99
KEEP_BYTES = 512 * 2**20  # nonzero |x| kept for the histograms; past this, a second pass histograms them
# mse never clips a tensor that a max-pool reads below the level this share of calibration samples reach
# (the np.quantile of the samples' largest |x|). Chosen on the MTCNN nets of scripts/bench_real_models.py,
# the benchmark's only models where it binds: 0.75 / 0.8 / 0.9 / 0.95 gained +0.30 /
# +0.45 / +0.32 / -0.17 dB over plain mse on average (quick and full sets, two data draws).
POOLED_SHARE = 0.8
POOL_READERS = ("MaxPool",)
ELEMENTWISE = ("Relu", "PRelu", "LeakyRelu", "Clip", "Identity")  # monotone: a clip before them is one after


def float_tensors(model: onnx.ModelProto) -> list[str]:
    """Every float tensor the graph computes or receives, in graph order."""
    g = model.graph
    typed = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    if not g.value_info:
        typed.update(_inferred_types(model))
    names = [vi.name for vi in g.input if vi.name not in {t.name for t in g.initializer}]
    for node in g.node:
        names.extend(o for o in node.output if o)
    return [n for n in dict.fromkeys(names) if typed.get(n) == onnx.TensorProto.FLOAT]


def _inferred_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element types by shape inference on the graph without its weights (initializers become typed inputs):
    types do not depend on weight values, and copying 100 MB of weights through inference costs seconds."""
    g = model.graph
    listed = {vi.name for vi in g.input}
    weights = [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in g.initializer
               if t.name not in listed]
    skeleton = onnx.helper.make_model(
        onnx.helper.make_graph(list(g.node), g.name, list(g.input) + weights, list(g.output)),
        opset_imports=list(model.opset_import), ir_version=model.ir_version, functions=list(model.functions))
    inferred = onnx.shape_inference.infer_shapes(skeleton).graph
    return {vi.name: vi.type.tensor_type.elem_type for vi in list(inferred.value_info) + list(inferred.output)}


def calibrate(model: onnx.ModelProto, data: Dataset, method: str = "minmax",
              tensors: list[str] | None = None) -> dict[str, float]:
    """{tensor: amax} — the symmetric range to map onto int8 for every float tensor (or every one of
    `tensors`)."""
    return statistics(model, data, method, tensors).amax


@dataclass
class Statistics:
    """What one float pass over the calibration data yields: ranges, and per-channel input means."""

    amax: dict[str, float]
    means: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    passes: int = 1  # float passes over the data it took (2 when the histogram values did not fit)


def statistics(model: onnx.ModelProto, data: Dataset, method: str = "minmax", tensors: list[str] | None = None,
               mean_tensors: list[str] = (), threads: int | None = None, progress=None) -> Statistics:
    """Ranges of `tensors` (default: every float tensor) by `method`, and the per-channel means of `mean_tensors` (bias
    correction cancels the mean error of int8 weights with them: "axis1" for conv inputs, "last" for matmul inputs),
    from one float pass over `data` (two when the values the histograms need exceed KEEP_BYTES).

    The session computes every float tensor whichever are asked for, so the values, and the ranges, do not
    depend on `tensors` (onnxruntime fuses differently when fewer outputs are requested). `threads`
    (default: the usable cores) run samples and histograms side by side; every sum is still taken in
    sample order, so the result does not depend on it. `progress(done)` is called after each sample.
    """
    if method not in METHODS:
        raise UsageError(f"--calib-method: unknown method '{method}' (choose from {', '.join(METHODS)})")
    every = float_tensors(model)
    wanted = every if tensors is None else [t for t in dict.fromkeys(tensors) if t in set(every)]
    mean_tensors = list(dict.fromkeys(mean_tensors))
    outputs = list(dict.fromkeys(every + mean_tensors))
    keep = method != "minmax"
    kept: dict[str, list[np.ndarray]] | None = {t: [] for t in wanted} if keep else None
    zeros = {t: 0 for t in wanted}
    kept_bytes = 0
    tops: dict[str, list[float]] = {t: [] for t in wanted}  # each sample's largest |x|, in sample order
    sums: dict[str, dict] = {}
    sample_bytes = 0
    sess = session(model, outputs)
    measure = functools.partial(_sample_stats, sess, outputs, wanted, mean_tensors, keep)
    threads = _threads(threads)
    with ThreadPoolExecutor(threads) as pool:
        samples = (data.sample(i) for i in range(data.num_samples))
        for done, sample in enumerate(_in_order(pool, measure, samples, threads), 1):
            if progress is not None:
                progress(done)
            sample_bytes = max(sample_bytes, sample["bytes"])
            for t, (top, nonzero, zero_count) in sample["ranges"].items():
                tops[t].append(top)
                if kept is not None:
                    zeros[t] += zero_count
                    kept[t].append(nonzero)
                    kept_bytes += nonzero.nbytes
                    if kept_bytes > KEEP_BYTES:
                        kept = None  # too much to hold: histograms come from a second pass
            for t, sample_means in sample["means"].items():
                entry = sums.setdefault(t, {"axis1": 0.0, "last": 0.0})
                for k, m in sample_means.items():
                    entry[k] = entry[k] + m
        means = {t: {k: np.asarray(s) / data.num_samples for k, s in entry.items()} for t, entry in sums.items()}
        amax = {t: max(tops[t], default=0.0) for t in wanted}
        if not keep:
            return Statistics(amax, means)
        positive = [t for t in wanted if amax[t] > 0]
        if kept is not None:
            counts = pool.map(lambda t: _histogram(kept[t], zeros[t], amax[t]), positive)
            hist, passes = dict(zip(positive, counts)), 1
        else:
            hist, passes = _histograms_by_pass(pool, threads, sess, outputs, data, positive, amax), 2
    if method == "output":
        candidates = {t: _candidates(hist[t], amax[t]) if amax[t] > 0 else [0.0] for t in wanted}
        samples = range_search.take_samples(data, sample_bytes)
        return Statistics(range_search.choose(model, sess, outputs, samples, candidates), means, passes)
    pick = _percentile if method == "percentile" else _mse
    floored = pooled_tensors(model) if method == "mse" else set()
    return Statistics({t: (max(pick(hist[t], amax[t]), sample_floor(tops[t]) if t in floored else 0.0)
                           if amax[t] > 0 else 0.0) for t in wanted}, means, passes)


def pooled_tensors(model: onnx.ModelProto) -> set[str]:
    """Tensors a max-pool reads, directly or back through elementwise monotone activations, and the pools'
    outputs with their Identity copies (golden.build_float ends a fused conv -> ReLU -> pool that way).

    Why: mse weighs every value alike, so it clips the rare largest values, but a max-pool keeps exactly
    those, and the few values past mse's threshold sit in many samples. On MTCNN O-Net (conv -> PReLU ->
    max-pool first), mse clipped the first conv's output to 73% of its largest calibrated value, a level
    35% of the calibration crops reach; the crops whose faces the net is unsure of are among them."""
    made_by = {o: n for n in model.graph.node for o in n.output if o}
    copies = {n.input[0]: n.output[0] for n in model.graph.node if n.op_type == "Identity"}

    def after(name: str) -> str:
        return copies.get(name, "")

    def before(name: str) -> str:
        producer = made_by.get(name)
        return producer.input[0] if producer is not None and producer.op_type in ELEMENTWISE else ""

    pooled: set[str] = set()
    for node in model.graph.node:
        if node.op_type not in POOL_READERS or node.domain not in ("", "ai.onnx"):
            continue
        for name, step in ((node.output[0], after), (node.input[0], before)):
            while name and name not in pooled:
                pooled.add(name)
                name = step(name)
    return pooled


def sample_floor(tops: list[float]) -> float:
    """The level POOLED_SHARE of the samples reach: np.quantile (linear) of each sample's largest |x|."""
    return float(np.quantile(np.asarray(tops, np.float64), POOLED_SHARE)) if tops else 0.0


def _candidates(hist: np.ndarray, amax: float) -> list[float]:
    """The output-aware search's thresholds: mse's first (kept when nothing is better), the percentile,
    and the largest |x|. (With three more, geometric steps from mse's to the largest |x|, MTCNN O-Net fell
    from 31.0 to 27.4 dB on the real-model benchmark for +0.5 dB on digits v2: choices each right for their
    consumers alone added up worse.)"""
    return [_mse(hist, amax), _percentile(hist, amax), amax]


def _threads(threads: int | None) -> int:
    return usable_cores() if threads is None else max(1, int(threads))


def _in_order(pool: ThreadPoolExecutor, fn, items, ahead: int):
    """fn(item) for each item, computed up to `ahead` items ahead on the pool, yielded in item order
    (memory stays bounded: a sample's outputs can be hundreds of megabytes)."""
    pending = deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) > ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _sample_stats(sess, outputs: list[str], tensors: list[str], mean_tensors: list[str], keep: bool,
                  sample: dict) -> dict:
    """One sample through the float model: per tensor (largest |x|, the nonzero |x| when histograms need
    them, the number of zeros), and the per-channel means of `mean_tensors`."""
    values = dict(zip(outputs, sess.run(outputs, sample)))
    ranges = {}
    size = sum(v.nbytes for v in values.values())
    for t in tensors:
        v = values[t]
        if not v.size:
            continue
        magnitude = np.abs(v)
        nonzero = magnitude[magnitude != 0] if keep else None
        ranges[t] = (float(np.max(magnitude)), nonzero, magnitude.size - nonzero.size if keep else 0)
    return {"ranges": ranges, "means": {t: _sample_means(values[t]) for t in mean_tensors}, "bytes": size}


def _histogram(chunks: list[np.ndarray], zeros: int, amax: float) -> np.ndarray:
    """np.histogram of |x| over [0, amax] in BINS bins, from the nonzero values and the count of zeros
    (a zero always lands in the first bin): the very counts of histogramming every value."""
    hist = np.zeros(BINS, np.int64)
    for chunk in chunks:
        if chunk.size:
            hist += np.histogram(chunk, bins=BINS, range=(0.0, amax))[0]
    hist[0] += zeros
    return hist


def _histograms_by_pass(pool, threads: int, sess, outputs: list[str], data: Dataset, tensors: list[str],
                        amax: dict[str, float]) -> dict[str, np.ndarray]:
    """The histograms from a second pass over the data, one sample at a time (bounded memory)."""
    hist = {t: np.zeros(BINS, np.int64) for t in tensors}

    def counts(sample: dict) -> dict:
        values = dict(zip(outputs, sess.run(outputs, sample)))
        result = {}
        for t in tensors:
            magnitude = np.abs(values[t])
            nonzero = magnitude[magnitude != 0]
            result[t] = _histogram([nonzero], magnitude.size - nonzero.size, amax[t])
        return result

    for sample_counts in _in_order(pool, counts, (data.sample(i) for i in range(data.num_samples)), threads):
        for t, c in sample_counts.items():
            hist[t] += c
    return hist


def _percentile(hist: np.ndarray, amax: float) -> float:
    cdf = np.cumsum(hist) / max(hist.sum(), 1)
    idx = int(np.searchsorted(cdf, PERCENTILE / 100.0))
    return amax * min(idx + 1, BINS) / BINS


def _mse(hist: np.ndarray, amax: float) -> float:
    """Threshold among 128 candidates minimising clipping + rounding error of the histogram.

    The bins inside a threshold are a prefix (the centers increase), so slices replace boolean masks:
    the same values summed in the same order, the same result, several times faster."""
    centers = (np.arange(BINS) + 0.5) * amax / BINS
    best, best_err = amax, np.inf
    for k in range(1, 129):
        t = amax * k / 128
        step = t / 127
        m = int(np.searchsorted(centers, t, side="right"))  # centers[:m] <= t < centers[m:]
        err = np.sum(hist[:m]) * step * step / 12 + np.sum(hist[m:] * (centers[m:] - t) ** 2)
        if err < best_err:
            best, best_err = t, err
    return best


def _sample_means(v: np.ndarray) -> dict[str, np.ndarray]:
    """One sample's per-channel means in float64 (summed over samples in sample order, then divided)."""
    v = v.astype(np.float64)
    means = {"last": v.reshape(-1, v.shape[-1]).mean(axis=0)}
    if v.ndim >= 2:
        means["axis1"] = v.mean(axis=tuple(a for a in range(v.ndim) if a != 1))
    return means
