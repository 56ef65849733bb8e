"""gemmini.h's outer loops: one plan step -> the configs and CISC loops its call issues, in order.

Why a record per loop: a hazard lives between loops (a reused operand, a load that spills into another
operand's rows), so the unroller, the machine and the fast hazard check all start from the same list of
loops, with exactly gemmini.h's tiles, operand offsets, pads, spad ids and NULL (reused) operands.
Source: gemmini-rocc-tests dev 180c468 include/gemmini.h — tiled_matmul_outer (L692-835), tiled_conv
(L2168-2452) with sp_tiled_conv (L1348-1440), tiled_conv_dw (L2455-2635), tiled_resadd (L3202) with
sp_tiled_resadd (L3135), tiled_global_average (L3376) with sp_tiled_global_average (L3332). DRAM offsets
are in elements of their operand; None is gemmini.h's NULL. Tiles are the step's own (or the `tiles`
argument), else gemmini.h's heuristic; tiles gemmini.h would refuse (GEMMINI_ASSERTIONS) raise ValueError.

Bookkeeping fields that are not operands of the hardware instruction: `a_source`/`b_source` (the loop
whose A/B load this loop's computes read: itself, or the loader of a reused operand) and `out_tile` (the
output tile whose partial sums the loop accumulates).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import product

import numpy as np

from ..plan import RELU, Conv, ConvDw, GlobalAverage, Matmul, Resadd
from ..tiling import (
    ConvGeometry,
    baseline_conv_tiles,
    baseline_global_average_tile,
    baseline_matmul_tiles,
    baseline_resadd_tiles,
)
from .isa import ConfigEx, ConfigLd, ConfigSt

MATMUL_TILES = ("tile_I", "tile_J", "tile_K")
CONV_TILES = ("batches", "porows", "pocols", "pochs", "krows", "kcols", "kchs")
DW_TILES = ("batches", "porows", "pocols", "krows", "kcols")
RESADD_TILES = ("tile_I", "tile_J")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class MatmulLoop:
    """One gemmini_loop_ws (gemmini.h L349): I/J/K in DIM blocks, pads in elements, strides in elements."""
    I: int
    J: int
    K: int
    pad_I: int
    pad_J: int
    pad_K: int
    A: int | None
    B: int | None
    D: int | None
    C: int | None
    A_stride: int
    B_stride: int
    D_stride: int
    C_stride: int
    ex_accumulate: bool
    act: int
    a_spad_id: int
    b_spad_id: int
    is_resadd: bool
    a_source: int
    b_source: int
    out_tile: int
    full_C: bool = False  # mvouts read the accumulators at full width (int32 C)


@dataclass(frozen=True)
class ConvShape:
    """The operands of gemmini_loop_conv_ws (gemmini.h L360) that are the same for every loop of a call."""
    batch_size: int
    in_row_dim: int
    in_col_dim: int
    in_channels: int
    out_channels: int
    out_row_dim: int
    out_col_dim: int
    pool_out_row_dim: int
    pool_out_col_dim: int
    stride: int
    padding: int
    kernel_dim: int
    pool_size: int
    pool_stride: int
    pool_padding: int
    in_stride: int
    weight_stride: int
    out_stride: int
    no_bias: bool
    no_pool: bool
    downsample: bool
    act: int
    dw: bool


@dataclass(frozen=True)
class ConvLoop:
    """One gemmini_loop_conv_ws as sp_tiled_conv issues it (orows/ocols exclude the pool padding)."""
    shape: ConvShape
    batches: int
    porows: int
    pocols: int
    pochs: int
    krows: int
    kcols: int
    kchs: int
    lpad: int
    rpad: int
    upad: int
    dpad: int
    plpad: int
    prpad: int
    pupad: int
    pdpad: int
    orows: int
    ocols: int
    input: int | None
    weights: int | None
    bias: int | None
    output: int | None
    max_pixels_per_row: int
    a_spad_id: int
    b_spad_id: int
    a_source: int
    b_source: int
    out_tile: int


@dataclass(frozen=True)
class AverageTile:
    """One sp_tiled_global_average (gemmini.h L3332): plain mvins and mvouts, no CISC loop."""
    input: int
    output: int
    channels: int
    dim: int
    tile_size: int
    out_tile: int


@dataclass(frozen=True)
class Call:
    """A gemmini.h call: the configs it issues first, then its loops in order."""
    setup: tuple
    loops: tuple


def tiles_tuple(names: tuple[str, ...], tiles) -> tuple[int, ...]:
    if isinstance(tiles, dict):
        return tuple(int(tiles[n]) for n in names)
    return tuple(int(t) for t in tiles)


def _dispatch(step, builders):
    for cls, fn in zip((Matmul, Conv, ConvDw, Resadd, GlobalAverage), builders):
        if isinstance(step, cls):
            return fn
    raise TypeError(f"{type(step).__name__} is not a Gemmini step")


def call_of(step, config, tiles=None) -> Call:
    """The call a Gemmini plan step becomes (tiles: explicit, else the step's, else gemmini.h's)."""
    return _dispatch(step, (matmul_call, conv_call, conv_dw_call, resadd_call, global_average_call))(
        step, config, tiles)


def tiles_of(step, config, tiles=None):
    """The step's tiles as its call uses them, checked as gemmini.h checks them (ValueError if refused)."""
    return _dispatch(step, (matmul_tiles, conv_tiles, conv_dw_tiles, resadd_tiles, global_average_tile))(
        step, config, tiles)


