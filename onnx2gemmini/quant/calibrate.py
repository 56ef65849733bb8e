"""Run the float model in onnxruntime over calibration data and estimate a range for every tensor.

Estimators (estimators.py): minmax (largest |x|), percentile (99.99th percentile of |x|), mse (the clipping
threshold that minimises the expected int8 quantisation error; for a tensor a max-pool reads, at least the
level POOLED_SHARE of the calibration samples reach), entropy (KL divergence, as onnxruntime's Entropy), output
(of minmax, percentile and the plain mse threshold, the one that disturbs the tensor's consumers' outputs
least: range_search.py). One pass over the data records everything later steps need, per sample (its largest
|x|, the nonzero |x| for the histograms, per-channel means for bias correction), so any subset of the samples
gets its own ranges without running the model again (selection.py fits candidates on part of the data and
judges them on the rest). A histogram's range is its subset's largest |x|, so the values are kept until the
pass ends, or, past KEEP_BYTES, histogrammed in a second pass instead.
"""
from __future__ import annotations

import functools
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import onnx

from . import estimators, range_search
from ..data import Dataset
from ..errors import UsageError
from ..parallel import usable_cores
from ..segments import Pieces
from .estimators import BINS

METHODS = ("minmax", "percentile", "mse", "entropy", "output")  # per-tensor estimators
KEEP_BYTES = 512 * 2**20  # nonzero |x| kept for the histograms; past this, a second pass histograms them
OUTPUT_BYTES = 64 * 2**20  # model outputs kept per sample (the held-out judging's reference) up to this in all
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
    from one float pass over `data` (two when the values the histograms need exceed KEEP_BYTES)."""
    if method not in METHODS:
        raise UsageError(f"--calib-method: unknown method '{method}' (choose from {', '.join(METHODS)})")
    found = collect(model, data, tensors, mean_tensors, method != "minmax", threads, progress)
    if method != "output":
        return Statistics(found.ranges(method), found.means(), found.passes)
    if not found.sess.whole:
        raise UsageError("--calib-method output holds every activation of a sample at once, and this model's "
                         "exceed the activation_bytes limit; choose another method or raise the limit")
    hist = found.histograms([None])[0]
    candidates = {t: estimators.candidates(hist[t], a) if a > 0 else [0.0] for t, a in found.amax().items()}
    samples = range_search.take_samples(data, found.sample_bytes)
    amax = range_search.choose(model, found.sess, found.outputs, samples, candidates)
    return Statistics(amax, found.means(), found.passes)


Subset = "tuple[int, ...] | None"  # sample indices (None: every sample)


@dataclass
class Collected:
    """One float pass over the data, kept per sample so that any subset of the samples (a held-out split's
    fitting part) gets its own ranges and means without running the model again: each sample's largest |x|
    and per-channel means, and, for the histogram estimators, its nonzero |x| and count of zeros (past
    KEEP_BYTES these are dropped and a second pass histograms every requested subset at once)."""

    model: onnx.ModelProto
    data: Dataset
    sess: object
    outputs: list[str]
    tensors: list[str]
    tops: dict[str, list[float]]
    kept: dict[str, list[np.ndarray]] | None
    zeros: dict[str, list[int]]
    sample_means: list[dict[str, dict[str, np.ndarray]]]
    sample_bytes: int
    threads: int
    passes: int = 1
    model_outputs: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # by sample, up to OUTPUT_BYTES
    _hist: dict = field(default_factory=dict)
    _ranges: dict = field(default_factory=dict)

    def outputs_of(self, i: int, names: list[str]) -> list[np.ndarray]:
        """The float model's outputs `names` on sample `i`: kept from the pass when they fitted, else run again
        (the same session, so the same values)."""
        kept = self.model_outputs.get(i)
        if kept is not None and all(n in kept for n in names):
            return [kept[n] for n in names]
        return self.sess.run(names, self.data.sample(i))

    def indices(self, subset: Subset) -> list[int]:
        return list(range(self.data.num_samples)) if subset is None else list(subset)

    def amax(self, subset: Subset = None) -> dict[str, float]:
        picks = self.indices(subset)
        return {t: max((self.tops[t][i] for i in picks if i < len(self.tops[t])), default=0.0)
                for t in self.tensors}

    def means(self, subset: Subset = None) -> dict[str, dict[str, np.ndarray]]:
        """Per-channel means over `subset`, summed in sample order (float64), then divided."""
        picks = self.indices(subset)
        sums: dict[str, dict] = {}
        for i in picks:
            for t, sample_means in self.sample_means[i].items():
                entry = sums.setdefault(t, {"axis1": 0.0, "last": 0.0})
                for k, m in sample_means.items():
                    entry[k] = entry[k] + m
        return {t: {k: np.asarray(s) / len(picks) for k, s in entry.items()} for t, entry in sums.items()}

    def ranges(self, method: str, subset: Subset = None) -> dict[str, float]:
        """{tensor: amax} by a histogram estimator (or minmax) over `subset`, never past the subset's largest
        |x|; for a tensor a max-pool reads, mse never goes below the level POOLED_SHARE of the subset's
        samples reach. Computed once per method and subset."""
        if (method, subset) not in self._ranges:
            self._ranges[(method, subset)] = self._estimate(method, subset)
        return dict(self._ranges[(method, subset)])

    def _estimate(self, method: str, subset: Subset) -> dict[str, float]:
        amax = self.amax(subset)
        if method == "minmax":
            return amax
        hist = self.histograms([subset])[0]
        edge = self.amax(None)
        floored = pooled_tensors(self.model) if method == "mse" else set()
        picks = self.indices(subset)
        return {t: (max(min(estimators.threshold(method, hist[t], edge[t], sum(self.zeros[t][i] for i in picks)),
                            amax[t]),
                        sample_floor([self.tops[t][i] for i in picks]) if t in floored else 0.0)
                    if amax[t] > 0 else 0.0) for t in self.tensors}

    def histograms(self, subsets: list) -> list[dict[str, np.ndarray]]:
        """Per subset, BINS counts of its samples' |x| over [0, the largest |x| of every sample] for every
        tensor with a nonzero range. One range for all subsets, so the samples are histogrammed once, in the
        groups the subsets cut them into, and each subset sums its groups (held-out samples thereby set the bin
        width a fold's estimators see, never their counts). Computed once per subset; when the values were not
        kept, in one more pass."""
        missing = [s for s in dict.fromkeys(subsets) if s not in self._hist]
        if missing:
            members = [set(self.indices(s)) for s in missing]
            groups: dict[tuple, list[int]] = {}
            for i in range(self.data.num_samples):
                key = tuple(i in m for m in members)
                if any(key):
                    groups.setdefault(key, []).append(i)
            keys = list(groups)
            counted = self._group_histograms([groups[k] for k in keys])
            positive = [t for t, a in self.amax(None).items() if a > 0]
            for n, s in enumerate(missing):
                inside = [g for g, k in enumerate(keys) if k[n]]
                self._hist[s] = {t: sum((counted[g][t] for g in inside), np.zeros(BINS, np.int64)) for t in positive}
        return [self._hist[s] for s in subsets]

    def _group_histograms(self, groups: list[list[int]]) -> list[dict[str, np.ndarray]]:
        """Per group of samples, each tensor's BINS counts of |x| over [0, its largest |x| over all samples]:
        from the kept values, or from one more pass over the data, a sample at a time (bounded memory)."""
        edge = self.amax(None)
        positive = [t for t in self.tensors if edge[t] > 0]
        if self.kept is not None:
            def per_tensor(t: str) -> list[np.ndarray]:
                return [_histogram([self.kept[t][i] for i in g], sum(self.zeros[t][i] for i in g), edge[t])
                        for g in groups]
            with ThreadPoolExecutor(self.threads) as pool:
                by_tensor = dict(zip(positive, pool.map(per_tensor, positive)))
            return [{t: by_tensor[t][g] for t in positive} for g in range(len(groups))]
        group_of = {i: g for g, members in enumerate(groups) for i in members}
        hist = [{t: np.zeros(BINS, np.int64) for t in positive} for _ in groups]

        histogrammed = set(positive)

        def counts(i: int) -> dict:
            result = {}
            for values in self.sess.stream(self.data.sample(i)):
                result.update({t: _counts(values[t], edge[t]) for t in histogrammed.intersection(values)})
                del values  # a piece's values are not held while the next one runs
            return result

        with ThreadPoolExecutor(self.threads) as pool:
            wanted = sorted(group_of)
            for i, sample_counts in zip(wanted, _in_order(pool, counts, wanted, self.threads)):
                for t, c in sample_counts.items():
                    hist[group_of[i]][t] += c
        self.passes += 1
        return hist


def collect(model: onnx.ModelProto, data: Dataset, tensors: list[str] | None = None, mean_tensors: list[str] = (),
            values: bool = True, threads: int | None = None, progress=None) -> Collected:
    """One float pass over `data`: per sample, the largest |x| of `tensors` (default: every float tensor),
    their nonzero |x| when `values` (the histogram estimators need them) and the per-channel means of
    `mean_tensors`.

    The session computes every float tensor whichever are asked for, so the values, and the ranges, do not
    depend on `tensors` (onnxruntime fuses differently when fewer outputs are requested). `threads`
    (default: the usable cores) run samples side by side; every sum is still taken in sample order, so the
    result does not depend on it. A model whose values of one sample exceed the `activation_bytes` limit runs in
    pieces (segments.py), a sample at a time, the statistics taken piece by piece: the same values, less memory.
    `progress(done)` is called after each sample.
    """
    every = float_tensors(model)
    wanted = every if tensors is None else [t for t in dict.fromkeys(tensors) if t in set(every)]
    mean_tensors = list(dict.fromkeys(mean_tensors))
    outputs = list(dict.fromkeys(every + mean_tensors))
    kept: dict[str, list[np.ndarray]] | None = {t: [] for t in wanted} if values else None
    zeros: dict[str, list[int]] = {t: [] for t in wanted}
    tops: dict[str, list[float]] = {t: [] for t in wanted}
    sample_means = []
    kept_bytes = sample_bytes = output_bytes = 0
    model_outputs: dict[int, dict[str, np.ndarray]] = {}
    sess = Pieces(model, outputs)
    threads = _threads(threads) if sess.whole else 1  # in pieces: one sample at a time, within the limit
    if not sess.whole:  # nor are a sample's values kept for the histograms: they come from a second pass
        kept = None
    measure = functools.partial(_sample_stats, sess, wanted, mean_tensors, values, kept is not None)
    with ThreadPoolExecutor(threads) as pool:
        samples = (data.sample(i) for i in range(data.num_samples))
        for done, sample in enumerate(_in_order(pool, measure, samples, threads), 1):
            if progress is not None:
                progress(done)
            sample_bytes = max(sample_bytes, sample["bytes"])
            for t in wanted:
                top, nonzero, zero_count = sample["ranges"].get(t, (0.0, np.zeros(0, np.float32), 0))
                tops[t].append(top)
                zeros[t].append(zero_count)
                if kept is not None:
                    kept[t].append(nonzero)
                    kept_bytes += nonzero.nbytes
                    if kept_bytes > KEEP_BYTES:
                        kept = None  # too much to hold: histograms come from a second pass
            sample_means.append(sample["means"])
            output_bytes += sum(v.nbytes for v in sample["outputs"].values())
            if output_bytes <= OUTPUT_BYTES:
                model_outputs[done - 1] = sample["outputs"]
    return Collected(model, data, sess, outputs, wanted, tops, kept if values else None, zeros, sample_means,
                     sample_bytes, threads, model_outputs=model_outputs)


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


def _sample_stats(sess: Pieces, tensors: list[str], mean_tensors: list[str], keep: bool, hold: bool,
                  sample: dict) -> dict:
    """One sample through the float model, a piece at a time: per tensor (largest |x|, the nonzero |x| when
    they are held for the histograms (`hold`), the number of zeros when histograms need it (`keep`)), and the
    per-channel means of `mean_tensors`."""
    ranges, means, size, model_outputs = {}, {}, 0, {}
    tensors, averaged, ends = set(tensors), set(mean_tensors), set(sess.model_outputs)
    for values in sess.stream(sample):
        model_outputs.update({o: values[o] for o in ends.intersection(values)})
        size += sum(v.nbytes for v in values.values())
        ranges.update({t: _magnitudes(values[t], keep, hold) for t in tensors.intersection(values) if values[t].size})
        means.update({t: _sample_means(values[t]) for t in averaged.intersection(values)})
        del values  # a piece's values are not held while the next one runs
    return {"ranges": ranges, "means": {t: means[t] for t in mean_tensors if t in means}, "bytes": size,
            "outputs": model_outputs}


def _magnitudes(v: np.ndarray, count: bool, hold: bool) -> tuple:
    """(largest |x|, the nonzero |x| if `hold` else None, the number of zeros if `count` else 0)."""
    magnitude = np.abs(v)
    if not hold:
        return float(np.max(magnitude)), None, v.size - int(np.count_nonzero(magnitude)) if count else 0
    nonzero = magnitude[magnitude != 0]
    return float(np.max(magnitude)), nonzero, magnitude.size - nonzero.size


def _counts(v: np.ndarray, amax: float) -> np.ndarray:
    """One value's histogram of |x| (_histogram)."""
    magnitude = np.abs(v)
    nonzero = magnitude[magnitude != 0]
    return _histogram([nonzero], magnitude.size - nonzero.size, amax)


BATCH_VALUES = 2**22  # small samples' values are histogrammed together, up to this many at a time
TINY_RANGE = float(np.finfo(np.float32).tiny) * 2 * BINS  # below it, BINS float32 bins of [0, amax] collapse


def _histogram(chunks: list[np.ndarray], zeros: int, amax: float) -> np.ndarray:
    """np.histogram of |x| over [0, amax] in BINS bins, from the nonzero values and the count of zeros
    (a zero always lands in the first bin): the very counts of histogramming every value. Small chunks are
    joined first (counts add up exactly; one call per chunk costs more than the counting)."""
    hist = np.zeros(BINS, np.int64)
    batch: list[np.ndarray] = []
    size = 0
    for chunk in list(chunks) + [None]:
        if chunk is not None and chunk.size:
            batch.append(chunk)
            size += chunk.size
        if batch and (chunk is None or size >= BATCH_VALUES):
            joined = batch[0] if len(batch) == 1 else np.concatenate(batch)
            if amax < TINY_RANGE:  # float32 bin edges would not be distinct (a range of subnormals): in float64
                joined = joined.astype(np.float64)
            hist += np.histogram(joined, bins=BINS, range=(0.0, amax))[0]
            batch, size = [], 0
    hist[0] += zeros
    return hist


def _sample_means(v: np.ndarray) -> dict[str, np.ndarray]:
    """One sample's per-channel means in float64 (summed over samples in sample order, then divided)."""
    v = v.astype(np.float64)
    means = {"last": v.reshape(-1, v.shape[-1]).mean(axis=0)}
    if v.ndim >= 2:
        means["axis1"] = v.mean(axis=tuple(a for a in range(v.ndim) if a != 1))
    return means


def channel_ranges(model: onnx.ModelProto, data: Dataset, tensors: list[str], axis: int = 1) -> dict[str, np.ndarray]:
    """One float pass over `data`: each of `tensors`' largest |x| per index along `axis` (a calibrated pass
    such as passes/smooth_magnitude.py evens channels out with them)."""
    sess = Pieces(model, list(dict.fromkeys(tensors)))
    tops: dict[str, np.ndarray] = {}
    for i in range(data.num_samples):
        for values in sess.stream(data.sample(i)):
            for t in set(tensors).intersection(values):
                v = np.abs(np.nan_to_num(np.asarray(values[t], np.float64), posinf=0.0, neginf=0.0))
                top = np.moveaxis(v, axis, 0).reshape(v.shape[axis], -1).max(axis=1)
                tops[t] = top if t not in tops else np.maximum(tops[t], top)
    return tops


def sample_values(model: onnx.ModelProto, data: Dataset, tensors: list[str], count: int) -> dict[str, list[np.ndarray]]:
    """The values of `tensors` for the first `count` samples of `data` (float pass), per tensor in sample
    order: what a calibrated pass simulates its candidates on."""
    sess = Pieces(model, list(dict.fromkeys(tensors)))
    found: dict[str, list[np.ndarray]] = {t: [] for t in tensors}
    for i in range(min(count, data.num_samples)):
        for values in sess.stream(data.sample(i)):
            for t in set(tensors).intersection(values):
                found[t].append(np.asarray(values[t]).copy())
    return found
