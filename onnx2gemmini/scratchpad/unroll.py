"""libgemmini's expansion of each CISC loop into primitive instructions, with its exact local addresses.

Why a transcription: a scratchpad hazard is a matter of which rows each instruction touches, so the
addresses must be the functional model's own. Sources: libgemmini 5b1254a gemmini.cc loop_ws (L672-891)
and loop_conv_ws (L1030-1487); gemmini.h 180c468 sp_tiled_global_average (L3332) for the global average,
which issues plain mvins and mvouts. Only what gemmini.h's calls use is covered: WS, no transposes, no
dilation, no rotation, int8 outputs or full_C int32 matmul outputs, int32 biases (no low_D).

loop_conv_ws keeps the accumulator rows of its bias (D) and outputs (C) in two static variables that
move by ACC_ROWS/2 after every loop that loads a bias / stores an output; `AccRows` is that state, and
it persists across the calls of one program.
"""
from __future__ import annotations

from dataclasses import dataclass

from .isa import (
    ACC,
    ACCUMULATE,
    FULL,
    GARBAGE,
    Compute,
    ConfigLd,
    ConfigSt,
    Mvin,
    Mvout,
    Preload,
    acc_tag,
    max_block_len,
    max_block_len_acc,
    spad_tag,
)
from .layout import conv_layout, matmul_starts
from .loops import AverageTile, Call, ConvLoop, MatmulLoop, ceil_div


@dataclass
class AccRows:
    """loop_conv_ws's `static uint32_t D_sp_addr_row, C_sp_addr_row` (gemmini.cc L1122-1123)."""
    d: int = 0
    c: int = 0


def unroll(call: Call, config, rows: AccRows) -> list:
    """Every instruction the call executes on the functional model, in order."""
    out = list(call.setup)
    for idx, loop in enumerate(call.loops):
        if isinstance(loop, ConvLoop):
            _conv(loop, idx, config, rows, out)
        elif isinstance(loop, MatmulLoop):
            (_resadd if loop.is_resadd else _matmul)(loop, idx, config, out)
        else:
            _average(loop, idx, config, out)
    return out


def _edges(n: int, pad: int, dim: int):
    """Rows/cols of block b of n: DIM, except the last block, which loses the padding."""
    return lambda b: dim - (pad if b == n - 1 else 0)


def _matmul(loop: MatmulLoop, idx: int, config, out: list) -> None:
    """loop_ws, not resadd: D blocks, then k -> j -> i with mvin A (j == 0), mvin B (i == 0), compute,
    mvout C (k == K-1)."""
    dim, I, J, K = config.dim, loop.I, loop.J, loop.K
    a_start, b_start = matmul_starts(loop, config)
    rows_i, cols_j, cols_k = _edges(I, loop.pad_I, dim), _edges(J, loop.pad_J, dim), _edges(K, loop.pad_K, dim)
    tile = acc_tag(loop.out_tile)
    a_tag, b_tag = spad_tag(idx, "A"), spad_tag(idx, "B")
    a_exp, b_exp = spad_tag(loop.a_source, "A"), spad_tag(loop.b_source, "B")
    if loop.D is not None:
        for i in range(I):
            for j in range(J):
                out.append(Mvin(2, "D", loop.D + (i * loop.D_stride + j) * dim, ACC + (i * J + j) * dim,
                                rows_i(i), cols_j(j), idx, tile))
    for k in range(K):
        for j in range(J):
            for i in range(I):
                a_sp, b_sp = a_start + (i * K + k) * dim, b_start + (k * J + j) * dim
                c_sp = (ACC | ACCUMULATE | (FULL if loop.full_C else 0)) + (i * J + j) * dim  # as C_sp_addr_start
                if j == 0 and loop.A is not None:
                    out.append(Mvin(0, "A", loop.A + (i * loop.A_stride + k) * dim, a_sp, rows_i(i), cols_k(k),
                                    idx, a_tag))
                if i == 0 and loop.B is not None:
                    out.append(Mvin(1, "B", loop.B + (k * loop.B_stride + j) * dim, b_sp, cols_k(k), cols_j(j),
                                    idx, b_tag))
                accumulate = loop.ex_accumulate or k != 0
                out.append(Preload(b_sp if i == 0 else GARBAGE, c_sp if accumulate else c_sp & ~ACCUMULATE,
                                   cols_k(k), cols_j(j), rows_i(i), cols_j(j), idx, b_exp, tile,
                                   tile if accumulate else None))
                out.append(Compute(a_sp, rows_i(i), cols_k(k), i == 0, idx, a_exp))
                if loop.C is not None and k == K - 1:
                    out.append(Mvout("C", loop.C + (i * loop.C_stride + j) * dim, c_sp, rows_i(i), cols_j(j),
                                     idx, tile))


