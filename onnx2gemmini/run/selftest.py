"""The self-test's case for the emitted programs: one sample input and the emulator's value of every
tensor a step writes (the C self-test and the MLIR step checks compare against these).

The sample is a real calibration sample when the compile had one: seeded noise makes a detector's outputs
all zero, or a constant model's all one saturated value, and a PASS on such outputs proves nothing. The
compile says so when even the sample it embeds gives degenerate outputs (`sample_warnings`)."""
from __future__ import annotations

import numpy as np

from ..cpu import Embedding, InputMaskedSoftmax, MaskRows, Quantize
from ..data import padding_masks
from ..plan import CpuOp, Plan
from .emulator import Emulator

# More than this share of an output's values at -128 or 127 and the self-test compares mostly clipped values.
SATURATED_SHARE = 0.5


def index_limit(plan: Plan, tid: str) -> int:
    """How many rows the tables an integer input indexes have (the smallest; 1 when it indexes none)."""
    rows = [plan.constants[s.inputs[1]].shape[s.params.axis] for s in plan.steps
            if isinstance(s, CpuOp) and isinstance(s.params, Embedding) and s.inputs[0] == tid]
    return min(rows, default=1)


def masks(plan: Plan, tid: str) -> bool:
    """Whether an integer input is an attention mask (read by a masked softmax or a row mask)."""
    return any(isinstance(s, CpuOp) and isinstance(s.params, (InputMaskedSoftmax, MaskRows)) and s.inputs[1] == tid
               for s in plan.steps)


def default_sample(plan: Plan, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic input: uniform over each input's int8 range (so every code is likely); integer ids
    uniform over the rows of the tables they index; an attention mask pads after a random length."""
    rng = np.random.default_rng(seed)
    sample = {}
    for tid in plan.inputs:
        t = plan.tensors[tid]
        if t.dtype != "float32" and masks(plan, tid):  # each sequence padded after at least one position
            sample[t.onnx_name] = padding_masks(rng, t.shape, t.dtype)
            continue
        if t.dtype != "float32":
            sample[t.onnx_name] = rng.integers(0, index_limit(plan, tid), t.shape).astype(t.dtype)
            continue
        scale = next((s.params.scale for s in plan.steps
                      if isinstance(s, CpuOp) and isinstance(s.params, Quantize) and s.inputs[0] == tid), 1.0 / 32)
        sample[t.onnx_name] = (rng.uniform(-128.0, 127.0, t.shape) * scale).astype(np.float32)
    return sample


def calibration_sample(plan: Plan, data) -> dict[str, np.ndarray] | None:
    """The first sample of `data` (a Dataset of real calibration inputs) shaped as the plan's inputs, or None."""
    if data is None or data.num_samples == 0:
        return None
    sample = {}
    for tid in plan.inputs:
        t = plan.tensors[tid]
        if t.onnx_name not in data.inputs:
            return None
        sample[t.onnx_name] = np.asarray(data.inputs[t.onnx_name][0], t.dtype).reshape(t.shape).copy()
    return sample


def degenerate(values: np.ndarray) -> str | None:
    """Why an output (int8, or float32 where kept float) proves little as a self-test's expected value, or
    None. A single value is never "all equal"."""
    flat = np.asarray(values).ravel()
    if flat.size == 0:
        return None
    if flat.size > 1 and (flat == flat[0]).all():
        value = f"{int(flat[0])}" if flat.dtype.kind in "iu" else f"{float(flat[0]):g}"
        return "all zero" if flat[0] == 0 else f"all equal ({value})"
    if flat.dtype.kind not in "iu":
        return None
    saturated = float(np.mean((flat == 127) | (flat == -128)))
    if saturated > SATURATED_SHARE:
        return f"{saturated:.0%} saturated at -128/127"
    return None


def sample_warnings(plan: Plan, sample: dict[str, np.ndarray], what: str) -> list[str]:
    """One warning per model output the self-test sample (`what`: where it comes from) leaves degenerate."""
    out = Emulator(plan).run(sample)
    warnings = []
    for tid in plan.outputs:
        why = degenerate(out[tid])
        if why:
            name = plan.tensors[tid].onnx_name or tid
            warnings.append(f"self-test sample ({what}): output '{name}' is {why}, so a PASS of the generated "
                            "programs compares little; calibrate with real data (--calib) for a sample that "
                            "exercises the model")
    return warnings


def expected_values(plan: Plan, sample: dict[str, np.ndarray], tensors=None) -> dict[str, np.ndarray]:
    """int8 value of every tensor some step writes (and of every model output), by tensor id; only those of
    `tensors` if given. Each is copied as its buffer is complete, and the emulator drops what no later step
    needs: a large model's self-test holds the values it checks, not every activation."""
    emulator = Emulator(plan)
    written = {tid for step in plan.steps for tid in step.writes()} | set(plan.outputs)
    wanted = sorted(written if tensors is None else written & set(tensors))
    due, hold = emulator.checkpoints([[tid] for tid in wanted])
    values: dict[str, np.ndarray] = {}

    def visit(k: int, buffers) -> None:
        for n in due.get(k, ()):
            values[wanted[n]] = np.array(emulator.get(buffers, wanted[n]))
    emulator.run(sample, visit=visit, hold=hold)
    return {tid: values[tid] for tid in wanted}


def selftest_case(plan: Plan, sample: dict[str, np.ndarray] | None = None, tensors=None):
    """(sample, expected values) for write_c / the MLIR step checks (of `tensors`; None: every one)."""
    sample = default_sample(plan) if sample is None else sample
    return sample, expected_values(plan, sample, tensors)
