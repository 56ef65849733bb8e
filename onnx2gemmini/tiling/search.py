"""Tile search: among the legal tiles that move no more DMA bytes than gemmini.h's own, the fewest
estimated cycles; within CYCLE_SLACK of those, the fewest bytes.

Why cycles first, under a byte cap: the issue is an array that idles (docs/cost_model.md, "Checked
against SCALE-Sim"); the exact bytes still bound every choice (never above gemmini.h's, which is always a
candidate) and decide between tilings the estimate hardly tells apart. Deterministic: ties end on the
tile tuple itself.

Why it is fast without missing the byte optimum: bytes depend on a dimension's tile *count*, not on the
tile size, so for each count only the smallest tile giving it (ceil(total/n)) is enumerated — at most
2*sqrt(total) values; the remaining dimensions are then pushed to the largest size that fits (closed
form), plus the "balanced" size with the same count. Channel tiles are multiples of DIM (a partial block
costs a whole accumulator/scratchpad block anyway).
"""
from __future__ import annotations

from .baseline import baseline_conv_tiles, baseline_matmul_tiles
from .capacity import budgets, conv_fits, matmul_fits
from .cost import conv_cost, conv_traffic, matmul_cost, matmul_traffic
from .geometry import ConvGeometry, ceil_div, distinct_tile_sizes

CYCLE_SLACK = 0.02        # candidates within 2% of the fewest estimated cycles compete on bytes
POOL_FIELD_MAX = 255      # config_st's 8-bit row/col counts, used by the hardware pooling path


def _pick(byte_costs: dict, baseline: tuple, cycles, allowed=None) -> tuple:
    """The tiles with the fewest estimated cycles among the `allowed` candidates (all by default) that
    move no more bytes than gemmini.h's own choice; within CYCLE_SLACK of those cycles, the fewest bytes;
    then the fewest cycles, then the smallest tuple (deterministic).

    Why cycles first: bytes-first left the array idle where a few more (still below-baseline) bytes buy
    a much better-fed array (docs/cost_model.md, "Checked against SCALE-Sim"); the slack keeps the
    bytes low wherever the cycle estimate hardly tells the candidates apart.
    """
    limit = byte_costs[baseline]
    within = {t: b for t, b in byte_costs.items() if b <= limit}
    if allowed is not None:
        within = {t: b for t, b in within.items() if allowed(t)}
        if not within:   # gemmini.h's own tiles are hazardous and nothing below its bytes is safe:
            safe = {t: b for t, b in byte_costs.items() if allowed(t)}   # cap at the fewest safe bytes
            if not safe:
                raise ValueError("no tiles are free of scratchpad hazards")
            within = {t: b for t, b in safe.items() if b == min(safe.values())}
    cyc = {t: cycles(t) for t in within}
    best = min(cyc.values())
    near = [t for t in within if cyc[t] <= best * (1 + CYCLE_SLACK)]
    return min(near, key=lambda t: (within[t], cyc[t], t))


# --- matmul -------------------------------------------------------------------------------------

