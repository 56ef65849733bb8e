"""Address-level execution of Gemmini calls, and the scratchpad hazards it exposes.

Why: the emulator (run/emulator.py) computes each call as a whole, which is right only if gemmini.h's
loops never let one operand overwrite another inside the scratchpad. They can: with fewer than DIM input
channels a conv loads several pixels per scratchpad row, and libgemmini's mvin also writes the rows below
the tile, where pinned weights may live (spec/gemmini.md §3.10). This package executes a step as
Gemmini's functional model does — gemmini.h's loops (loops.py), libgemmini's unrolling (unroll.py), a
tagged scratchpad and accumulator (machine.py) — and gives the planner a fast, exact check (hazards.py).

    execute(step, inputs, constants, config, tiles=None, semantics="spike") -> int8 output
    run(...)          -> Result(output, hazards, instructions)
    find_hazards(step, config, tiles=None, semantics="spike") -> [Hazard]
    PlanRunner(plan, semantics).run(inputs)  (every Gemmini step at address level, CPU steps emulated)

`semantics`: "spike" = libgemmini (the functional model), "rtl" = Gemmini's RTL where the two differ.
"""
from __future__ import annotations

import numpy as np

from .hazard import Hazard
from .hazards import find_hazards
from .plan_run import PlanRunner
from .program import Program, Result

__all__ = ["Hazard", "PlanRunner", "Program", "Result", "execute", "find_hazards", "run"]


def run(step, inputs: dict[str, np.ndarray], constants, config, tiles=None, semantics: str = "spike") -> Result:
    """One Gemmini step on a fresh machine: its output, the hazards seen, the instruction count.
    `inputs`/`constants` hold the step's operands by tensor id (dense, as the emulator holds them)."""
    return Program(config, semantics).call(step, {**constants, **inputs}, tiles)


def execute(step, inputs: dict[str, np.ndarray], constants, config, tiles=None,
            semantics: str = "spike") -> np.ndarray:
    """The step's int8 output computed at address level (what the functional model / RTL produces)."""
    return run(step, inputs, constants, config, tiles, semantics).output
