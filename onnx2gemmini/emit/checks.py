"""What the emitted programs check against the emulator, step by step (the C self-test, the MLIR step
checks): shared so both back ends check the same tensors with the same tolerances."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import limits
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


def layer_checks(plan: Plan, every: list[Check]) -> list[Check]:
    """`every` (the checks of every step, CHECK_LAYERS=1) within the `layer_check_bytes` limit: all of them
    when their expected values fit; otherwise those of the first steps whose values fit, then only the
    default checks (the inexact kernels' outputs, resynchronized, and the model outputs), so the self-test
    still passes exactly. SAM's image encoder would otherwise embed 17 GiB of per-step values."""
    budget, total = limits.current().layer_check_bytes, 0
    for check in every:
        t = plan.tensors[check.tensor]
        total += int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
        if total > budget:
            outputs = set(plan.outputs)
            return [c for c in every if c.step < check.step or c.tolerance != EXACT or c.tensor in outputs]
    return every


def layers_title(every: list[Check], layers: list[Check]) -> str:
    """selftest_layers.S's title: what its values are (every step's, or cut by layer_check_bytes)."""
    if len(layers) == len(every):
        return "selftest_layers.S: the emulator's value of every step's output (CHECK_LAYERS=1)"
    kept = {id(c) for c in layers}
    cut = next(c.step for c in every if id(c) not in kept)
    return (f"selftest_layers.S: the emulator's value of the outputs of steps 0 to {cut - 1} and of the default "
            f"checks after them (CHECK_LAYERS=1; every step's would exceed the layer_check_bytes limit of "
            f"{limits.current().layer_check_bytes} bytes, --limit layer_check_bytes=N raises it)")


def checked_tensors(plan: Plan) -> set[str]:
    """The tensors whose emulator values the C self-test embeds (the default checks, CHECK_LAYERS=1's and
    the model outputs): all run/selftest.expected_values needs to keep."""
    checks = selftest_checks(plan, False) + layer_checks(plan, selftest_checks(plan, True))
    return {c.tensor for c in checks} | set(plan.outputs)
