"""Every onnxruntime session the project opens, made in one place so that onnxruntime's integer kernels
compute exactly on every CPU — the condition for onnxruntime to be a bit-exact golden.

Why a setting is needed: on x86 without VNNI, onnxruntime's graph optimizer rewrites S8 QDQ into U8 (its QDQ
S8-to-U8 transform), and the u8s8 kernels add pairs of products in saturating int16 (`vpmaddubsw`), so a
fused QLinearConv or QGemm comes out tens of LSB off wherever an input and weight pair beyond 32,767. The
session config entry `session.qdqisint8allowed = 1` keeps the S8S8 kernels, which accumulate in int32. On
CPUs with VNNI and on aarch64 onnxruntime already keeps them; the entry changes nothing there.

`probe()` checks that claim on the CPU at hand, through the very options every session gets: a QDQ conv,
matmul and gemm whose pairs saturate int16, against an integer reference. `diff` marks the layers of any
family the probe finds inexact as unverified instead of failing them.
"""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from .errors import ModelError

# The session config entries that make onnxruntime's integer kernels exact (see the module docstring).
EXACT_ENTRIES = {"session.qdqisint8allowed": "1"}
# And for a model without Q/DQ nodes (a float model, or one dynamically quantized to MatMulInteger/ConvInteger,
# whose u8 x s8 products saturate the same way on x86 without VNNI): onnxruntime's u8u8 path for those
# products. Not for QDQ models: with S8 kernels kept, onnxruntime then fuses QGemms it has no kernel for.
NO_QDQ_ENTRIES = {"session.x64quantprecision": "1"}
_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def exact_entries(model: onnx.ModelProto) -> dict[str, str]:
    """The entries that make onnxruntime exact on `model` (EXACT_ENTRIES, plus NO_QDQ_ENTRIES without Q/DQ)."""
    if any(n.op_type in _QDQ_OPS for n in model.graph.node):
        return dict(EXACT_ENTRIES)
    return {**EXACT_ENTRIES, **NO_QDQ_ENTRIES}


