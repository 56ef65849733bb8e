"""A scratchpad and an accumulator that execute primitive instructions with libgemmini's arithmetic.

Why: the emulator computes whole calls, so it cannot see one operand overwriting another inside the
scratchpad; this machine executes what the functional model executes, cell by cell, and tags every cell
with the load that wrote it. A compute that reads A/B cells whose tag is not the load it expects, or an
mvout / accumulating write that meets partial sums of another output tile, is recorded as a Hazard.

Source: libgemmini 5b1254a gemmini.cc — mvin (L119-218), mvout with pooling (L220-360), preload and
compute (L362-374, L523-670), config (L376-521), acc_scale / mvin_scale (L1821-1861).

`semantics` decides the one place where the functional model and the RTL differ for our calls: an mvin
with pixels_per_row p > 1 also writes row r's data into rows r-1 .. r-(p-1) (shifted right by the mvin's
column count each time). libgemmini stops only below row 0 (`pixel <= spad_row`); the RTL
(PixelRepeater.scala, LocalAddr.floorSub) drops any such write below the floor of row r's half (0 or
sp_rows/2). "spike" models the former, "rtl" the latter.

Speed: consecutive instructions of one kind run as one NumPy batch (a run of mvins into one slot, of
preload/compute pairs, of mvouts). A batch is exact because nothing it reads is written inside it
(computes read the scratchpad and write the accumulator; mvins read DRAM; mvouts read the accumulator),
overlapping writes keep the last one, and accumulations commute (int32 wrap-around). Ownership checks
follow program order: a cell's first accumulation in a batch meets the tag it had before the batch,
later ones the batch's own tag.
"""
from __future__ import annotations

import numpy as np

from .hazard import Hazard, HazardLog
from .isa import (
    ACC,
    FULL,
    GARBAGE,
    MVOUT_ROW_MASK,
    ROW_MASK,
    Compute,
    ConfigEx,
    ConfigLd,
    ConfigSt,
    Mvin,
    Mvout,
    Preload,
    describe_acc_tag,
    describe_spad_tag,
)

SEMANTICS = ("spike", "rtl")


def wrap32(x: np.ndarray) -> np.ndarray:
    """int64 -> int32 with two's-complement wrap-around (what the int32 accumulator does)."""
    return np.asarray(x, np.int64).astype(np.uint32).view(np.int32)


def acc_read(acc: np.ndarray, scale: float, act: int) -> np.ndarray:
    """ACC_SCALE then clip to int8, then ReLU (gemmini.cc mvout: acc_scale, apply_activation_acc)."""
    y = np.clip(np.rint(acc.astype(np.float32) * np.float32(scale)), -128, 127)
    return (np.maximum(y, 0) if act == 1 else y).astype(np.int8)


def dram_index(arr: np.ndarray, index: np.ndarray) -> np.ndarray:
    """`index` after checking it lies inside `arr` (NumPy would wrap negative indices silently)."""
    if index.size and (index.min() < 0 or index.max() >= arr.size):
        raise IndexError(f"DRAM access outside its operand: elements {index.min()}..{index.max()} of {arr.size}")
    return index


def last_writes(flat: np.ndarray) -> np.ndarray:
    """Indices of the last write to each distinct cell (later writes win)."""
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    return flat.size - 1 - first_from_end


def _fields(batch, *names) -> list[np.ndarray]:
    """Instruction fields as int64 arrays (None, i.e. a NULL DRAM address, becomes -1)."""
    return [np.fromiter((-1 if getattr(i, n) is None else getattr(i, n) for i in batch), np.int64, len(batch))
            for n in names]


