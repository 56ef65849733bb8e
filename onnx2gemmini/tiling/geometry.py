"""The problem shapes the tiler works on: a conv as gemmini.h's `tiled_conv` sees it, and tile spans.

Why a separate view: gemmini.h normalises a conv before tiling it (no pool becomes pool 1/1/0, a 1x1
stride-2 unpadded conv on even dims becomes a "downsample" conv) and every other tiling module needs
exactly the same normalisation. Keeping it here means the baseline, the capacity check, the cost model,
the search and the tile-by-tile executor cannot disagree about it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

# Tile names, in gemmini.h's order (tiled_matmul's tile_I/J/K; tiled_conv's 7-tuple `args`).
MATMUL_TILE_NAMES = ("tile_I", "tile_J", "tile_K")
CONV_TILE_NAMES = ("batches", "porows", "pocols", "pochs", "krows", "kcols", "kchs")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def spans(total: int, tile: int) -> list[tuple[int, int]]:
    """(start, size) of each tile when `total` is cut into tiles of `tile` (the last may be short)."""
    return [(s, min(tile, total - s)) for s in range(0, total, tile)]


def distinct_tile_sizes(total: int) -> list[int]:
    """Every tile size that gives a different tile count: ceil(total/n) for n = 1..total, descending.

    There are at most 2*sqrt(total) of them, and for each tile count the smallest such tile is the one
    that wastes least; the search only ever needs these.
    """
    sizes, n = [], 1
    while n <= total:
        t = ceil_div(total, n)
        sizes.append(t)
        n = ceil_div(total, t - 1) if t > 1 else total + 1
        # the next n whose ceil(total/n) is smaller than t
    return sizes


@dataclass(frozen=True)
class ConvGeometry:
    """The shape parameters of one `tiled_conv` call (field names as in plan.Conv and gemmini.h)."""

    batch_size: int
    in_row_dim: int
    in_col_dim: int
    in_channels: int
    out_channels: int
    out_row_dim: int
    out_col_dim: int
    stride: int = 1
    padding: int = 0
    kernel_dim: int = 1
    input_dilation: int = 1
    kernel_dilation: int = 1
    pool_size: int = 0
    pool_stride: int = 0
    pool_padding: int = 0

    @classmethod
    def of(cls, obj) -> "ConvGeometry":
        """A ConvGeometry from itself, a plan.Conv step or anything with the same attribute names."""
        if isinstance(obj, cls):
            return obj
        return cls(**{f.name: int(getattr(obj, f.name)) for f in fields(cls) if hasattr(obj, f.name)})

    @property
    def no_pool(self) -> bool:
        return self.pool_stride == 0

    @property
    def pool(self) -> tuple[int, int, int]:
        """(pool_size, pool_stride, pool_padding) as tiled_conv uses them: no pool is 1/1/0."""
        return (1, 1, 0) if self.no_pool else (self.pool_size, self.pool_stride, self.pool_padding)

    @property
    def pool_out_dims(self) -> tuple[int, int]:
        size, stride, pad = self.pool
        return ((self.out_row_dim + 2 * pad - size) // stride + 1,
                (self.out_col_dim + 2 * pad - size) // stride + 1)

    @property
    def downsample(self) -> bool:
        """tiled_conv's fast path: every other input row/col is skipped at load time (spec §3.3)."""
        return (self.stride == 2 and self.kernel_dim == 1 and self.in_row_dim % 2 == 0
                and self.in_col_dim % 2 == 0 and self.padding == 0 and self.no_pool
                and self.input_dilation == 1)

    @property
    def max_tiles(self) -> tuple[int, ...]:
        """The whole problem as a tile: gemmini.h's `max_args` (and the heuristic's starting point)."""
        pr, pc = self.pool_out_dims
        k = self.kernel_dim
        return (self.batch_size, pr, pc, self.out_channels, k, k, self.in_channels)

    @property
    def macs(self) -> int:
        return (self.batch_size * self.out_row_dim * self.out_col_dim * self.out_channels
                * self.kernel_dim * self.kernel_dim * self.in_channels)


def tiles_dict(names: tuple[str, ...], tiles) -> dict[str, int]:
    return {n: int(v) for n, v in zip(names, tiles)}


def tiles_tuple(names: tuple[str, ...], tiles) -> tuple[int, ...]:
    """A tile tuple from a dict keyed by gemmini.h's names, or from any sequence in that order."""
    if isinstance(tiles, dict):
        return tuple(int(tiles[n]) for n in names)
    return tuple(int(v) for v in tiles)