def _sources(loads: list[tuple[int, bool]]) -> list[int]:
    """For (spad id, loads?) per loop: the loop whose load each loop reads (the last one into its id)."""
    last, out = {}, []
    for idx, (spad_id, loads_it) in enumerate(loads):
        if loads_it:
            last[spad_id] = idx
        out.append(last.get(spad_id, -1))
    return out


def _with_sources(rows: list[dict], cls) -> tuple:
    a_src = _sources([(r["a_spad_id"], r["A" if cls is MatmulLoop else "input"] is not None) for r in rows])
    b_src = _sources([(r["b_spad_id"], r["B" if cls is MatmulLoop else "weights"] is not None) for r in rows])
    return tuple(cls(**r, a_source=a, b_source=b) for r, a, b in zip(rows, a_src, b_src))


# --- tiled_matmul (WS) ---------------------------------------------------------------------------

def check_matmul_tiles(step: Matmul, tiles: tuple[int, int, int], config) -> None:
    """tiled_matmul's GEMMINI_ASSERTIONS (L1117-1196); libgemmini's loop_ws makes the same check."""
    dim, half_sp, half_acc = config.dim, config.sp_rows // 2, config.acc_rows // 2
    ti, tj, tk = tiles
    if min(tiles) <= 0:
        raise ValueError(f"{step.node}: matmul tiles must be positive, got {tiles}")
    for t, d, n in zip(tiles, (step.I, step.J, step.K), "IJK"):
        if t * dim > ceil_div(d, dim) * dim:
            raise ValueError(f"{step.node}: tile_{n} is too large (tile_{n} * DIM > dim_{n}_padded)")
    if (ti * tk + tk * tj) * dim > half_sp:
        raise ValueError(f"{step.node}: tiles {tiles}: not enough space in scratchpad to store A and B")
    if ti * tj * dim > half_acc:
        raise ValueError(f"{step.node}: tiles {tiles}: not enough space in accumulator to store C")


def matmul_tiles(step: Matmul, config, tiles=None) -> tuple[int, int, int]:
    tiles = tiles or step.tiles
    t = tiles_tuple(MATMUL_TILES, tiles) if tiles else baseline_matmul_tiles(step.I, step.J, step.K, config)
    check_matmul_tiles(step, t, config)
    return t


