"""onnxruntime's own quantizer on the user's model, as a figure to read beside ours (`diff --reference`).

onnxruntime's `quantize_static` quantizes the user's original model itself (QDQ, symmetric int8, one weight
scale per tensor as Gemmini applies one per call), weights included, with our activation scales given as
`TensorQuantOverrides` wherever the tensor of that name holds the same float values in the original as in
our rewritten graph (equalization and channel sorting rescale and permute some; those, and the tensors our
graph fuses away, onnxruntime calibrates itself on the first calibration samples). Its output SQNR against
the original is reported beside ours. It is not a bound: onnxruntime keeps some ops float and computes others
otherwise (on the test suite's one-op models it leads ours by up to 11 dB: a mean of squares, PReLU, a lookup
of int32 ids), so no fixed margin separates those from a bug. The bound that catches a quantization bug the
golden shares is weight_check.py.
"""
from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx

# Samples onnxruntime calibrates the tensors it has no override for on, and that value matching runs.
REFERENCE_CALIB_SAMPLES = 4
# A tensor keeps its float values through the rewrite when max|ours - original| <= this share of max|original|.
SAME_VALUES = 1e-4
WHO = "onnxruntime quantize_static (QDQ, symmetric int8, per-tensor weights) with onnx2gemmini's activation scales"


class SampleReader:
    """onnxruntime's CalibrationDataReader protocol over a list of samples."""

    def __init__(self, samples: list[dict]):
        self._samples = iter(samples)

    def get_next(self):
        return next(self._samples, None)


def build(compiled, model: "onnx.ModelProto | None") -> tuple[bytes | None, dict]:
    """(the reference QDQ model serialized, or None; {who, overridden, scaled_tensors, or why}) for the user's
    original `model` (None: over protobuf's 2 GiB), a float one (diff refuses a quantized one first)."""
    info = {"who": WHO}
    if model is None:
        return None, {**info, "why": "the original model is over protobuf's 2 GiB"}
    if compiled.calib_head is None or compiled.calib_head.num_samples == 0:
        return None, {**info, "why": "no calibration samples"}
    try:
        head = compiled.calib_head
        frozen = compiled.loaded.input_values  # the original still reads the inputs --input-value froze
        samples = [{**frozen, **head.sample(i)} for i in range(min(REFERENCE_CALIB_SAMPLES, head.num_samples))]
        overrides = _overrides(compiled, model, samples)
        with tempfile.TemporaryDirectory(prefix="o2g-ref-") as tmp:
            src, out = Path(tmp) / "original.onnx", Path(tmp) / "reference.onnx"
            onnx.save(model, str(src))
            _quantize(src, out, samples, overrides)
            quantized = out.read_bytes()
    except Exception as exc:  # noqa: BLE001 - onnxruntime's quantizer refuses some models; said, not hidden
        return None, {**info, "why": f"onnxruntime's quantizer failed: {type(exc).__name__}: {str(exc)[:200]}"}
    return quantized, {**info, "overridden": len(overrides), "scaled_tensors": len(compiled.quant.scales)}


def _quantize(src: Path, out: Path, samples: list[dict], overrides: dict) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    logging.disable(logging.WARNING)  # its advice to run its pre-processing first
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_static(str(src), str(out), SampleReader(samples), quant_format=QuantFormat.QDQ, per_channel=False,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                           "TensorQuantOverrides": overrides})
    finally:
        logging.disable(logging.NOTSET)


def _overrides(compiled, model: onnx.ModelProto, samples: list[dict]) -> dict:
    """Our scale for every tensor whose float values are the same in the original and our rewritten graph."""
    from .golden import build_float
    from .ort_session import run, session
    quant = compiled.quant
    produced = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    inputs = {i.name for i in model.graph.input} & {vi.name for vi in compiled.graph.inputs}
    candidates = [t for t in quant.scales if t in produced and t not in quant.axis_scales and t not in inputs
                  and t not in quant.float_tensors and not compiled.graph.is_index(t)]
    fed = {t for t in inputs if t in quant.scales and not compiled.graph.is_index(t)}  # the same by definition
    same = set(candidates)
    if not candidates:
        return _scales(quant, fed)
    original = _with_outputs(model, candidates)
    ours = _with_outputs(build_float(compiled.graph), candidates)
    s_orig, s_ours = session(original), session(ours)
    names_orig = {i.name for i in s_orig.get_inputs()}
    names_ours = {i.name for i in s_ours.get_inputs()}
    for sample in samples[:2]:
        a = run(s_orig, candidates, {k: v for k, v in sample.items() if k in names_orig})
        b = run(s_ours, candidates, {k: v for k, v in sample.items() if k in names_ours})
        for name, x, y in zip(candidates, a, b):
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            if x.shape != y.shape or np.max(np.abs(x - y), initial=0.0) > SAME_VALUES * max(np.max(np.abs(x),
                                                                                                 initial=0.0), 1e-30):
                same.discard(name)
    return _scales(quant, same | fed)


def _scales(quant, names) -> dict:
    """TensorQuantOverrides giving onnxruntime our scale (zero point 0) for each of `names`."""
    return {t: [{"scale": np.array(quant.scales[t], np.float32), "zero_point": np.array(0, np.int8)}]
            for t in sorted(names) if t in quant.scales}


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of `model` that returns `names` (inner tensors too) as outputs, typed by shape inference."""
    copy = onnx.shape_inference.infer_shapes(model)
    typed = {vi.name: vi for vi in list(copy.graph.value_info) + list(copy.graph.output)}
    declared = {o.name for o in copy.graph.output}
    for name in names:
        if name not in declared:
            copy.graph.output.append(typed[name] if name in typed else
                                     onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return copy
