"""What a scratchpad/accumulator hazard is, and how observations of one are merged into a report.

Why one record for both the machine and the fast check: the planner trusts find_hazards only because the
tests show it reports exactly what the address-level machine observes, so both speak this one type.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Hazard:
    """Loop `loop` of a call read `operand` cells in `rows` (first, last) whose data came from `writer`
    instead of the load (or the output tile) it expects. Operands: "A" (input / A) and "B" (weights / B)
    in the scratchpad, "C" (partial sums) in the accumulator."""

    loop: int
    operand: str
    rows: tuple[int, int]
    writer: str
    instruction: int | None = field(default=None, compare=False)   # first offending instruction (machine)

    def __str__(self) -> str:
        memory = "accumulator" if self.operand == "C" else "scratchpad"
        lo, hi = self.rows
        at = "" if self.instruction is None else f" (instruction {self.instruction})"
        return (f"loop {self.loop} reads {self.operand} from {memory} rows {lo}..{hi}, "
                f"last written by {self.writer}{at}")


class HazardLog:
    """Observations (loop, operand, writer, rows) merged per (loop, operand, writer): the row span and
    the first instruction that saw it."""

    def __init__(self):
        self._seen: dict[tuple[int, str, str], list] = {}

    def add(self, loop: int, operand: str, writer: str, lo: int, hi: int, instruction: int | None = None):
        key = (loop, operand, writer)
        if key not in self._seen:
            self._seen[key] = [lo, hi, instruction]
        else:
            span = self._seen[key]
            span[0], span[1] = min(span[0], lo), max(span[1], hi)

    def hazards(self) -> list[Hazard]:
        return sorted(Hazard(loop, operand, (lo, hi), writer, n)
                      for (loop, operand, writer), (lo, hi, n) in self._seen.items())