def matmul_candidates(I: int, J: int, K: int, config) -> set[tuple[int, int, int]]:
    """Every (tile_I, tile_J) count pair that fits the accumulator, each with the largest tile_K that
    fits the scratchpad and the balanced tile_K of the same count."""
    dim = config.dim
    bi, bj, bk = ceil_div(I, dim), ceil_div(J, dim), ceil_div(K, dim)
    max_spad, max_acc = budgets(config)
    found = set()
    for ti in distinct_tile_sizes(bi):
        if ti * dim > max_acc:
            continue
        for tj in distinct_tile_sizes(bj):
            if ti * tj * dim > max_acc:
                continue
            tk = min(bk, max_spad // ((ti + tj) * dim))
            if tk >= 1:
                found.add((ti, tj, tk))
                found.add((ti, tj, ceil_div(bk, ceil_div(bk, tk))))
    return found


def choose_matmul_tiles(I: int, J: int, K: int, config, has_bias: bool = True, allowed=None,
                        out_bytes: int = 1) -> tuple[int, int, int]:
    """(tile_I, tile_J, tile_K) in DIM blocks for tiled_matmul (WS), within the double-buffered budgets;
    `allowed(tiles)`: a further filter (hazard-free tiles only); `out_bytes`: 4 for int32 C (full_C)."""
    baseline = baseline_matmul_tiles(I, J, K, config)
    cands = matmul_candidates(I, J, K, config) | {baseline}
    byte_costs = {t: matmul_traffic(I, J, K, t, config, has_bias, out_bytes)["total"] for t in cands
                  if t == baseline or matmul_fits(t, config, (I, J, K))}
    return _pick(byte_costs, baseline,
                 lambda t: matmul_cost(I, J, K, t, config, has_bias, out_bytes)["est_cycles"], allowed)


# --- conv ---------------------------------------------------------------------------------------

def _channel_tiles(channels: int, dim: int) -> list[int]:
    """Channel tiles worth trying: for each count of DIM blocks per tile, that many blocks (capped)."""
    return sorted({min(channels, b * dim) for b in distinct_tile_sizes(ceil_div(channels, dim))},
                  reverse=True)


def _channel_ladder(channels: int, dim: int) -> list[int]:
    """kchs candidates: all channels, then halving block counts down to one block. Input channels only
    change the bytes through operand pinning (1 or 2 tiles); smaller ones only free scratchpad."""
    blocks, out = ceil_div(channels, dim), set()
    while True:
        out.add(min(channels, blocks * dim))
        if blocks == 1:
            return sorted(out, reverse=True)
        blocks = ceil_div(blocks, 2)


def _max_pocols(g: ConvGeometry, config, batches, porows, pochs, krows, kcols, kchs) -> int:
    """The largest pocols that fits with the other six fixed (closed form of conv_rows, then checked)."""
    pool_size, pool_stride, _ = g.pool
    dim, ds, s, idil = config.dim, int(g.downsample), g.stride, g.input_dilation
    max_spad, max_acc = budgets(config)
    orows = porows * pool_stride + pool_size - 1
    cpb, kcb = ceil_div(pochs, dim), ceil_div(kchs, dim)
    ocols_acc = max_acc // (cpb * batches * orows)
    krows_d = krows + (g.kernel_dilation - 1) * (krows - 1)
    kcols_d = kcols + (g.kernel_dilation - 1) * (kcols - 1)
    irows = ceil_div(orows * s + krows_d - 1, idil) >> ds
    free = max_spad - cpb * krows * kcols * kchs
    if free <= 0 or irows <= 0:
        return 0
    icols_max = ((free // (kcb * batches * irows)) << ds) + ds
    ocols_spad = (icols_max * idil - kcols_d + 1) // s
    ocols = min(ocols_acc, ocols_spad)
    if not g.no_pool:
        ocols = min(ocols, POOL_FIELD_MAX)
    pocols = min(g.pool_out_dims[1], (ocols - pool_size + 1) // pool_stride)
    while pocols >= 1 and not conv_fits((batches, porows, pocols, pochs, krows, kcols, kchs), g, config):
        pocols -= 1
    return pocols


def conv_candidates(geometry, config) -> set[tuple[int, ...]]:
    """Legal conv tiles the search considers (see the module docstring for why these suffice)."""
    g = ConvGeometry.of(geometry)
    base = baseline_conv_tiles(g, config)   # its kernel and channel tiles seed the candidate lists
    n, pr, pc, oc, k, _, ic = g.max_tiles
    pool_size, pool_stride, _ = g.pool
    dim = config.dim
    found = set()
    for batches in distinct_tile_sizes(n):
        for krows in sorted({k, base[4]}, reverse=True):
            for kcols in sorted({k, base[5]}, reverse=True):
                for kchs in sorted(set(_channel_ladder(ic, dim)) | {base[6]}, reverse=True):
                    for pochs in _channel_tiles(oc, dim):
                        for porows in distinct_tile_sizes(pr):
                            if not g.no_pool and porows * pool_stride + pool_size - 1 > POOL_FIELD_MAX:
                                continue
                            pocols = _max_pocols(g, config, batches, porows, pochs, krows, kcols, kchs)
                            if pocols < 1:
                                continue
                            for cols in {pocols, ceil_div(pc, ceil_div(pc, pocols))}:
                                found.add((batches, porows, cols, pochs, krows, kcols, kchs))
    return found


def choose_conv_tiles(geometry, config, has_bias: bool = True, allowed=None) -> tuple[int, ...]:
    """(batches, porows, pocols, pochs, krows, kcols, kchs) for tiled_conv, within the double-buffered
    budgets (gemmini.h's accounting); `allowed(tiles)`: a further filter (hazard-free tiles only)."""
    g = ConvGeometry.of(geometry)
    baseline = baseline_conv_tiles(g, config)       # raises when no tile fits at all
    byte_costs = {t: conv_traffic(g, t, has_bias)["total"] for t in conv_candidates(g, config)}
    byte_costs[baseline] = conv_traffic(g, baseline, has_bias)["total"]
    return _pick(byte_costs, baseline, lambda t: conv_cost(g, t, config, has_bias)["est_cycles"], allowed)
