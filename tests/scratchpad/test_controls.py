"""Negative controls (a wrong address or a missing load must change the bytes and be reported), the
refusals gemmini.h makes, and libgemmini's accumulator rows carried from call to call."""
from __future__ import annotations

import numpy as np
import pytest

from onnx2gemmini.config import PRESETS
from onnx2gemmini.scratchpad import find_hazards
from onnx2gemmini.scratchpad.dram import dram_of
from onnx2gemmini.scratchpad.isa import ACC, GARBAGE, Mvin, Mvout, Preload
from onnx2gemmini.scratchpad.loops import call_of
from onnx2gemmini.scratchpad.machine import Machine
from onnx2gemmini.scratchpad.program import Program
from onnx2gemmini.scratchpad.unroll import AccRows, unroll
from tests.scratchpad.cases import conv_case

DEFAULT = PRESETS["default"]


def _execute(step, inputs, consts, program):
    dram, read = dram_of(step, {**inputs, **consts})
    hazards = Machine(DEFAULT).run(program, dram)
    return read(), hazards


def _program(step, tiles=None):
    return unroll(call_of(step, DEFAULT, tiles), DEFAULT, AccRows())


def test_unaltered_program_gives_the_emulator_bytes():
    step, inputs, consts, ref = conv_case(1, 1, 12, 12, 3, 24, 3, 1, 1)
    out, hazards = _execute(step, inputs, consts, _program(step))
    assert hazards == [] and np.array_equal(out, ref)


def test_shifted_weight_address_changes_the_bytes_and_is_reported():
    step, inputs, consts, ref = conv_case(1, 1, 12, 12, 3, 24, 3, 1, 1)
    program = [ins._replace(b=ins.b - 1) if type(ins) is Preload and ins.b != GARBAGE else ins
               for ins in _program(step)]
    out, hazards = _execute(step, inputs, consts, program)
    assert not np.array_equal(out, ref)
    assert hazards and {h.operand for h in hazards} == {"B"}


def test_missing_input_load_reads_cells_nobody_wrote():
    step, inputs, consts, ref = conv_case(2, 1, 12, 12, 3, 24, 3, 1, 1)
    program = _program(step)
    last_input = max(n for n, ins in enumerate(program)
                     if type(ins) is Mvin and ins.operand == "input" and ins.offset is not None)
    out, hazards = _execute(step, inputs, consts, program[:last_input] + program[last_input + 1:])
    assert not np.array_equal(out, ref)
    assert [(h.operand, h.writer) for h in hazards] == [("A", "nothing")]


def test_mvout_of_another_tiles_rows_is_reported():
    """A conv's output tiles use the accumulator halves in turn; the second tile's mvouts pointed at
    the first tile's half read partial sums of output tile 0."""
    step, inputs, consts, ref = conv_case(3, 1, 12, 12, 3, 24, 3, 1, 1)
    half = DEFAULT.acc_rows // 2
    program = [ins._replace(addr=ins.addr - half) if type(ins) is Mvout and ins.loop == 1 else ins
               for ins in _program(step, (1, 12, 12, 16, 3, 3, 3))]
    out, hazards = _execute(step, inputs, consts, program)
    assert not np.array_equal(out, ref)
    assert [(h.loop, h.operand, h.writer) for h in hazards] == [(1, "C", "output tile 0")]


def test_refused_tiles_and_semantics():
    step, *_ = conv_case(0, 1, 28, 28, 1, 32, 3, 1, 1, pool=(2, 2, 0))
    with pytest.raises(ValueError, match="not enough accumulator space"):
        find_hazards(step, DEFAULT, (1, 14, 14, 32, 3, 3, 1))
    with pytest.raises(ValueError, match="semantics"):
        find_hazards(step, DEFAULT, semantics="verilator")


def test_conv_accumulator_rows_alternate_across_calls():
    """loop_conv_ws moves its bias/output rows by ACC_ROWS/2 per output tile, and the state survives
    the call: a second call starts where the first left off."""
    half = DEFAULT.acc_rows // 2
    step, inputs, consts, _ = conv_case(4, 1, 12, 12, 3, 24, 3, 1, 1)
    tiles = (1, 12, 4, 24, 3, 3, 3)                  # three output tiles
    program = Program(DEFAULT)
    program.call(step, {**inputs, **consts}, tiles)
    assert (program.acc_rows.d, program.acc_rows.c) == (half, half)
    second = unroll(call_of(step, DEFAULT, tiles), DEFAULT, program.acc_rows)
    first_bias = next(ins for ins in second if type(ins) is Mvin and ins.slot == 2)
    assert first_bias.addr == ACC + half
