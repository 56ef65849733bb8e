"""The pipeline behind `onnx2gemmini MODEL.onnx` and `o2g.compile`: load -> passes -> calibrate ->
quantize -> plan. Writing artifacts and running the plan hang off the result."""
from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from . import input_values as frozen_inputs
from . import stream
from . import limits as limits_mod
from . import torch_export
from .quant.adaround import Rounder
from .quant import selection
from .quant.calibrate import channel_ranges, collect, sample_values, statistics
from .config import PRESETS, GemminiConfig, load_config
from .data import Dataset, fit_samples, load_data, random_data
from .errors import DataError, UnsupportedError, UsageError
from .golden import build_float
from .scratchpad import find_hazards
from .tiling import TILINGS, apply_tiles, attach_costs
from .graph import Graph, ValueInfo, from_onnx, topological
from .load import LoadedModel, load, parse_input_shapes
from .passes import fuse_softmax, run_passes, smooth_magnitude
from .plan import Plan
from .planner import build_plan, preflight
from .ops import keep_float as keep_float_mod
from .ops.registry import handlers_for
from .quality import STATS_SAMPLES
from .quant.quantize import QuantTable, build_table, joined_ranges, propagate_fixed_scales
from .run.emulator import Emulator, dequantize
from .run.selftest import calibration_sample, default_sample, sample_warnings

log = logging.getLogger("onnx2gemmini")
RANDOM_CALIB_SAMPLES = 8


