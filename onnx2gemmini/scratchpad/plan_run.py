"""A whole plan with every Gemmini step executed at address level (but the normalizer's SOFTMAX read-out) and
CPU steps by the emulator.

Why subclass the emulator: it already owns buffers, views and slices; only the Gemmini steps change, and
they run in one Program, so libgemmini's state carries from call to call as in the generated program.
"""
from __future__ import annotations

from ..normalizer import SOFTMAX
from ..plan import Plan
from ..run.emulator import Emulator
from .hazard import Hazard
from .program import Program


class PlanRunner(Emulator):
    def __init__(self, plan: Plan, semantics: str = "spike"):
        super().__init__(plan)
        self.program = Program(plan.config, semantics)
        self.hazards: dict[str, list[Hazard]] = {}     # by step node, for the steps that had any

    def execute_step(self, step, buffers):
        if step.target != "gemmini" or getattr(step, "act", 0) == SOFTMAX:  # the normalizer: not modelled here
            return super().execute_step(step, buffers)
        arrays = {tid: self.get(buffers, tid) for tid in step.reads()}
        result = self.program.call(step, arrays)
        if result.hazards:
            self.hazards[step.node] = result.hazards
        return [result.output]
