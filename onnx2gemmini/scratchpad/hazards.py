"""find_hazards: the planner's fast check, at the granularity of CISC loops and scratchpad rectangles.

Why not run the machine: a ResNet-50 plan has thousands of tile candidates, each a call of up to
millions of instructions. Instead, a provably sufficient pre-screen settles nearly every call in O(1),
and the few calls it cannot settle are replayed loop by loop on rectangles of (rows x columns), in
libgemmini's in-loop order (bias, input, weights, compute, mvout), which is exactly what the machine
observes (the tests compare the two on sweeps).

Pre-screen: a call without an input load at a_spad_id 2 with pixels_per_row > 1 has no hazard under
"spike", and no call has one under "rtl". Proof, for tiles that pass gemmini.h's checks (loops.py refuses
the others, as gemmini.h does):
1. Every load writes only its own operand's region (A: a_start + [0, A_rows), B: b_start + [0, B_rows);
   conv bias and outputs: C_start + [0, C_rows); matmul D/C: rows [0, I*J*DIM)), except that an input
   load with pixels_per_row p > 1 also writes rows a_start-1 .. a_start-(p-1) (machine.py). Those rows
   are kept by libgemmini down to row 0, and dropped by the RTL below the floor of the source row's half,
   which is a_start itself (a_start is 0 or sp_rows/2 and the region lies in one half). So under "rtl"
   no load writes outside its region, and under "spike" only an input load with a_start > 0 and p > 1
   does: a_spad_id 2, which tiled_conv uses only for the second of exactly two input tiles
   (a_reuse); tiled_matmul_outer's and tiled_resadd's loads use p = 1 (they configure their slots
   first), tiled_conv_dw keeps A at row 0, the global average loads only the accumulator. Those rows
   fall inside the B region of id 0/1 just below (B_rows >= kcols >= p).
2. Regions live at the same time are disjoint: A (id 0/1) starts at 0, A (id 2) at sp_rows/2, B (id 0/1)
   ends at sp_rows/2, B (id 2) at sp_rows; A_rows + B_rows <= sp_rows/2 for every loop (gemmini.h's
   capacity check; edge tiles are smaller), and a reused operand has its loader's sizes. In the
   accumulator one output tile at a time is live, within ACC_ROWS/2 rows.
3. Every read lies inside what its expected load wrote: a compute reads A rows of one image row only
   (icol + pixels - 1 <= icols - 1) and preloads read B rows of the loop's kernel tile; a conv tile's
   bias load, a matmul tile's D load or first (overwriting) computes cover every accumulator cell its
   later computes add onto and its mvouts read.
Hence, without a write outside its region, every read sees the load it expects.

The replay tracks which load owns each rectangle (`_Owners`) and, per loop, intersects the loop's reads
with rectangles owned by another load. Reads are the weight rectangles (the union of the preloads is
exactly the whole weight tile, per output-channel block) and, for A, the cells the expected input load
wrote inside its own region: a superset of the A reads, exact here because by 1-2 the only foreign writes
land in B regions.
"""
from __future__ import annotations

from ..plan import Conv
from .hazard import Hazard, HazardLog
from .isa import describe_spad_tag, spad_tag
from .layout import ConvLayout, conv_layout
from .loops import (
    ConvLoop,
    call_of,
    ceil_div,
    conv_geometry,
    conv_reuse,
    max_pixels_per_row,
    tiles_of,
)
from .machine import SEMANTICS

Rect = tuple[int, int, int, int]   # rows [r0, r1) x columns [c0, c1)


def find_hazards(step, config, tiles=None, semantics: str = "spike") -> list[Hazard]:
    """The hazards the machine would report for `step` under `tiles` (else the step's, else gemmini.h's).
    Raises ValueError for tiles gemmini.h refuses."""
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
    t = tiles_of(step, config, tiles)
    if semantics == "rtl" or not isinstance(step, Conv) or not _pinned_input_spills(step, t, config):
        return []
    return _replay(call_of(step, config, t).loops, config)


