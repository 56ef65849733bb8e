"""Where libgemmini puts a CISC loop's scratchpad operands, and the tile geometry behind them.

Why separate: the unroller turns these numbers into addresses and the fast hazard check turns them into
row intervals; both must agree with libgemmini to the row. Source: libgemmini 5b1254a gemmini.cc,
loop_ws (L701-708) and loop_conv_ws (L1116-1130).
"""
from __future__ import annotations

from dataclasses import dataclass

from .loops import ConvLoop, MatmulLoop, ceil_div


@dataclass(frozen=True)
class ConvLayout:
    a_start: int    # first scratchpad row of the input tile
    b_start: int    # first scratchpad row of the weights
    irows: int      # input rows/cols of the tile, padding included (before downsampling)
    icols: int
    ds: int         # 1 when every other input row/col is skipped at load time
    a_block: int    # rows per input-channel block: batches * DS(irows) * DS(icols)
    b_block: int    # rows per output-channel block: krows * kcols * kchs
    pixels: int     # max_pixels_per_row as loop_conv_ws decodes it (0 means 1)
    in_blocks: int  # DIM-channel blocks of the input tile / of the weights' output channels
    out_blocks: int

    @property
    def a_end(self) -> int:
        return self.a_start + self.a_block * self.in_blocks


def conv_layout(loop: ConvLoop, config) -> ConvLayout:
    s, dim, half = loop.shape, config.dim, config.sp_rows // 2
    irows = loop.orows * s.stride + loop.krows - 1
    icols = loop.ocols * s.stride + loop.kcols - 1
    ds = int(s.downsample)
    b_block = loop.krows * loop.kcols * loop.kchs
    out_blocks = ceil_div(loop.pochs, dim)
    b_rows = out_blocks * b_block
    return ConvLayout(a_start=half if loop.a_spad_id == 2 else 0,
                      b_start=config.sp_rows - b_rows if loop.b_spad_id == 2 else half - b_rows,
                      irows=irows, icols=icols, ds=ds,
                      a_block=loop.batches * (irows >> ds) * (icols >> ds), b_block=b_block,
                      pixels=max(loop.max_pixels_per_row, 1), in_blocks=ceil_div(loop.kchs, dim),
                      out_blocks=out_blocks)


def matmul_starts(loop: MatmulLoop, config) -> tuple[int, int]:
    """(A, B) start rows of a non-resadd loop_ws: A at 0 or half, B right below half or at the top."""
    half, b_rows = config.sp_rows // 2, loop.K * loop.J * config.dim
    return (half if loop.a_spad_id == 2 else 0,
            config.sp_rows - b_rows if loop.b_spad_id == 2 else half - b_rows)
