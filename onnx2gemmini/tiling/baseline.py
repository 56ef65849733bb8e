"""gemmini.h's own tiling heuristics, transcribed step for step: the baseline every choice is held to.

Why a transcription and not "something similar": the report's `baseline_*` figures promise what
`tiled_*_auto` would do on the same layer (CONTRACTS.md), and the search guarantees it never moves more
bytes than this baseline. Sources: spec/gemmini.md §3.1 (tiled_matmul_auto, WS), §3.3
(tiled_conv_stride_auto), §3.6 (tiled_resadd_stride_auto), §3.7 (tiled_global_average_auto), cross-checked
against gemmini-rocc-tests `dev` 180c468 include/gemmini.h. Integer arithmetic as in the C (size_t/int).
"""
from __future__ import annotations

from math import isqrt

from .capacity import budgets, conv_rows, matmul_rows, resadd_acc_rows
from .geometry import ConvGeometry, ceil_div


def baseline_matmul_tiles(I: int, J: int, K: int, config) -> tuple[int, int, int]:
    """tiled_matmul_auto's (tile_I, tile_J, tile_K) in DIM blocks for WS (double-buffered), act not
    LAYERNORM/SOFTMAX: start from the db_max_* caps, then grow J, I, K by one while each fits."""
    dim = config.dim
    bi, bj, bk = ceil_div(I, dim), ceil_div(J, dim), ceil_div(K, dim)
    max_spad, max_acc = budgets(config)
    db_mats_in_partition = (config.sp_rows // 2 // 2) // dim   # a quarter of the scratchpad, in blocks
    db_mats_in_acc = (config.acc_rows // 2) // dim
    db_max_tile_i_j = isqrt(db_mats_in_acc)                   # (size_t)sqrt(...)
    db_max_tile_k = db_mats_in_partition // db_max_tile_i_j
    ti, tj, tk = min(bi, db_max_tile_i_j), min(bj, db_max_tile_i_j), min(bk, db_max_tile_k)
    while True:
        increased = False
        spad, acc = matmul_rows((ti, tj + 1, tk), config)
        if spad <= max_spad and acc <= max_acc and tj + 1 <= bj:
            tj, increased = tj + 1, True
        spad, acc = matmul_rows((ti + 1, tj, tk), config)
        if spad <= max_spad and acc <= max_acc and ti + 1 <= bi:
            ti, increased = ti + 1, True
        spad, _ = matmul_rows((ti, tj, tk + 1), config)   # the C does not check the acc for K
        if spad <= max_spad and tk + 1 <= bk:
            tk, increased = tk + 1, True
        if not increased:
            return ti, tj, tk


def _fits(args, g: ConvGeometry, config) -> bool:
    spad, acc = conv_rows(args, g, config)
    max_spad, max_acc = budgets(config)
    return spad <= max_spad and acc <= max_acc


def baseline_conv_tiles(geometry, config) -> tuple[int, ...]:
    """tiled_conv_stride_auto's (batches, porows, pocols, pochs, krows, kcols, kchs), spec §3.3.

    1. Start from the whole problem; while over budget, shrink the largest element (ties: the first),
       never pocols while it is <= DIM and porows > 1; channels drop to the next multiple of DIM
       (or by DIM; never below 1), everything else by 1.
    2. Grow pocols by 1 while it fits.  3. Try +1 on each element in order, until nothing grows.
    """
    g = ConvGeometry.of(geometry)
    dim = config.dim
    args = list(g.max_tiles)
    max_args = g.max_tiles
    orows_idx, ocols_idx, och_idx, ich_idx = 1, 2, 3, 6
    while not _fits(args, g, config):
        if max(args) == 1:   # gemmini.h would shrink a tile to 0 here and then never terminate
            raise ValueError(f"no conv tile fits config '{config.name}' (even all-ones needs "
                             f"{conv_rows(args, g, config)} spad/acc rows): {g}")
        max_val, max_idx = -1, -1
        for i, v in enumerate(args):
            if not (i == ocols_idx and v <= dim and args[orows_idx] > 1) and v > max_val:
                max_val, max_idx = v, i
        if max_idx in (och_idx, ich_idx):
            v = args[max_idx]
            v = (v // dim) * dim if v % dim else v - dim
            args[max_idx] = v if v else 1
        else:
            args[max_idx] -= 1
    while args[ocols_idx] + 1 <= max_args[ocols_idx]:
        cand = list(args)
        cand[ocols_idx] += 1
        if not _fits(cand, g, config):
            break
        args = cand
    grown = True
    while grown:
        grown = False
        for i in range(len(args)):
            cand = list(args)
            cand[i] += 1
            if cand[i] <= max_args[i] and _fits(cand, g, config):
                args, grown = cand, True
    return tuple(args)


def baseline_resadd_tiles(I: int, J: int, config) -> tuple[int, int]:
    """tiled_resadd_stride_auto's (tile_I, tile_J) in elements (spec §3.6)."""
    ti, tj = I, J
    while resadd_acc_rows(ti, tj, config) > config.acc_rows // 2:
        if ti >= tj or tj <= config.dim:
            ti //= 2
        else:
            tj -= config.dim
    return ti, tj


def baseline_global_average_tile(channels: int, config) -> int:
    """tiled_global_average_auto's channel_tile_size: all channels while their rows fit the accumulator."""
    tile = channels
    while ceil_div(tile, config.dim) > config.acc_rows:
        tile -= 1
    return tile