def _resadd(loop: MatmulLoop, idx: int, config, out: list) -> None:
    """loop_ws with is_resadd: per block, A into the accumulator (overwrite), B onto it, mvout C."""
    dim, I, J = config.dim, loop.I, loop.J
    rows_i, cols_j = _edges(I, loop.pad_I, dim), _edges(J, loop.pad_J, dim)
    tile = acc_tag(loop.out_tile)
    for i in range(I):
        for j in range(J):
            block = (i * J + j) * dim
            out.append(Mvin(0, "A", loop.A + (i * loop.A_stride + j) * dim, ACC + block, rows_i(i), cols_j(j),
                            idx, tile))
            out.append(Mvin(1, "B", loop.B + (i * loop.B_stride + j) * dim, (ACC | ACCUMULATE) + block,
                            rows_i(i), cols_j(j), idx, tile, tile))
            if loop.C is not None:
                out.append(Mvout("C", loop.C + (i * loop.C_stride + j) * dim, (ACC | ACCUMULATE) + block,
                                 rows_i(i), cols_j(j), idx, tile))


def _conv(loop: ConvLoop, idx: int, config, rows: AccRows, out: list) -> None:
    """loop_conv_ws without dilation or transposes: bias, input, weights, compute, mvout (pooled or not)."""
    s, dim, lay = loop.shape, config.dim, conv_layout(loop, config)
    ds = lay.ds
    batches, orows, ocols, ochs, kchs = loop.batches, loop.orows, loop.ocols, loop.pochs, loop.kchs
    irows, icols = lay.irows, lay.icols
    d_start, c_start = ACC + rows.d, (ACC | ACCUMULATE) + rows.c
    if loop.bias is not None:
        rows.d = (rows.d + config.acc_rows // 2) % config.acc_rows
    if loop.output is not None:
        rows.c = (rows.c + config.acc_rows // 2) % config.acc_rows
    tile = acc_tag(loop.out_tile)
    c_block = batches * orows * ocols

    if loop.bias is not None:
        max_ochs = min(ochs, max_block_len_acc(config) * dim)
        out.append(ConfigLd(2, 0, 1.0, False, c_block, 1))
        for b in range(batches):
            for orow in range(orows):
                for ocol in range(0, ocols, dim):
                    for och in range(0, ochs, max_ochs):
                        out.append(Mvin(2, "bias", None if s.no_bias else loop.bias + och,
                                        d_start + (och // dim) * c_block + b * orows * ocols + orow * ocols + ocol,
                                        min(dim, ocols - ocol), min(max_ochs, ochs - och), idx, tile))

    if loop.input is not None:
        max_chs = min(kchs, max_block_len(config) * dim)
        irows_unpadded, icols_unpadded = irows - loop.upad - loop.dpad, icols - loop.lpad - loop.rpad
        drows, dcols = irows >> ds, icols >> ds
        out.append(ConfigLd(0, s.in_stride << ds, 1.0, False, lay.a_block, loop.max_pixels_per_row))
        a_tag = spad_tag(idx, "A")
        for b in range(batches):
            for irow in range(-loop.upad, irows_unpadded + loop.dpad, 1 << ds):
                irow_padded = irow + loop.upad
                icol = -loop.lpad
                while icol < icols_unpadded + loop.rpad:
                    n = min(dim << ds, icols_unpadded - icol)
                    if icol < 0:
                        n = min(dim, -icol)
                    elif icol >= icols_unpadded:
                        n = min(dim, icols_unpadded + loop.rpad - icol)
                    zeros = irow < 0 or irow >= irows_unpadded or icol < 0 or icol >= icols_unpadded
                    for ich in range(0, kchs, max_chs):
                        addr = (lay.a_start + (ich // dim) * lay.a_block + b * drows * dcols
                                + (irow_padded >> ds) * dcols + ((icol + loop.lpad) >> ds))
                        src = None if zeros else loop.input + (
                            (b * s.in_row_dim * s.in_col_dim + irow * s.in_col_dim + icol) * s.in_stride + ich)
                        out.append(Mvin(0, "input", src, addr, n >> ds, min(max_chs, kchs - ich), idx, a_tag))
                    icol += n

    if loop.weights is not None:
        max_chs = min(ochs, max_block_len(config) * dim)
        out.append(ConfigLd(1, 1 if s.dw else s.weight_stride, 1.0, False, lay.b_block, 1))
        b_tag = spad_tag(idx, "B")
        for och in range(0, ochs, max_chs):
            for krow in range(loop.krows):
                for kcol in range(loop.kcols):
                    for kch in range(0, kchs, dim):
                        addr = (lay.b_start + (och // dim) * lay.b_block + krow * loop.kcols * kchs
                                + kcol * kchs + kch)
                        src = loop.weights + (krow * s.kernel_dim + kcol if s.dw else
                                              (krow * s.kernel_dim * s.in_channels + kcol * s.in_channels + kch)
                                              * s.weight_stride + och)
                        out.append(Mvin(1, "weights", src, addr, min(dim, kchs - kch), min(max_chs, ochs - och),
                                        idx, b_tag))

    a_exp, b_exp = spad_tag(loop.a_source, "A"), spad_tag(loop.b_source, "B")
    pixels_max = lay.pixels
    for och in range(0, ochs, dim):
        for krow in range(loop.krows):
            for kcol in range(0, loop.kcols, pixels_max):
                for kch in range(0, kchs, dim):
                    pixels = min(pixels_max, loop.kcols - kcol)
                    b_sp = (lay.b_start + (och // dim) * lay.b_block + krow * loop.kcols * kchs
                            + kcol * kchs + kch)
                    j, k = min(dim, ochs - och), pixels * min(dim, kchs - kch)
                    new_weights = True
                    for b in range(batches):
                        for orow in range(orows):
                            irow = orow * s.stride + krow
                            for ocol in range(0, ocols, dim):
                                icol = ocol * s.stride + kcol
                                c_sp = c_start + (och // dim) * c_block + b * orows * ocols + orow * ocols + ocol
                                a_sp = (lay.a_start + (kch // dim) * lay.a_block + b * (irows >> ds) * (icols >> ds)
                                        + (irow >> ds) * (icols >> ds) + (icol >> ds))
                                i = min(dim, ocols - ocol)
                                out.append(Preload(b_sp if new_weights else GARBAGE, c_sp, k, j, i, j, idx, b_exp,
                                                   tile, tile))
                                out.append(Compute(a_sp, i, k, new_weights, idx, a_exp))
                                new_weights = False

    if loop.output is None:
        return
    if s.no_pool:
        for b in range(batches):
            for orow in range(orows):
                for ocol in range(0, ocols, dim):
                    for och in range(0, ochs, dim):
                        out.append(Mvout("output", loop.output + (
                            (b * s.out_row_dim * s.out_col_dim + orow * s.out_col_dim + ocol) * s.out_stride + och),
                            c_start + (och // dim) * c_block + b * orows * ocols + orow * ocols + ocol,
                            min(dim, ocols - ocol), min(dim, ochs - och), idx, tile))
        return
    act = int(bool(s.act))   # loop_conv_ws decodes the activation into a bool (L1042)
    out.append(ConfigSt(s.out_stride, act, None, s.pool_stride, s.pool_size, s.pool_out_col_dim, loop.porows,
                        loop.pocols, orows, ocols, loop.pupad, loop.plpad))
    for b in range(batches):
        for poch in range(0, ochs, dim):
            out.append(Mvout("output", loop.output + b * s.pool_out_row_dim * s.pool_out_col_dim * s.out_stride + poch,
                             c_start + (poch // dim) * c_block + b * orows * ocols, 0, min(dim, ochs - poch), idx,
                             tile))
    out.append(ConfigSt(s.out_stride, act, None))


def _average(t: AverageTile, idx: int, config, out: list) -> None:
    """sp_tiled_global_average: every pixel's channels into one accumulator row per DIM channels, the
    first pixel overwriting and the rest accumulating, then one mvout per DIM channels."""
    dim = config.dim
    blocks = min(ceil_div(t.tile_size, dim), max_block_len(config))
    tile = acc_tag(t.out_tile)
    for ch in range(0, t.tile_size, blocks * dim):
        for row in range(t.dim):
            for col in range(t.dim):
                first = row == 0 and col == 0
                out.append(Mvin(0, "input", t.input + (row * t.dim + col) * t.channels + ch,
                                (ACC if first else ACC | ACCUMULATE) + ch // dim, 1,
                                min(blocks * dim, t.tile_size - ch), idx, tile, None if first else tile))
    for ch in range(0, t.tile_size, dim):
        out.append(Mvout("output", t.output + ch, ACC + ch // dim, 1, min(dim, t.tile_size - ch), idx, tile))