@dataclass
class Compiled:
    """A compiled model: the plan plus what produced it; `run` emulates, `write` emits the artifacts."""

    loaded: LoadedModel
    graph: Graph                 # after the rewrite passes
    quant: QuantTable
    plan: Plan
    config: GemminiConfig
    changes: list[str]
    timing: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    command: str = ""
    sources: tuple[str, ...] = ()  # data and config files the compile read (besides the model's own)
    calib_head: Dataset | None = None  # the first calibration samples (a copy): the report's per-layer SQNR
    selftest_sample: dict | None = None  # the generated programs' embedded input (run/selftest.py)
    calibration: dict = field(default_factory=dict)  # report.json's `calibration` (quant/selection.py)
    limits: limits_mod.Limits = limits_mod.DEFAULTS  # the size limits it was compiled under
    states: stream.StatePairs = ()  # --state: (output, input) pairs fed back at the next step (stream.py)
    selftest_stream: stream.StreamCase | None = None  # a streaming model's self-test: the steps before the sample

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Bit-exact Gemmini emulation of one sample; dequantized float outputs by ONNX name."""
        return dequantize(self.plan, Emulator(self.plan).run(self.feeds(inputs)))

    def run_int8(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """int8 outputs by ONNX name (the bytes the Gemmini program produces; float32 for an output kept float)."""
        out = Emulator(self.plan).run(self.feeds(inputs))
        return {self.plan.tensors[t].onnx_name: out[t] for t in self.plan.outputs}

    def feeds(self, inputs) -> dict[str, np.ndarray]:
        """One sample per model input, exactly as the model declares it: float32, finite.

        Wrong names, shapes (even of the same size) and non-numbers are errors, never reshaped or dropped:
        a silently reshaped image gives plausible, wrong outputs.
        """
        if not isinstance(inputs, Mapping):
            raise UsageError(f"run: expected a dict {{input name: array}}, got {type(inputs).__name__}")
        expected = {self.plan.tensors[t].onnx_name: self.plan.tensors[t].onnx_shape for t in self.plan.inputs}
        infos = {vi.name: vi for vi in self.graph.inputs}
        missing = [n for n in expected if n not in inputs]
        unknown = sorted(str(n) for n in inputs if n not in expected)
        if missing or unknown:
            raise DataError(f"run: the model's inputs are {', '.join(expected)}; "
                            + "; ".join(filter(None, [missing and f"missing {', '.join(missing)}",
                                                      unknown and f"unknown {', '.join(unknown)}"])))
        return {name: _feed(infos[name], inputs[name], shape) for name, shape in expected.items()}

    def input_files(self) -> tuple[str, ...]:
        """Every file the compile read: an output directory must never be or contain one of them."""
        return tuple(self.loaded.files) + self.sources

    def write(self, out_dir: "str | Path", emit: "tuple[str, ...] | None" = None, force: bool = False,
              diff: dict | None = None) -> Path:
        """Write the output directory (CONTRACTS.md) and return its path.

        `emit`: artifacts among c, mlir, qdq (default all); `force`: replace a non-empty directory;
        `diff`: a result of `o2g.diff(self, ...)`, whose per-layer SQNR and mismatches then go into the
        reports and the annotated model (without it they are measured on a few calibration samples).
        """
        from .output import write_outputs
        if not isinstance(out_dir, (str, Path)):
            raise UsageError(f"write: expected an output directory path, got {type(out_dir).__name__}")
        if diff is not None and not (isinstance(diff, Mapping) and isinstance(diff.get("layers"), list)):
            raise UsageError("write: diff= expects the result of o2g.diff (a dict with 'layers')")
        return write_outputs(self, Path(out_dir), emit, force, diff)


def _feed(info: ValueInfo, value, shape: tuple[int, ...]) -> np.ndarray:
    """One input of `Compiled.feeds`: real numbers of exactly `shape`, as finite float32 (integer ids checked
    as a data file's are)."""
    name = info.name
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise DataError(f"run: input '{name}' is not an array of numbers ({str(exc).splitlines()[0][:100]})") from None
    if array.dtype.kind not in "iuf":
        raise DataError(f"run: input '{name}' has dtype {array.dtype}, expected real numbers")
    if array.shape != tuple(shape):
        raise DataError(f"run: input '{name}' has shape {list(array.shape)}, the model's input is {list(shape)} "
                        f"(one sample)")
    if np.dtype(info.dtype).kind in "iu":
        return fit_samples(info, array[None], "run")[0]
    array = array.astype(np.float32, copy=False)
    if not np.isfinite(array).all():
        raise DataError(f"run: input '{name}' contains NaN or infinite values")
    return array


def prepare(model_path, input_shape=None, config=None, equalize: bool = False, sort_channels: bool = False,
            input_values=None, calibrated=None) -> tuple[LoadedModel, Graph, GemminiConfig, list[str]]:
    """Load, check and rewrite a model, and pre-flight it (no data needed). `calibrated(graph, loaded, cfg)`, if
    given, runs the rewrites that need data between the default and the optional passes (run_passes)."""
    cfg = load_config(config)
    loaded = load(model_path, parse_input_shapes(input_shape), input_values=frozen_inputs.parse(input_values))
    optional = ("equalize",) * equalize + ("sort_channels",) * sort_channels
    graph, changes = run_passes(from_onnx(loaded.model), cfg, optional,
                                None if calibrated is None else lambda g: calibrated(g, loaded, cfg))
    preflight(graph)
    return loaded, graph, cfg, changes


WEIGHT_SCALES = ("tensor", "sorted", "groups", "channel")
DEFAULT_WEIGHT_SCALES = "sorted"


def compile(model, calib=None, config=None, input_shape=None, num_calib: int | None = None,
            calib_method: str = selection.AUTO, command: str = "", equalize: bool = True,
            tiling: str = "search", bias_correction: bool = True,
            weight_scales: str = DEFAULT_WEIGHT_SCALES, limits=None, example_inputs=None, progress=None,
            keep_float=None, adaround: bool = False, input_values=None, states=None) -> Compiled:
    """Compile a model for Gemmini (see CONTRACTS.md for the options): an ONNX file, an onnx.ModelProto, or
    a torch.nn.Module with `example_inputs` (one sample as a tensor or tuple of tensors; exported by
    torch.onnx.export, inputs named after forward's parameters, see torch_export.py).

    `calib` (and `o2g.diff`'s `data`): a .npz/.npy file or model-zoo folder, an array (single-input
    models), a dict {input name: array}, or an iterable of such dicts; samples on axis 0.

    `calib_method`: "auto" (the default; quant/selection.py) fits each of mse, minmax, entropy and percentile
    on part of the calibration samples and keeps the one whose whole-model int8 output is closest to float on
    the rest (`Compiled.calibration` says which, by how much, on how many samples); "mse", "minmax",
    "entropy", "percentile" or "output" force one estimator. The other defaults come from
    scripts/bench_quantization.py (output SQNR vs fp32 on two trained depthwise nets; see the README): `equalize` (cross-layer
    equalization of conv -> ReLU -> conv pairs; -0.1 to +1.2 dB), `bias_correction` (cancels the mean output
    error of int8 weights using calibration statistics; 0 to +1.0 dB). `weight_scales`: "sorted" (the
    default, from scripts/bench_real_models.py: one scale per layer, except where a conv's channel ranges
    differ so much that, with its output channels sorted by range, each run of DIM gets a scale and the
    smallest run's is 4x finer or more; passes/sort_channels.py), "tensor" (one weight scale per layer),
    "groups" (one per DIM output channels, in the model's order) or "channel" (one per output channel); each
    group of a conv or matmul is its own Gemmini call writing its channels in place.
    `tiling`: "search" picks every matmul/conv tile (explicit-tile calls); "auto" leaves it to gemmini.h.
    `limits`: overrides of the size limits ({name: value} or NAME=VALUE strings; see limits.py).
    `progress(phase, done, total)`: called as each phase (load, calibrate, quantize, plan, tiling) starts
    and ends, and per calibration sample.
    `keep_float`: node names (a list, or a comma-separated string) of Conv, ConvTranspose, Gemm and MatMul
    layers to run in float on the CPU with float32 weights instead of on Gemmini (ops/keep_float.py): more
    accurate, slower; `diff(..., sensitivity=True)` ranks the candidates.
    `adaround`: round the weights of convs (one group), Gemms and MatMuls by a constant to minimise their
    output error on the calibration data (adaround.py) instead of to the nearest integer; slower to compile.
    `input_values`: inputs frozen to constants before simplification ({name: number, list or array}, or
    NAME=V[,V...] strings; input_values.py), so branches on them fold; `Compiled.loaded.input_values` has them.
    `states`: a streaming model's outputs fed back as inputs at the next step ({output: input}, or OUT=IN
    strings; stream.py): the calibration samples are then consecutive steps, each state input the state the
    float model returned at the step before (zeros at the first).
    """
    _check_options(num_calib, calib_method, tiling, weight_scales)
    kept = keep_float_mod.layer_names(keep_float)
    pairs = stream.parse(states)
    calib = torch_export.as_data(calib)
    if torch_export.is_torch_module(model):
        model = torch_export.export(model, example_inputs)
    elif example_inputs is not None:
        raise UsageError("compile: example_inputs= goes with a torch.nn.Module; an ONNX model has its own shapes "
                         "(fix dynamic ones with input_shape=)")
    with limits_mod.applied(limits):
        compiled = _compile(model, calib, config, input_shape, num_calib, calib_method, equalize, tiling,
                            bias_correction, weight_scales, progress, kept, adaround, input_values, pairs)
    compiled.command = command
    compiled.sources = tuple(str(p) for p in (calib, config) if _is_path(p))
    return compiled


def _is_path(value) -> bool:
    """A path the compile reads (a preset name is not one)."""
    return isinstance(value, Path) or isinstance(value, str) and value not in PRESETS


def check_count(option: str, value) -> None:
    """A sample count option: None (all) or a positive integer, as the CLI's IntRange(min=1) takes it."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
        raise UsageError(f"{option}: expected a positive integer, got {value!r}")


def _check_options(num_calib, calib_method, tiling, weight_scales) -> None:
    """The option values, checked before any work (the API gets the CLI's usage errors, not a TypeError)."""
    check_count("--num-calib", num_calib)
    for option, value, choices in (("--calib-method", calib_method, selection.METHODS), ("--tiling", tiling, TILINGS),
                                   ("--weight-scales", weight_scales, WEIGHT_SCALES)):
        if not isinstance(value, str) or value not in choices:
            raise UsageError(f"{option}: unknown value {value!r} (choose from {', '.join(choices)})")


class _Phases:
    """Times each phase of a compile into `timing`, logs it as it ends (plain lines under -v) and tells
    `progress(phase, done, total)` (a progress bar) as it starts and ends."""

    def __init__(self, timing: dict, progress=None):
        self.timing, self.progress = timing, progress

    @contextlib.contextmanager
    def __call__(self, name: str):
        self.tell(name, 0, 1)
        t = time.perf_counter()
        yield
        self.timing[name + "_s"] = time.perf_counter() - t
        log.info(f"{name}: {self.timing[name + '_s']:.2f} s")
        self.tell(name, 1, 1)

    def tell(self, name: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(name, done, total)


def _compile(model, calib, config, input_shape, num_calib, calib_method, equalize, tiling, bias_correction,
             weight_scales, progress=None, keep_float: tuple[str, ...] = (), adaround: bool = False,
             input_values=None, pairs: stream.StatePairs = ()) -> Compiled:
    timing: dict[str, float] = {}
    phase = _Phases(timing, progress)
    warnings: list[str] = []
    loading: dict = {}

    def calibrated(graph: Graph, loaded: LoadedModel, cfg: GemminiConfig) -> list[str]:
        """The calibration data, read once the default passes have run (the model's inputs and the float
        function are final then), and the rewrites that need it."""
        stream.check(pairs, {i.name: (i.shape, i.dtype) for i in graph.inputs},
                     {o.name: o.shape for o in graph.outputs}, loaded.input_values)
        loading["data"] = data = _calibration_data(graph, calib, num_calib, pairs, warnings)
        if data is None:
            return []
        float_model = functools.cache(lambda: build_float(graph))  # built only for a model with the pattern
        lines = smooth_magnitude.run(graph, float_model,
                                     lambda tensors: channel_ranges(float_model(), data, tensors),
                                     lambda tensors, count: sample_values(float_model(), data, tensors, count),
                                     {"groups": cfg.dim, "channel": 1}.get(weight_scales, 0),
                                     cfg.dim if weight_scales == "sorted" else 0)
        return [f"smooth_magnitude: {line}" for line in lines]

    with phase("load"):
        loaded, graph, cfg, changes = prepare(model, input_shape, config, equalize, weight_scales == "sorted",
                                              input_values, calibrated)
        kept = keep_float_mod.check_layers(graph, keep_float, lambda: _original_ops(loaded)) if keep_float \
            else frozenset()
    data = loading["data"]
    with phase("calibrate"):
        # Calibrate the rewritten graph: passes such as equalization change intermediate ranges.
        amax, means, method = {}, None, "from the model"
        handlers = handlers_for(graph)
        group = {"groups": cfg.dim, "channel": 1}.get(weight_scales, 0)

        def table(ranges, table_means, name, rounder=None) -> QuantTable:
            return build_table(graph, handlers, ranges, name, data.num_samples, table_means, group, kept, rounder)

        calibration = selection.forced(method)
        if data is not None:  # one float pass: the ranges, and the input means bias correction needs
            weighted = [n.inputs[0] for n in graph.nodes if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul")]
            tell = lambda done: phase.tell("calibrate", done, data.num_samples)  # noqa: E731
            mean_tensors = weighted if bias_correction else []
            if calib_method == selection.AUTO:
                found = collect(build_float(graph), data, graph_activations(graph), mean_tensors, progress=tell)
                method, amax, calibration = selection.auto(
                    graph, found, lambda r, m, name: table(r, m if bias_correction else None, name), handlers, cfg)
                means = found.means() if bias_correction else None
            else:
                stats = statistics(build_float(graph), data, calib_method, graph_activations(graph), mean_tensors,
                                   progress=tell)
                amax, means = stats.amax, (stats.means if bias_correction else None)
                method, calibration = calib_method, selection.forced(calib_method)
    with phase("quantize"):
        if data is not None and fuse_softmax.wanted(cfg):  # where the calibrated scores suit the normalizer
            fused, kept_on_cpu = fuse_softmax.run_calibrated(graph, cfg, table(amax, None, method).scales, amax)
            changes, warnings = changes + [f"fuse_softmax: {line}" for line in fused], warnings + kept_on_cpu
            handlers = handlers_for(graph)
        if data is None:
            quant = build_table(graph, handlers, amax, method, 0, None, group, kept, None)
        else:
            quant = table(amax, means, method, Rounder.from_data(graph, build_float(graph), data) if adaround else None)
    warnings += joined_ranges(graph, quant)
    with phase("plan"):
        name = Path(str(model)).stem if not isinstance(model, onnx.ModelProto) else (model.graph.name or "model")
        plan = build_plan(graph, quant, cfg, name, loaded.sha256)
    with phase("tiling"):
        try:
            plan = apply_tiles(plan, mode=tiling, hazards=lambda step, tiles: find_hazards(step, cfg, tiles))
        except ValueError as exc:
            raise UnsupportedError(f"tiling: {exc} (config {cfg.name}); try a larger config") from None
        plan = attach_costs(plan)
    head = None if data is None else data.head(STATS_SAMPLES)
    if head is not None:  # a copy: a slice would keep the whole calibration set alive
        head = Dataset({k: v.copy() for k, v in head.inputs.items()}, None, head.source)
    real = calibration_sample(plan, head) if calib is not None else None
    streamed = None
    if pairs:  # the self-test runs the first steps of the stream, the last one checked
        steps = _first_steps(plan, head if real is not None else None, stream.SELFTEST_WARMUP + 1)
        sample, streamed = stream.selftest_case(plan, pairs, steps, lambda s: dequantize(plan, Emulator(plan).run(s)))
        what = f"step {len(steps) - 1} of the {'calibration stream' if real is not None else 'seeded noise'}"
    else:
        sample = default_sample(plan) if real is None else real
        what = "calibration sample 0" if real is not None else "seeded noise"
    warnings += sample_warnings(plan, sample, what)
    return Compiled(loaded, graph, quant, plan, cfg, changes, timing, warnings, calib_head=head,
                    selftest_sample=sample, calibration=calibration, limits=limits_mod.current(), states=pairs,
                    selftest_stream=streamed)


def _first_steps(plan: Plan, head: Dataset | None, count: int) -> list[dict]:
    """The first `count` steps of the calibration stream `head` (fewer if it is shorter), or seeded noise."""
    if head is None:
        return [default_sample(plan, seed) for seed in range(count)]
    return [{k: np.asarray(v[i]) for k, v in head.inputs.items()} for i in range(min(count, head.num_samples))]


def _calibration_data(graph: Graph, calib, num_calib: int | None, pairs: stream.StatePairs,
                      warnings: list[str]) -> Dataset | None:
    """The calibration samples for `graph`: the user's, or deterministic random ones (with a warning), or
    none for a fully pre-quantized model; a stream's state inputs carried by the float model (stream.py)."""
    if graph.fixed_scales and all(a in fixed_scales(graph) for a in graph_activations(graph)):
        return None  # a fully pre-quantized model carries every scale
    fed_inputs = [i for i in graph.inputs if i.name not in stream.state_inputs(pairs)]
    if calib is None:
        data = random_data(fed_inputs, num_calib or RANDOM_CALIB_SAMPLES)
        warnings.append("no calibration data (--calib): scales come from deterministic random inputs; "
                        "accuracy on real data will suffer")
    else:
        data = load_data(calib, fed_inputs).head(num_calib)
    if pairs:  # a stream: each state the float model's own at the step before
        data = stream.filled(data, stream.onnx_step(build_float(graph)), pairs,
                             {i.name: i.shape for i in graph.inputs})[0]
    return data


def _original_ops(loaded: LoadedModel) -> dict[str, str]:
    """Node name -> op type before the rewrite passes (names as the compiler's graph gives them)."""
    return {n.name: n.op_type for n in from_onnx(loaded.model).nodes}


def graph_activations(graph: Graph) -> list[str]:
    return [i.name for i in graph.inputs] + [o for n in graph.nodes for o in n.outputs if o]


def fixed_scales(graph: Graph) -> dict[str, float]:
    """Scales a pre-quantized model fixes, after flowing back through scale-preserving ops."""
    order = topological(graph.nodes, [i.name for i in graph.inputs] + list(graph.initializers))
    return propagate_fixed_scales(graph, order, handlers_for(graph))


def model_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