def matmul_call(step: Matmul, config, tiles=None) -> Call:
    dim = config.dim
    t = matmul_tiles(step, config, tiles)
    ti, tj, tk = t
    padded = [ceil_div(d, dim) * dim for d in (step.I, step.J, step.K)]
    n0 = [ceil_div(p, x * dim) for p, x in zip(padded, t)]
    last = [x if p % (x * dim) == 0 else (p // dim) % x for p, x in zip(padded, t)]
    pads = [p - d for p, d in zip(padded, (step.I, step.J, step.K))]
    I0, J0, K0 = n0
    no_bias = step.D is None
    a_reuse, b_reuse = I0 * K0 <= 2, J0 * K0 <= 2
    setup = (ConfigEx(a_stride=1),
             ConfigSt(stride=step.stride_C, act=step.act & 3, scale=step.scale),
             ConfigLd(0, step.stride_A, 1.0, False, dim),
             ConfigLd(1, step.stride_B, 1.0, False, dim),
             ConfigLd(2, 0 if step.repeating_bias else step.stride_D * 4, 1.0, False, dim))
    rows = []
    for i0 in range(I0):
        for j0 in range(J0):
            for k0 in range(K0):
                bias_row = 0 if step.repeating_bias else i0 * ti * dim
                d = None if no_bias or k0 else bias_row * step.stride_D + j0 * tj * dim
                rows.append({
                    "I": ti if i0 < I0 - 1 else last[0], "J": tj if j0 < J0 - 1 else last[1],
                    "K": tk if k0 < K0 - 1 else last[2],
                    "pad_I": pads[0] if i0 == I0 - 1 else 0, "pad_J": pads[1] if j0 == J0 - 1 else 0,
                    "pad_K": pads[2] if k0 == K0 - 1 else 0,
                    "A": None if a_reuse and j0 >= 1 else i0 * ti * dim * step.stride_A + k0 * tk * dim,
                    "B": None if b_reuse and i0 >= 1 else k0 * tk * dim * step.stride_B + j0 * tj * dim,
                    "D": d, "C": i0 * ti * dim * step.stride_C + j0 * tj * dim if k0 == K0 - 1 else None,
                    "A_stride": step.stride_A, "B_stride": step.stride_B,
                    "D_stride": 0 if step.repeating_bias else step.stride_D, "C_stride": step.stride_C,
                    "ex_accumulate": not no_bias or k0 != 0, "act": step.act,
                    "a_spad_id": (1 if i0 + k0 == 0 else 2) if a_reuse else 0,
                    "b_spad_id": (1 if j0 + k0 == 0 else 2) if b_reuse else 0,
                    "is_resadd": False, "out_tile": i0 * J0 + j0, "full_C": step.full_C})
    return Call(setup, _with_sources(rows, MatmulLoop))


# --- tiled_conv / tiled_conv_dw ------------------------------------------------------------------

def conv_rows(tiles, stride: int, downsample: bool, pool: tuple[int, int, int], config) -> tuple[int, int]:
    """tiled_conv_total_spad_rows (L1791) without dilation or transposes: (A+B rows, C rows)."""
    batches, porows, pocols, ochs, krows, kcols, kchs = tiles
    size, pstride, _ = pool
    dim, ds = config.dim, int(downsample)
    orows, ocols = porows * pstride + size - 1, pocols * pstride + size - 1
    irows, icols = orows * stride + krows - 1, ocols * stride + kcols - 1
    a_rows = ceil_div(kchs, dim) * batches * (irows >> ds) * (icols >> ds)
    b_rows = ceil_div(ochs, dim) * kcols * krows * kchs
    return a_rows + b_rows, ceil_div(ochs, dim) * batches * orows * ocols


def _check_conv_tiles(node: str, tiles, g: ConvGeometry, downsample: bool, config) -> None:
    """tiled_conv's / tiled_conv_dw's GEMMINI_ASSERTIONS (L2241-2283, L2507-2540)."""
    if min(tiles) <= 0:
        raise ValueError(f"{node}: conv tiles must be positive, got {tiles}")
    spad, acc = conv_rows(tiles, g.stride, downsample, g.pool, config)
    if spad > config.sp_rows // 2:
        raise ValueError(f"{node}: tiles {tiles}: not enough scratchpad space to store inputs and weights, {spad}")
    if acc > config.acc_rows // 2:
        raise ValueError(f"{node}: tiles {tiles}: not enough accumulator space to store outputs")
    if g.kernel_dim <= g.padding:
        raise ValueError(f"{node}: kernel_dim must be larger than padding")


def max_pixels_per_row(kchs: int, kcols: int, downsample: bool, config) -> int:
    """sp_tiled_conv L1405-1414 (HAS_FIRST_LAYER_OPTIMIZATIONS): kernel columns packed per spad row."""
    if not config.has_first_layer_optimizations or downsample or kchs > config.dim:
        return 1
    return min(config.dim // kchs, kcols)


def _conv_tile(shape: ConvShape, b, porow, pocol, krow, kcol, tiles) -> dict:
    """The per-tile arithmetic tiled_conv (L2336-2410) and tiled_conv_dw (L2550-2596) share."""
    batches, porows, pocols, _, krows, kcols, _ = tiles
    s = shape
    k, stride, pad = s.kernel_dim, s.stride, s.padding
    size, pstride, ppad = s.pool_size, s.pool_stride, s.pool_padding
    orow, ocol = porow * pstride - ppad, pocol * pstride - ppad
    irow = max(orow, 0) * stride + krow - pad
    icol = max(ocol, 0) * stride + kcol - pad
    porows_ = min(porows, s.pool_out_row_dim - porow)
    pocols_ = min(pocols, s.pool_out_col_dim - pocol)
    krows_, kcols_ = min(krows, k - krow), min(kcols, k - kcol)
    orows_, ocols_ = porows_ * pstride + size - 1, pocols_ * pstride + size - 1
    plpad, pupad = max(-ocol, 0), max(-orow, 0)
    prpad = max(ocol + ocols_ - s.out_col_dim, 0)
    pdpad = max(orow + orows_ - s.out_row_dim, 0)
    icols_ = (ocols_ - plpad - prpad) * stride + kcols_ - 1
    irows_ = (orows_ - pupad - pdpad) * stride + krows_ - 1
    lpad, upad = max(-icol, 0), max(-irow, 0)
    rpad = max(icol + icols_ - s.in_col_dim, 0)
    dpad = max(irow + irows_ - s.in_row_dim, 0)
    return {"shape": shape, "batches": min(batches, s.batch_size - b), "porows": porows_, "pocols": pocols_,
            "krows": krows_, "kcols": kcols_, "lpad": lpad, "rpad": rpad, "upad": upad, "dpad": dpad,
            "plpad": plpad, "prpad": prpad, "pupad": pupad, "pdpad": pdpad,
            "orows": orows_ - pupad - pdpad, "ocols": ocols_ - plpad - prpad,
            "input": (b * s.in_row_dim * s.in_col_dim + (irow + upad) * s.in_col_dim + icol + lpad) * s.in_stride}


def _shape(g: ConvGeometry, step, in_stride, weight_stride, out_stride, downsample, dw) -> ConvShape:
    size, pstride, ppad = g.pool
    pr, pc = g.pool_out_dims
    return ConvShape(g.batch_size, g.in_row_dim, g.in_col_dim, g.in_channels, g.out_channels, g.out_row_dim,
                     g.out_col_dim, pr, pc, g.stride, g.padding, g.kernel_dim, size, pstride, ppad, in_stride,
                     weight_stride, out_stride, step.bias is None, g.no_pool, downsample, step.act, dw)


def conv_geometry(step: Conv) -> ConvGeometry:
    """ConvGeometry.of(step), spelled out: the planner's hazard check calls it per tile candidate."""
    return ConvGeometry(batch_size=step.batch_size, in_row_dim=step.in_row_dim, in_col_dim=step.in_col_dim,
                        in_channels=step.in_channels, out_channels=step.out_channels, out_row_dim=step.out_row_dim,
                        out_col_dim=step.out_col_dim, stride=step.stride, padding=step.padding,
                        kernel_dim=step.kernel_dim, input_dilation=step.input_dilation,
                        kernel_dilation=step.kernel_dilation, pool_size=step.pool_size,
                        pool_stride=step.pool_stride, pool_padding=step.pool_padding)


def conv_tiles(step: Conv, config, tiles=None) -> tuple[int, ...]:
    g = conv_geometry(step)
    if g.input_dilation != 1 or g.kernel_dilation != 1:
        raise ValueError(f"{step.node}: dilated convs are not modelled")
    tiles = tiles or step.tiles
    t = tiles_tuple(CONV_TILES, tiles) if tiles else baseline_conv_tiles(g, config)
    _check_conv_tiles(step.node, t, g, g.downsample, config)
    return t


def conv_reuse(step: Conv, tiles) -> tuple[bool, bool, int]:
    """tiled_conv's operand pinning (L2296-2318): (a_reuse, b_reuse, number of distinct input tiles)."""
    batches, porows, pocols, pochs, krows, kcols, kchs = tiles
    pr, pc = step.pool_out_dims
    k = step.kernel_dim
    n_kch, n_poch = ceil_div(step.in_channels, kchs), ceil_div(step.out_channels, pochs)
    n_kernel = ceil_div(k, krows) * ceil_div(k, kcols)
    inputs = n_kch * n_kernel * ceil_div(step.batch_size, batches) * ceil_div(pr, porows) * ceil_div(pc, pocols)
    return inputs <= 2, n_kch * n_poch * n_kernel <= 2, inputs


def conv_call(step: Conv, config, tiles=None) -> Call:
    g = conv_geometry(step)
    t = conv_tiles(step, config, tiles)
    a_reuse, b_reuse, _ = conv_reuse(step, t)
    shape = _shape(g, step, step.in_stride, g.out_channels, step.out_stride, g.downsample, False)
    batches, porows, pocols, pochs, krows, kcols, kchs = t
    s, k, ic, oc = shape, g.kernel_dim, g.in_channels, g.out_channels
    pr, pc = s.pool_out_row_dim, s.pool_out_col_dim
    setup = (ConfigSt(stride=s.out_stride, act=step.act, scale=step.scale),
             ConfigEx(a_stride=g.stride >> int(g.downsample), c_stride=1))
    rows = []
    outer = product(range(0, g.batch_size, batches), range(0, pr, porows), range(0, pc, pocols), range(0, oc, pochs))
    for tile, (b, porow, pocol, poch) in enumerate(outer):
        for krow, kcol, kch in product(range(0, k, krows), range(0, k, kcols), range(0, ic, kchs)):
            r = _conv_tile(s, b, porow, pocol, krow, kcol, t)
            kchs_ = min(kchs, ic - kch)
            last = krow + krows >= k and kcol + kcols >= k and kch + kchs >= ic
            weights = (krow * k * ic + kcol * ic + kch) * oc + poch
            r.update(pochs=min(pochs, oc - poch), kchs=kchs_,
                     input=None if a_reuse and poch > 0 else r["input"] + kch,
                     weights=None if b_reuse and pocol + porow + b > 0 else weights,
                     bias=poch if krow == 0 and kcol == 0 and kch == 0 else None,
                     output=(b * pr * pc + porow * pc + pocol) * s.out_stride + poch if last else None,
                     max_pixels_per_row=max_pixels_per_row(kchs_, r["kcols"], g.downsample, config),
                     a_spad_id=(1 if kch + krow + kcol + b + porow + pocol == 0 else 2) if a_reuse else 0,
                     b_spad_id=(1 if kch + poch + krow + kcol == 0 else 2) if b_reuse else 0,
                     out_tile=tile)
            rows.append(r)
    return Call(setup, _with_sources(rows, ConvLoop))


def dw_geometry(step: ConvDw) -> ConvGeometry:
    """tiled_conv_dw_auto's view of a depthwise conv: one channel in, one out. Its heuristic counts rows
    with downsample off, which ConvGeometry.downsample only allows for even input dims: an odd row count
    turns it off without changing any row count."""
    return ConvGeometry(step.batch_size, step.in_row_dim | 1, step.in_col_dim, 1, 1, step.out_row_dim,
                        step.out_col_dim, step.stride, step.padding, step.kernel_dim, pool_size=step.pool_size,
                        pool_stride=step.pool_stride, pool_padding=step.pool_padding)


def conv_dw_tiles(step: ConvDw, config, tiles=None) -> tuple[int, ...]:
    """The 7-tuple tiled_conv_dw works with (pochs = kchs = 1)."""
    g = dw_geometry(step)
    if tiles:
        batches, porows, pocols, krows, kcols = tiles_tuple(DW_TILES, tiles)
        t = (batches, porows, pocols, 1, krows, kcols, 1)
    else:
        t = baseline_conv_tiles(g, config)
    _check_conv_tiles(step.node, t, g, False, config)
    return t


def conv_dw_call(step: ConvDw, config, tiles=None) -> Call:
    t = conv_dw_tiles(step, config, tiles)
    g = dataclasses.replace(dw_geometry(step), in_row_dim=step.in_row_dim, in_channels=step.channels,
                            out_channels=step.channels)
    c = step.channels
    shape = _shape(g, step, c, 1, c, False, True)
    s, k = shape, step.kernel_dim
    batches, porows, pocols, _, krows, kcols, _ = t
    pr, pc = s.pool_out_row_dim, s.pool_out_col_dim
    setup = (ConfigSt(stride=c, act=step.act, scale=step.scale), ConfigEx(a_stride=step.stride, c_stride=1))
    rows = []
    outer = product(range(0, step.batch_size, batches), range(0, pr, porows), range(0, pc, pocols), range(c))
    for tile, (b, porow, pocol, ch) in enumerate(outer):
        for krow, kcol in product(range(0, k, krows), range(0, k, kcols)):
            r = _conv_tile(s, b, porow, pocol, krow, kcol, t)
            last = krow + krows >= k and kcol + kcols >= k
            r.update(pochs=1, kchs=1, input=r["input"] + ch, weights=(ch * k + krow) * k + kcol,
                     bias=ch if krow == 0 and kcol == 0 else None,
                     output=(b * pr * pc + porow * pc + pocol) * c + ch if last else None,
                     max_pixels_per_row=max_pixels_per_row(1, r["kcols"], False, config),
                     a_spad_id=0, b_spad_id=0, out_tile=tile)
            rows.append(r)
    return Call(setup, _with_sources(rows, ConvLoop))


# --- tiled_resadd / tiled_global_average ---------------------------------------------------------

def resadd_tiles(step: Resadd, config, tiles=None) -> tuple[int, int]:
    """(tile_I, tile_J) in elements; libgemmini's loop_ws refuses blocks beyond half the accumulator
    (gemmini.cc L696-699)."""
    dim = config.dim
    tile_I, tile_J = tiles_tuple(RESADD_TILES, tiles) if tiles else baseline_resadd_tiles(step.I, step.J, config)
    if min(tile_I, tile_J) <= 0 or ceil_div(tile_I, dim) * dim * ceil_div(tile_J, dim) > config.acc_rows // 2:
        raise ValueError(f"{step.node}: resadd tiles ({tile_I}, {tile_J}) do not fit half the accumulator")
    return tile_I, tile_J


def resadd_call(step: Resadd, config, tiles=None) -> Call:
    dim, stride = config.dim, step.J
    tile_I, tile_J = resadd_tiles(step, config, tiles)
    setup = (ConfigSt(stride=stride, act=RELU if step.relu else 0, scale=step.C_scale),
             ConfigEx(a_stride=1),
             ConfigLd(0, stride, step.A_scale, True, dim),
             ConfigLd(1, stride, step.B_scale, True, dim))
    rows = []
    for i in range(0, step.I, tile_I):
        for j in range(0, step.J, tile_J):
            ti, tj = min(tile_I, step.I - i), min(tile_J, step.J - j)
            at = i * stride + j
            rows.append({"I": ceil_div(ti, dim), "J": ceil_div(tj, dim), "K": 0, "pad_I": -ti % dim,
                         "pad_J": -tj % dim, "pad_K": 0, "A": at, "B": at, "D": None, "C": at, "A_stride": stride,
                         "B_stride": stride, "D_stride": 0, "C_stride": stride, "ex_accumulate": False,
                         "act": int(step.relu), "a_spad_id": 0, "b_spad_id": 0, "is_resadd": True,
                         "out_tile": len(rows)})
    return Call(setup, _with_sources(rows, MatmulLoop))


def global_average_tile(step: GlobalAverage, config, tiles=None) -> int:
    tile = int(tiles["channel_tile_size"]) if tiles else baseline_global_average_tile(step.channels, config)
    if tile <= 0 or ceil_div(tile, config.dim) > config.acc_rows:
        raise ValueError(f"{step.node}: channel tile {tile} does not fit the accumulator")
    return tile


def global_average_call(step: GlobalAverage, config, tiles=None) -> Call:
    tile = global_average_tile(step, config, tiles)
    c, d = step.channels, step.dim
    setup = (ConfigLd(0, config.dim, 1.0, True, 1),
             ConfigEx(a_stride=1),
             ConfigSt(stride=0, act=0, scale=float(np.float32(1.0 / (d * d)))))
    loops = []
    for batch in range(step.batches):
        for ch in range(0, c, tile):
            loops.append(AverageTile(batch * d * d * c + ch, batch * c + ch, c, d, min(tile, c - ch), len(loops)))
    return Call(setup, tuple(loops))
