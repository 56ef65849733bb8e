"""Gemmini's primitive instructions, as libgemmini (gemmini.cc) executes them: the unit the machine runs.

Why records and not rs1/rs2 words: every field below is what libgemmini decodes from those words, so the
unroller (unroll.py) and the machine (machine.py) share one meaning without encoding and decoding it.
NamedTuples, because a layer unrolls to hundreds of thousands of them.
Two liberties, both bookkeeping that the hardware does not see:
* a DRAM address is an (operand, element offset) pair into the step's NumPy arrays; `None` is address 0,
  which libgemmini's mvin reads as zeros (gemmini.cc mvin: `is_zeros = dram_addr == 0`);
* ownership tags: each load names the tag its cells get and each read names the tag it expects, so the
  machine can tell which load last wrote a cell that a compute or mvout reads (see `spad_tag`).

Local addresses are libgemmini's 32-bit ones (LocalAddr.scala; gemmini.cc mvin/mvout/compute): bit 31 =
accumulator, bit 30 = accumulate (on writes), bit 29 = full-width read; GARBAGE = all ones.
"""
from __future__ import annotations

from typing import NamedTuple

GARBAGE = 0xFFFF_FFFF
ACC = 1 << 31
ACCUMULATE = 1 << 30
FULL = 1 << 29
ROW_MASK = 0x1FFF_FFFF        # mvin / compute output rows: bits [31:29] stripped (gemmini.cc L122, L632)
MVOUT_ROW_MASK = 0x3FF_FFFF   # mvout rows: bits [31:26] stripped (gemmini.cc mvout)

# gemmini_params.h as GemminiArrayConfig.generateHeader writes it (GemminiConfigs.scala L350-362): MAX_BYTES
# is a constant 64 whatever the DMA width, and a block length never drops below 1.
MAX_BYTES = 64


def max_block_len(config) -> int:
    """MAX_BLOCK_LEN: DIM-wide int8 blocks one mvin may move."""
    return MAX_BYTES // config.dim if config.dim <= MAX_BYTES else 1


def max_block_len_acc(config) -> int:
    """MAX_BLOCK_LEN_ACC: DIM-wide int32 blocks one accumulator mvin may move."""
    return MAX_BYTES // (4 * config.dim) if 4 * config.dim <= MAX_BYTES else 1


# --- ownership tags ------------------------------------------------------------------------------
# 0 = never written. Scratchpad cells: which loop's A (input) or B (weights) load wrote them.
# Accumulator cells: which output tile's partial sums they hold (bias loads and computes of one tile).

ROLES = ("A", "B")


def spad_tag(loop: int, role: str) -> int:
    """The tag of `loop`'s load of `role`; -1 (matches no cell) when no loop loaded it."""
    return 1 + 2 * loop + ROLES.index(role) if loop >= 0 else -1


def acc_tag(out_tile: int) -> int:
    return 1 + out_tile


def describe_spad_tag(tag: int) -> str:
    if tag <= 0:
        return "nothing" if tag == 0 else "an earlier call"
    loop, role = divmod(tag - 1, 2)
    return f"the {ROLES[role]} load of loop {loop}"


def describe_acc_tag(tag: int) -> str:
    if tag <= 0:
        return "nothing" if tag == 0 else "an earlier call"
    return f"output tile {tag - 1}"


# --- configuration -------------------------------------------------------------------------------

class ConfigEx(NamedTuple):
    """config_ex: WS, the strides the array steps A reads and C writes by (gemmini.cc L408-409)."""
    a_stride: int = 1
    c_stride: int = 1


class ConfigLd(NamedTuple):
    """config_ld for mvin slot `slot` (0: mvin, 1: mvin2, 2: mvin3); `stride` in DRAM bytes."""
    slot: int
    stride: int
    scale: float = 1.0
    shrunk: bool = False
    block_stride: int = 0
    pixels: int = 1


class ConfigSt(NamedTuple):
    """config_st; `scale` None re-sends the current one (loop_conv_ws's pooled mvouts do). The pooling
    fields keep only the bits libgemmini decodes (2 bits for stride/size/pads, 8 for the counts)."""
    stride: int
    act: int
    scale: float | None
    pool_stride: int = 0
    pool_size: int = 0
    pool_out_dim: int = 0
    porows: int = 0
    pocols: int = 0
    orows: int = 0
    ocols: int = 0
    upad: int = 0
    lpad: int = 0


# --- data movement and compute (`loop` = index of the CISC loop in its call, -1 for the call's setup) ---

class Mvin(NamedTuple):
    slot: int
    operand: str
    offset: int | None
    addr: int
    rows: int
    cols: int
    loop: int
    tag: int
    expect: int | None = None    # accumulating mvins: the tag the cells they add onto must hold


class Mvout(NamedTuple):
    operand: str
    offset: int
    addr: int
    rows: int
    cols: int
    loop: int
    expect: int


class Preload(NamedTuple):
    """preload (WS): B is read into the array by the next compute_preloaded, C is where results go."""
    b: int
    c: int
    b_rows: int
    b_cols: int
    c_rows: int
    c_cols: int
    loop: int
    b_expect: int
    c_tag: int
    c_expect: int | None         # accumulating outputs: the tag the cells they add onto must hold


class Compute(NamedTuple):
    """compute_preloaded (`preloaded`) / compute_accumulated, WS, BD = GARBAGE as every WS loop passes."""
    a: int
    a_rows: int
    a_cols: int
    preloaded: bool
    loop: int
    a_expect: int