class Machine:
    """Gemmini's memories and configuration state. One machine is one program: its state (and
    libgemmini's static accumulator rows, which the unroller keeps) persists from call to call."""

    def __init__(self, config, semantics: str = "spike"):
        if semantics not in SEMANTICS:
            raise ValueError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
        self.config, self.semantics, self.dim = config, semantics, config.dim
        self.sp = np.zeros((config.sp_rows, self.dim), np.int8)
        self.sp_tag = np.zeros(self.sp.shape, np.int32)
        self.acc = np.zeros((config.acc_rows, self.dim), np.int32)
        self.acc_tag = np.zeros(self.acc.shape, np.int32)
        self.ld = [ConfigLd(slot, 0) for slot in range(3)]
        self.st = ConfigSt(0, 0, 1.0)
        self.ex = ConfigEx()
        self.pe = np.zeros((self.dim, self.dim), np.float32)
        self.preload: Preload | None = None
        self.base = 0          # tags of the current call are stored as base + tag
        self.top = 0

    # -- driving ------------------------------------------------------------------------------------

    def run(self, program: list, dram: dict[str, np.ndarray]) -> list[Hazard]:
        """Execute one call's instructions against `dram` (flat arrays by operand name, written in
        place) and return the hazards seen."""
        self.dram, self.log, self.top = dram, HazardLog(), 0
        n, end = 0, len(program)
        while n < end:
            ins, m = program[n], n + 1
            kind = type(ins)
            if kind is Preload or kind is Compute:
                while m < end and type(program[m]) in (Preload, Compute):
                    m += 1
                self._computes(program, n, m)
            elif kind is Mvin:
                key = _mvin_key(ins)
                while m < end and type(program[m]) is Mvin and _mvin_key(program[m]) == key:
                    m += 1
                self._mvins(program[n:m], n)
            elif kind is Mvout and self.st.pool_stride:
                self._pooled_mvout(ins, n)
            elif kind is Mvout:
                while m < end and type(program[m]) is Mvout and program[m].operand == ins.operand:
                    m += 1
                self._mvouts(program[n:m], n)
            elif kind is ConfigLd:
                self.ld[ins.slot] = ins._replace(block_stride=ins.block_stride & 0xFFFF,
                                                 pixels=(ins.pixels & 0xFF) or 1)
            elif kind is ConfigSt:
                self._config_st(ins)
            else:
                self.ex = ConfigEx(ins.a_stride & 0xFFFF, ins.c_stride & 0xFFFF)
            n = m
        self.base += self.top + 1
        return self.log.hazards()

    def _config_st(self, ins: ConfigSt) -> None:
        """config_st keeps only the bits libgemmini decodes (gemmini.cc L454-489)."""
        if ins.act & 3 > 1:
            raise NotImplementedError("only NO_ACTIVATION and RELU are modelled")
        self.st = ConfigSt(ins.stride & 0xFFFF_FFFF, ins.act & 3, self.st.scale if ins.scale is None else ins.scale,
                           ins.pool_stride & 3, ins.pool_size & 3, ins.pool_out_dim & 0xFF, ins.porows & 0xFF,
                           ins.pocols & 0xFF, ins.orows & 0xFF, ins.ocols & 0xFF, ins.upad & 3, ins.lpad & 3)

    # -- tags ---------------------------------------------------------------------------------------

    def _abs(self, tag):
        """A call-relative tag as stored; tags <= 0 (no loader) match no cell."""
        tag = np.asarray(tag, np.int64)
        self.top = max(self.top, int(tag.max(initial=0)))
        return np.where(tag > 0, self.base + tag, -1)

    def _report(self, found, expect, rows, loops, who, operand: str) -> None:
        """Log the cells whose tag (`found`) is not `expect` (all arrays of one shape)."""
        bad = found != expect
        if not bad.any():
            return
        describe = describe_acc_tag if operand == "C" else describe_spad_tag
        found, rows, loops, who = (np.broadcast_to(a, bad.shape)[bad] for a in (found, rows, loops, who))
        for loop, tag in {(int(lp), int(t)) for lp, t in zip(loops, found)}:
            hit = (loops == loop) & (found == tag)
            rel = 0 if tag == 0 else (tag - self.base if tag > self.base else -1)
            self.log.add(loop, operand, describe(rel), int(rows[hit].min()), int(rows[hit].max()),
                         int(who[hit].min()))

    # -- accumulator writes (computes and accumulator mvins) ----------------------------------------

    def _acc_write(self, rows, cols, vals, tags, accumulate: bool, expect, where) -> None:
        """Write (or add) `vals` into accumulator cells in program order; `tags` are the writers' tags
        (one tag when accumulating, with `expect` the tag the cells must hold before); `where()` gives
        (loops, instructions) of the writes, for hazard reports."""
        flat = rows * self.dim + cols
        if not accumulate:
            last = last_writes(flat)
            self.acc.flat[flat[last]] = wrap32(vals[last])
            self.acc_tag.flat[flat[last]] = np.broadcast_to(tags, flat.shape)[last]
            return
        counts = np.bincount(flat, minlength=self.acc.size)
        cells = np.flatnonzero(counts)
        if (self.acc_tag.flat[cells] != expect).any() or (tags != expect and (counts > 1).any()):
            _, first = np.unique(flat, return_index=True)
            seen = np.full(flat.shape, tags, np.int64)
            seen[first] = self.acc_tag.flat[cells]
            self._report(seen, expect, rows, *where(), "C")
        sums = np.bincount(flat, weights=vals, minlength=self.acc.size)[cells]
        self.acc.flat[cells] = wrap32(self.acc.flat[cells].astype(np.int64) + sums.astype(np.int64))
        self.acc_tag.flat[cells] = tags

    # -- mvin ---------------------------------------------------------------------------------------

    def _mvins(self, batch: list[Mvin], n0: int) -> None:
        ins0, dim = batch[0], self.dim
        ld = self.ld[ins0.slot]
        to_acc, accumulate = bool(ins0.addr >> 31 & 1), bool(ins0.addr >> 30 & 1)
        rows_n, cols_n, addr, offs, loops = _fields(batch, "rows", "cols", "addr", "offset", "loop")
        r = np.arange(rows_n.max())[None, :, None]
        c = np.arange(cols_n.max())[None, None, :]
        valid = (r < rows_n[:, None, None]) & (c < cols_n[:, None, None])
        dst = (addr[:, None, None] & ROW_MASK) + r + (c // dim) * ld.block_stride
        vals = np.zeros(valid.shape, np.int64)
        load = valid & (offs >= 0)[:, None, None]
        if load.any():
            arr = self.dram[ins0.operand]
            if arr.dtype != (np.int32 if to_acc and not ld.shrunk else np.int8):
                raise TypeError(f"mvin of {ins0.operand} ({arr.dtype}) with shrunk={ld.shrunk} into "
                                f"{'the accumulator' if to_acc else 'the scratchpad'}")
            src = offs[:, None, None] + r * (ld.stride // arr.itemsize) + c
            v = arr[dram_index(arr, src[load])].astype(np.int64)
            if arr.dtype == np.int8 and self.config.mvin_scale and ld.scale != 1.0:
                v = np.clip(np.rint(v.astype(np.float32) * np.float32(ld.scale)), -128, 127).astype(np.int64)
            vals[load] = v
        # pixel repeats: row r's data also lands in rows r-1 .. r-(p-1), p*cols columns to the right
        p = np.arange(ld.pixels)
        tr = dst[..., None] - p
        tc = (c % dim)[..., None] + p * cols_n[:, None, None, None]
        keep = valid[..., None] & (tr >= 0)
        if not to_acc and self.semantics == "rtl":
            half = self.config.sp_rows // 2
            keep &= tr >= np.where(dst < half, 0, half)[..., None] * (p > 0)
        shape = tr.shape
        tr, tc = tr[keep], np.broadcast_to(tc, shape)[keep]
        vals = np.broadcast_to(vals[..., None], shape)[keep]
        who = np.broadcast_to((n0 + np.arange(len(batch)))[:, None, None, None], shape)[keep]
        loops = np.broadcast_to(loops[:, None, None, None], shape)[keep]
        tags = self._abs(np.broadcast_to(_fields(batch, "tag")[0][:, None, None, None], shape)[keep])
        if (tc >= dim).any():
            raise IndexError("mvin writes past the last column of a row")
        if to_acc:
            expect = self._abs(ins0.expect) if accumulate else None
            self._acc_write(tr, tc, vals, self._abs(ins0.tag) if accumulate else tags, accumulate, expect,
                            lambda: (loops, who))
            return
        last = last_writes(tr * dim + tc)
        self.sp[tr[last], tc[last]] = vals[last]
        self.sp_tag[tr[last], tc[last]] = tags[last]

    # -- preload / compute --------------------------------------------------------------------------

    def _gather(self, addr, stride: int, rows, cols):
        """DIM x DIM blocks of scratchpad rows addr + stride*i (i < rows) and columns < cols, as
        (values, tags, row numbers, mask); outside the mask values are 0."""
        i = np.arange(self.dim)
        mask = (i[None, :, None] < rows[:, None, None]) & (i[None, None, :] < cols[:, None, None])
        r = np.where(i[None, :] < rows[:, None], addr[:, None] + stride * i[None, :], 0)
        vals = np.where(mask, self.sp[r], 0).astype(np.float32)
        return vals, self.sp_tag[r], np.broadcast_to(r[:, :, None], mask.shape), mask

    def _computes(self, program: list, n0: int, n1: int) -> None:
        """A run of preloads and computes (WS): B read at each compute_preloaded, A at every compute,
        results written (or added) to the accumulator rows of the last preload."""
        pre, b_list, a_list, c_list, cur = self.preload, [], [], [], -1
        for k in range(n0, n1):
            ins = program[k]
            if type(ins) is Preload:
                pre = ins
                continue
            if ins.preloaded:
                cur = len(b_list)
                b_list.append((0, 0, 0, 0, pre.loop, k) if pre.b == GARBAGE else
                              (pre.b, pre.b_rows, pre.b_cols, pre.b_expect, pre.loop, k))
            a_list.append((ins.a, ins.a_rows, ins.a_cols, ins.a_expect, ins.loop, k, cur))
            if pre.c != GARBAGE:
                if not pre.c >> 31 & 1:
                    raise NotImplementedError("compute outputs to the scratchpad are not modelled")
                c_list.append((len(a_list) - 1, pre.c, pre.c_rows, pre.c_cols, pre.c_tag,
                               -1 if pre.c_expect is None else pre.c_expect, pre.loop, k))
        self.preload = pre
        if not a_list:
            return
        blocks = np.zeros((len(b_list) + 1, self.dim, self.dim), np.float32)
        blocks[0] = self.pe
        if b_list:
            addr, rows, cols, expect, loops, who = np.array(b_list, np.int64).T
            vals, tags, rr, mask = self._gather(addr, 1, rows, cols)
            blocks[1:] = vals
            self._report(np.where(mask, tags, -2), np.where(mask, self._abs(expect)[:, None, None], -2), rr,
                         loops[:, None, None], who[:, None, None], "B")
        addr, rows, cols, expect, loops, who, b_idx = np.array(a_list, np.int64).T
        a, tags, rr, mask = self._gather(addr, self.ex.a_stride, rows, cols)
        self._report(np.where(mask, tags, -2), np.where(mask, self._abs(expect)[:, None, None], -2), rr,
                     loops[:, None, None], who[:, None, None], "A")
        self.pe = blocks[b_idx[-1] + 1]
        if c_list:
            self._compute_outputs(np.matmul(a, blocks[b_idx + 1]), np.array(c_list, np.int64))

    def _compute_outputs(self, results: np.ndarray, outs: np.ndarray) -> None:
        """Accumulator writes of a compute run, split where the accumulate bit or the tags change."""
        idx, c, c_rows, c_cols, c_tag, c_exp, loops, who = outs.T
        i = np.arange(self.dim)
        mask = (i[None, :, None] < c_rows[:, None, None]) & (i[None, None, :] < c_cols[:, None, None])
        rows = np.broadcast_to(((c & ROW_MASK)[:, None] + self.ex.c_stride * i[None, :])[:, :, None], mask.shape)
        cols = np.broadcast_to(i[None, None, :], mask.shape)
        vals = np.rint(results[idx]).astype(np.int64)
        key = np.stack([c >> 30 & 1, c_tag, c_exp], 1)
        cuts = np.flatnonzero((key[1:] != key[:-1]).any(1)) + 1
        for g0, g1 in zip(np.r_[0, cuts], np.r_[cuts, len(outs)]):
            m = mask[g0:g1]
            accumulate = bool(key[g0, 0])

            def where(g0=g0, g1=g1, m=m):
                return (np.broadcast_to(loops[g0:g1, None, None], m.shape)[m],
                        np.broadcast_to(who[g0:g1, None, None], m.shape)[m])
            self._acc_write(rows[g0:g1][m], cols[g0:g1][m], vals[g0:g1][m], int(self._abs(c_tag[g0])), accumulate,
                            int(self._abs(c_exp[g0])) if accumulate else None, where)

    # -- mvout --------------------------------------------------------------------------------------

    def _acc_source(self, addr: int) -> int:
        if not addr & ACC:
            raise NotImplementedError("mvouts from the scratchpad are not modelled")
        return addr & MVOUT_ROW_MASK

    def _mvouts(self, batch: list[Mvout], n0: int) -> None:
        """Non-pooled mvouts: scaled, clipped, activated accumulator rows to DRAM rows `stride` elements
        apart, or with the full-width bit the raw int32 accumulators (full_C; the operand is then int32 and
        gemmini.h's byte stride stride_C * sizeof(acc_t) is stride_C elements)."""
        dim, st = self.dim, self.st
        rows_n, cols_n, offs, loops, expect = _fields(batch, "rows", "cols", "offset", "loop", "expect")
        full = {bool(i.addr & FULL) for i in batch}
        if len(full) > 1:
            raise NotImplementedError("one batch of mvouts mixing full-width and scaled reads")
        full = full.pop()
        base = np.array([self._acc_source(i.addr) for i in batch], np.int64)
        r = np.arange(rows_n.max())[None, :, None]
        c = np.arange(cols_n.max())[None, None, :]
        valid = (r < rows_n[:, None, None]) & (c < cols_n[:, None, None])
        src = base[:, None, None] + (c // dim) * dim + r
        src_r, src_c = src[valid], np.broadcast_to(c % dim, valid.shape)[valid]
        who = np.broadcast_to((n0 + np.arange(len(batch)))[:, None, None], valid.shape)[valid]
        self._report(self.acc_tag[src_r, src_c], self._abs(np.broadcast_to(expect[:, None, None], valid.shape)[valid]),
                     src_r, np.broadcast_to(loops[:, None, None], valid.shape)[valid], who, "C")
        out = self.dram[batch[0].operand]
        dst = dram_index(out, (offs[:, None, None] + r * st.stride + c)[valid])
        last = last_writes(dst)
        acc = self.acc[src_r[last], src_c[last]]
        out[dst[last]] = acc if full else acc_read(acc, st.scale, st.act)

    def _pooled_mvout(self, ins: Mvout, n: int) -> None:
        """The store controller's max-pool: windows over the tile's orows x ocols conv outputs (already
        scaled and activated), positions outside them reading 0; one DRAM row per pooled pixel."""
        if ins.addr & FULL:
            raise NotImplementedError("full-width (int32) pooled mvouts are not modelled")
        st, ch, base = self.st, ins.cols, self._acc_source(ins.addr)
        w = np.arange(st.pool_size)
        orow = np.arange(st.porows)[:, None] * st.pool_stride + w[None, :] - st.upad      # porows x size
        ocol = np.arange(st.pocols)[:, None] * st.pool_stride + w[None, :] - st.lpad      # pocols x size
        inside = (((orow >= 0) & (orow < st.orows))[:, None, :, None]
                  & ((ocol >= 0) & (ocol < st.ocols))[None, :, None, :])              # porows x pocols x size x size
        rows = np.where(inside, base + orow[:, None, :, None] * st.ocols + ocol[None, :, None, :], 0)
        vals = np.where(inside[..., None], acc_read(self.acc[rows, :ch], st.scale, st.act), 0)
        read = np.repeat(rows[inside][:, None], ch, 1)
        self._report(self.acc_tag[read, np.arange(ch)], self._abs(ins.expect), read, ins.loop, n, "C")
        pooled = vals.max(axis=(2, 3), initial=-128).astype(np.int8)                     # porows x pocols x ch
        at = (np.arange(st.porows)[:, None, None] * st.pool_out_dim + np.arange(st.pocols)[None, :, None]) * st.stride
        out = self.dram[ins.operand]
        out[dram_index(out, ins.offset + at + np.arange(ch)[None, None, :])] = pooled


def _mvin_key(ins: Mvin) -> tuple:
    """Mvins that may run as one batch: one slot and operand, one kind of destination; accumulating
    ones also one (tag, expect)."""
    kind = ins.addr >> 30
    return (ins.slot, ins.operand, kind) + ((ins.tag, ins.expect) if kind == 3 else ())