def _pinned_input_spills(step: Conv, tiles, config) -> bool:
    """Whether tiled_conv loads a second input tile at a_spad_id 2 (a_reuse with exactly two input
    tiles) with more than one pixel per row, whichever of the full or edge kernel/channel tiles it has."""
    a_reuse, _, inputs = conv_reuse(step, tiles)
    if not (a_reuse and inputs == 2):
        return False
    *_, kcols, kchs = tiles
    edges = [(kchs, step.in_channels - kchs * (ceil_div(step.in_channels, kchs) - 1)),
             (kcols, step.kernel_dim - kcols * (ceil_div(step.kernel_dim, kcols) - 1))]
    downsample = conv_geometry(step).downsample
    return any(max_pixels_per_row(ch, cols, downsample, config) > 1 for ch in edges[0] for cols in edges[1])


def _replay(loops, config) -> list[Hazard]:
    """Loop-by-loop ownership of scratchpad rectangles (libgemmini's writes: "spike"); the reads of
    each loop checked against it."""
    owners, log = _Owners(), HazardLog()
    for idx, loop in enumerate(loops):
        lay = conv_layout(loop, config)
        a_cells = _input_cells(loop, lay, config)
        b_cells = _weight_cells(loop, lay, config)
        if loop.input is not None:
            owners.paint(a_cells, spad_tag(idx, "A"))
        if loop.weights is not None:
            owners.paint(b_cells, spad_tag(idx, "B"))
        a_read = [(max(r0, lay.a_start), r1, c0, c1) for r0, r1, c0, c1 in a_cells if r1 > lay.a_start]
        for operand, cells, expect in (("A", a_read, spad_tag(loop.a_source, "A")),
                                       ("B", b_cells, spad_tag(loop.b_source, "B"))):
            for r0, r1, tag in owners.foreign(cells, expect):
                log.add(idx, operand, describe_spad_tag(tag), r0, r1 - 1)
    return log.hazards()


def _input_cells(loop: ConvLoop, lay: ConvLayout, config) -> list[Rect]:
    """What loop_conv_ws's input load writes: each channel block's rows, and with p pixels per row the
    copies p rows earlier (row r - p) and p*kchs columns right, cut at row 0 (libgemmini's mvin)."""
    dim, kchs = config.dim, loop.kchs
    if lay.pixels == 1:
        return [(lay.a_start + blk * lay.a_block, lay.a_start + (blk + 1) * lay.a_block, 0,
                 min(dim, kchs - blk * dim)) for blk in range(lay.in_blocks)]
    cells = [(max(lay.a_start - p, 0), lay.a_end - p, p * kchs, (p + 1) * kchs) for p in range(lay.pixels)]
    return [c for c in cells if c[0] < c[1]]


def _weight_cells(loop: ConvLoop, lay: ConvLayout, config) -> list[Rect]:
    """What the weight load writes and the preloads read: per output-channel block, all its rows."""
    dim = config.dim
    return [(lay.b_start + ob * lay.b_block, lay.b_start + (ob + 1) * lay.b_block, 0,
             min(dim, loop.pochs - ob * dim)) for ob in range(lay.out_blocks)]


def _minus(a: Rect, b: Rect) -> list[Rect]:
    """a without b, as at most four rectangles."""
    r0, r1 = max(a[0], b[0]), min(a[1], b[1])
    c0, c1 = max(a[2], b[2]), min(a[3], b[3])
    if r0 >= r1 or c0 >= c1:
        return [a]
    parts = [(a[0], r0, a[2], a[3]), (r1, a[1], a[2], a[3]), (r0, r1, a[2], c0), (r0, r1, c1, a[3])]
    return [p for p in parts if p[0] < p[1] and p[2] < p[3]]


class _Owners:
    """Disjoint rectangles of the scratchpad, each with the tag of the load that wrote it last."""

    def __init__(self):
        self.rects: list[tuple[Rect, int]] = []

    def paint(self, cells: list[Rect], tag: int) -> None:
        for cell in cells:
            self.rects = [(piece, t) for rect, t in self.rects for piece in _minus(rect, cell)]
            self.rects.append((cell, tag))

    def foreign(self, cells: list[Rect], expect: int) -> list[tuple[int, int, int]]:
        """(r0, r1, tag) of the parts of `cells` owned by another tag (0: never written)."""
        found = []
        for cell in cells:
            rest = [cell]
            for rect, tag in self.rects:
                r0, r1 = max(rect[0], cell[0]), min(rect[1], cell[1])
                if r0 < r1 and max(rect[2], cell[2]) < min(rect[3], cell[3]):
                    if tag != expect:
                        found.append((r0, r1, tag))
                    rest = [piece for part in rest for piece in _minus(part, rect)]
            found += [(r0, r1, 0) for r0, r1, _, _ in rest]
        return found
