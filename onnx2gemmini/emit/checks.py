"""What the emitted programs check against the emulator, step by step (the C self-test, the MLIR step
checks): shared so both back ends check the same tensors with the same tolerances."""
from __future__ import annotations

from dataclasses import dataclass

from ..plan import CpuOp, Plan, Step
from ..tolerance import EXACT, Tolerance


@dataclass(frozen=True)
class Check:
    """One tensor the self-test compares with the emulator after a step, then resets to the emulator's
    values."""

    step: int
    tensor: str
    tolerance: Tolerance


def c_tolerance(step: Step) -> Tolerance:
    """How far a step's C execution may be from the emulator: a CPU kernel's own statement (libm), bit for
    bit for Gemmini calls (the emulator is Gemmini's arithmetic)."""
    return step.params.c_exactness if isinstance(step, CpuOp) else EXACT


def selftest_checks(plan: Plan, every_step: bool) -> list[Check]:
    """What the self-test compares. By default the outputs of the steps whose C kernels may differ (each
    then resynchronized, so the steps after it run on the emulator's values) and the model outputs at the
    end; with `every_step` the outputs of every step (CHECK_LAYERS=1: a failure names its step).
    The checks compare int8 values, and float32 ones where an output is kept float: a full_C matmul's int32
    accumulators are checked through the step that reads them (an LSTM/GRU recurrence, always checked)."""
    checks, seen = [], set()
    for i, step in enumerate(plan.steps):
        tol = c_tolerance(step)
        if every_step or tol != EXACT:
            for tid in step.writes():
                if plan.tensors[tid].dtype not in ("int8", "float32"):
                    continue
                checks.append(Check(i, tid, tol))
                seen.add(tid)
    last = len(plan.steps) - 1
    checks += [Check(last, tid, EXACT) for tid in plan.outputs if tid not in seen]
    return checks
