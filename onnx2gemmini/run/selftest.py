"""The self-test's case for the emitted programs: one sample input and the emulator's value of every
tensor a step writes (the C self-test and the MLIR step checks compare against these)."""
from __future__ import annotations

import numpy as np

from ..cpu import Quantize
from ..plan import CpuOp, Plan
from .emulator import Emulator


def default_sample(plan: Plan, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic input: uniform over each input's int8 range (so every code is likely)."""
    rng = np.random.default_rng(seed)
    sample = {}
    for tid in plan.inputs:
        t = plan.tensors[tid]
        scale = next((s.params.scale for s in plan.steps
                      if isinstance(s, CpuOp) and isinstance(s.params, Quantize) and s.inputs[0] == tid), 1.0 / 32)
        sample[t.onnx_name] = (rng.uniform(-128.0, 127.0, t.shape) * scale).astype(np.float32)
    return sample


def expected_values(plan: Plan, sample: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """int8 value of every tensor some step writes (and of every model output), by tensor id."""
    emulator = Emulator(plan)
    buffers = emulator.run(sample, keep=True)
    written = {tid for step in plan.steps for tid in step.writes()} | set(plan.outputs)
    return {tid: np.asarray(emulator.get(buffers, tid)) for tid in sorted(written)}


def selftest_case(plan: Plan, sample: dict[str, np.ndarray] | None = None):
    """(sample, expected values) for write_c / the MLIR step checks."""
    sample = default_sample(plan) if sample is None else sample
    return sample, expected_values(plan, sample)
