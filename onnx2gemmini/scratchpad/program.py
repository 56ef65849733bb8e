"""One Gemmini program: the calls of consecutive plan steps on one machine, at address level.

Why a program and not a call: libgemmini's state outlives a call (scratchpad contents, configuration,
loop_conv_ws's static accumulator rows), so calls of one generated program share it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dram import dram_of
from .hazard import Hazard
from .loops import call_of
from .machine import Machine
from .unroll import AccRows, unroll


@dataclass(frozen=True)
class Result:
    output: np.ndarray          # the step's int8 output, dense, in the emulator's shape
    hazards: list[Hazard]       # what the machine saw read from the wrong load
    instructions: int           # primitive instructions executed


class Program:
    def __init__(self, config, semantics: str = "spike"):
        self.config = config
        self.machine = Machine(config, semantics)
        self.acc_rows = AccRows()

    def call(self, step, arrays: dict[str, np.ndarray], tiles=None) -> Result:
        """Run one Gemmini step; `arrays` holds its operands by tensor id (activations and constants)."""
        program = unroll(call_of(step, self.config, tiles), self.config, self.acc_rows)
        dram, read = dram_of(step, arrays)
        hazards = self.machine.run(program, dram)
        return Result(read(), hazards, len(program))