def options(level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL, threads: int = 1,
            entries: dict[str, str] | None = None, log_level: int = 4) -> ort.SessionOptions:
    """Session options with `entries` (default EXACT_ENTRIES; `session` passes the model's exact_entries, and
    only the probe's negative control and the benchmark's "what a default onnxruntime user gets" others)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.log_severity_level = log_level
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    for key, value in (EXACT_ENTRIES if entries is None else entries).items():
        opts.add_session_config_entry(key, value)
    return opts


def session(model: "onnx.ModelProto | str | Path", outputs: list[str] | None = None,
            level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL, threads: int = 1,
            entries: dict[str, str] | None = None, log_level: int = 4,
            save_optimized: "str | Path | None" = None, arena: bool = True) -> ort.InferenceSession:
    """An onnxruntime CPU session on a model (a ModelProto or a path); `outputs` adds intermediate tensors as
    graph outputs; `save_optimized` writes the graph onnxruntime optimized it into (for tests of the fusion);
    `arena=False` returns memory to the system after each run (onnxruntime's arena keeps its peak otherwise:
    the pieces of a large model, each its own session, would together hold every piece's peak).

    The outputs are added by appending a serialized graph holding only them: protobuf merges concatenated
    messages (repeated fields append), so the model is neither copied nor mutated."""
    path = None
    if isinstance(model, (str, Path)):
        path = str(model)
        model = onnx.load(path, load_external_data=bool(outputs))  # without outputs: only its ops are read
    opts = options(level, threads, exact_entries(model) if entries is None else entries, log_level)
    if save_optimized is not None:
        opts.optimized_model_filepath = str(save_optimized)
    opts.enable_cpu_mem_arena = arena
    if path is not None and not outputs:
        return _open(path, opts)
    serialized = model.SerializeToString()
    if outputs:
        present = {o.name for o in model.graph.output}
        typed = {vi.name: vi for vi in model.graph.value_info}
        extra = onnx.GraphProto()
        for name in dict.fromkeys(outputs):
            if name not in present:
                extra.output.append(typed.get(name) or onnx.helper.make_empty_tensor_value_info(name))
        serialized += onnx.ModelProto(graph=extra).SerializeToString()
    return _open(serialized, opts)


def _open(model, opts: ort.SessionOptions) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise _refused(exc) from None


def _refused(exc: Exception) -> ModelError:
    return ModelError(f"onnxruntime cannot run the model: {str(exc).splitlines()[0][:300]}")


def run(sess: ort.InferenceSession, outputs: list[str], feed: dict) -> list[np.ndarray]:
    """`sess.run`, with onnxruntime's refusals at run time as ModelError: a fused kernel checks its
    parameters only then (QLinearGlobalAveragePool refuses an input-to-output scale ratio out of its range)."""
    try:
        return sess.run(outputs, feed)
    except Exception as exc:  # onnxruntime's pybind exceptions share no narrower base
        raise _refused(exc) from None


def has_entries(opts: ort.SessionOptions, entries: dict[str, str]) -> bool:
    """Whether session options carry every one of `entries` (onnxruntime raises on an absent key)."""
    def value(key):
        try:
            return opts.get_session_config_entry(key)
        except RuntimeError:
            return None
    return all(value(k) == v for k, v in entries.items())


# ------------------------------------------------------------------------------------------------ the probe

@dataclass(frozen=True)
class Probe:
    """What the probe found on this CPU: per kernel family (ONNX op type), the mismatches against the integer
    reference out of the values compared."""

    cpu: str
    mismatches: dict[str, int]
    compared: dict[str, int]

    @property
    def exact(self) -> bool:
        return not any(self.mismatches.values())

    @property
    def inexact_ops(self) -> tuple[str, ...]:
        return tuple(op for op, n in self.mismatches.items() if n)

    def to_dict(self) -> dict:
        return {"exact": self.exact, "cpu": self.cpu, "inexact_ops": list(self.inexact_ops)}


# Sizes where int16 pair sums overflow: int8 inputs at the rails, K large enough for many pairs per output.
_C, _H, _K = 16, 6, 3


def _rails(rng, shape, low) -> np.ndarray:
    return np.where(rng.random(shape) < 0.5, 127, low).astype(np.int8)


@dataclass(frozen=True)
class ProbeCase:
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    expected: np.ndarray          # the integer result the kernel must give
    scale: float | None           # the output's quantization scale (None: the output is the integer itself)

    def mismatches(self, output: np.ndarray) -> int:
        got = output if self.scale is None else np.rint(output / np.float32(self.scale))
        return int(np.count_nonzero(got.astype(np.int64) != self.expected))


def probe_cases(seed: int = 0) -> dict[str, ProbeCase]:
    """The integer kernels a compile and its diff meet, each on inputs that saturate int16 pair sums:
    QLinearConv and QGemm (for MatMul and Gemm) from QDQ models, and the u8 x s8 MatMulInteger of a
    dynamically quantized model.

    QDQ inputs and weights sit at ±127/-128, so after onnxruntime's S8-to-U8 shift (input + 128 = 255) the
    pair sums of `vpmaddubsw` exceed 32,767; the output scale keeps most results inside int8."""
    rng = np.random.default_rng(seed)
    cases = {}
    x = _rails(rng, (1, _C, _H, _H), -128)
    w = _rails(rng, (8, _C, 3, 3), -127)
    acc = np.zeros((1, 8, _H, _H), np.int64)
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,oc->nohw", xp[:, :, i:i + _H, j:j + _H], w[:, :, i, j].astype(np.int64))
    cases["Conv"] = _qdq_case(helper.make_node("Conv", ["xf", "wf"], ["yf"], pads=[1, 1, 1, 1]), x, w, acc)
    a = _rails(rng, (4, _C * 9), -128)
    b = _rails(rng, (_C * 9, 8), -127)
    acc = a.astype(np.int64) @ b.astype(np.int64)
    cases["MatMul"] = _qdq_case(helper.make_node("MatMul", ["xf", "wf"], ["yf"]), a, b, acc)
    cases["Gemm"] = _qdq_case(helper.make_node("Gemm", ["xf", "wf"], ["yf"]), a, b, acc)
    cases["MatMulInteger"] = _integer_case(np.where(rng.random(a.shape) < 0.5, 255, 0).astype(np.uint8), b)
    return cases


def _qdq_case(node: onnx.NodeProto, x: np.ndarray, w: np.ndarray, acc: np.ndarray) -> ProbeCase:
    scale = np.float32(float(np.abs(acc).max()) / 100.0)
    nodes = [helper.make_node("QuantizeLinear", ["x", "one", "zero"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "one", "zero"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "one", "zero"], ["wf"]),
             node,
             helper.make_node("QuantizeLinear", ["yf", "sy", "zero"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zero"], ["y"])]
    graph = helper.make_graph(
        nodes, "golden_probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.float32(1), "one"),
         numpy_helper.from_array(scale, "sy"), numpy_helper.from_array(np.int8(0), "zero")])
    expected = np.clip(np.rint(acc.astype(np.float32) * (np.float32(1) / scale)), -128, 127).astype(np.int64)
    return ProbeCase(_model(graph), {"x": x.astype(np.float32)}, expected, float(scale))


def _integer_case(a: np.ndarray, w: np.ndarray) -> ProbeCase:
    """MatMulInteger of u8 activations (zero point 128) and s8 weights, as dynamic quantization writes it."""
    node = helper.make_node("MatMulInteger", ["a", "w", "a_zero"], ["y"])
    graph = helper.make_graph(
        [node], "golden_probe", [helper.make_tensor_value_info("a", TensorProto.UINT8, list(a.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(128), "a_zero")])
    expected = (a.astype(np.int64) - 128) @ w.astype(np.int64)
    return ProbeCase(_model(graph), {"a": a}, expected, None)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run_probe(entries: dict[str, str] | None = None) -> Probe:
    """Run every probe case through `session` (with `entries`, default each model's exact_entries)."""
    mismatches, compared = {}, {}
    for op, case in probe_cases().items():
        mismatches[op] = case.mismatches(session(case.model, entries=entries).run(None, case.feeds)[0])
        compared[op] = int(case.expected.size)
    return Probe(cpu_description(), mismatches, compared)


@functools.lru_cache(maxsize=1)
def probe() -> Probe:
    """The probe with the golden's own options, once per process."""
    return run_probe()


# Flags that decide which integer kernels onnxruntime picks on x86.
_FLAGS = ("avx512_vnni", "avx_vnni", "avx512bw", "avx2", "asimddp", "i8mm")


def cpu_description() -> str:
    """The CPU model name and the instruction-set flags that matter for onnxruntime's int8 kernels."""
    name, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key in ("model name", "cpu model", "hardware") and not name:
                name = value.strip()
            elif key in ("flags", "features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    found = [f for f in _FLAGS if f in flags]
    return f"{name} ({platform.machine()}; {' '.join(found) if found else 'no VNNI/dot-product flags'})"
