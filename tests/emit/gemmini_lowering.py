"""What a `gemmini.tile_matmul` becomes on Gemmini, read from two sources we did not write, and what Gemmini then
computes: the oracle that makes our MLIR tests see Buddy-MLIR's semantics instead of our reading of the dialect.

* `buddy_tile_matmul`: the Gemmini state and the loop_ws calls Buddy-MLIR's own lowering issues, transcribed
  from buddy-mlir 080e518c, midend/lib/Dialect/Gemmini/Transforms/LegalizeForLLVMExport.cpp:
  GemminiTileMatMulLowering::matchAndRewrite (strides from the memref shapes, the tile sizes),
  tiledMatmulOuter (config_ex / config_st / config_ld words, the loop over tiles, the D and C offsets) and
  spTiledMatmulWs / gemminiLoopWs (the loop_ws registers).
* `gemmini_h_tiled_matmul`: the same for gemmini.h's tiled_matmul_outer and sp_tiled_matmul_ws
  (gemmini-rocc-tests 180c468), which the C back end calls.
* `execute`: what Gemmini computes from that state, transcribed from libgemmini 5b1254a's gemmini_t::loop_ws,
  mvin and mvout (the functional model Spike runs): mvin reads rows `config_ld`'s stride apart for its
  state id (0 = A, 1 = B, 2 = D), D is loaded into the accumulator before the products, the accumulator
  is kept between calls (a K split accumulates), mvout applies the accumulator scale and activation and
  writes rows `config_st`'s stride apart.

Memory is one byte buffer per operand: a read or write outside the operand's bytes is an error
(`OutOfBounds`), which is how a one-row repeating bias fails under Buddy's lowering: its config_ld gives D
the row stride of D's memref where gemmini.h gives 0 (docs/mlir.md, Buddy behaviours).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from onnx2gemmini import numerics

BANK_NUM = 4          # buddy-mlir and gemmini-rocc-tests' default configuration
STALE = 0x5B5B5B      # what an accumulator or scratchpad row holds before anything is loaded into it here
ACC_T_BYTES, ELEM_T_BYTES = 4, 1


class OutOfBounds(Exception):
    """A Gemmini load or store outside its operand."""


@dataclass(frozen=True)
class Ref:
    """A DRAM address: a byte offset into one operand's buffer (None for a NULL pointer)."""
    operand: str
    offset: int


@dataclass(frozen=True)
class LoopWs:
    """One gemmini_loop_ws: bounds in DIM blocks, addresses, row strides in elements, flags."""
    i: int
    j: int
    k: int
    pad_i: int
    pad_j: int
    pad_k: int
    a: Ref | None
    b: Ref | None
    d: Ref | None
    c: Ref | None
    stride_a: int
    stride_b: int
    stride_d: int
    stride_c: int
    ex_accumulate: bool
    full_c: bool
    act: int
    a_spad_id: int = 0
    b_spad_id: int = 0


@dataclass
class Program:
    """The Gemmini state a lowering sets (config_ld strides by state id, config_st) and its loop_ws calls."""
    ld_stride: dict[int, int]
    st_stride: int
    act: int
    scale: float
    calls: list[LoopWs] = field(default_factory=list)
    tiles: tuple[int, int, int] = (0, 0, 0)


@dataclass(frozen=True)
class Config:
    dim: int = 16
    bank_rows: int = 4096
    acc_rows: int = 1024


def _blocks(n: int, dim: int) -> int:
    return (n // dim + (n % dim != 0)) * dim


def _outer(dim_i, dim_j, dim_k, tile_i, tile_j, tile_k, dim):
    """tiledMatmulOuter's and tiled_matmul_outer's common arithmetic (the two are line-for-line the same)."""
    pi, pj, pk = _blocks(dim_i, dim), _blocks(dim_j, dim), _blocks(dim_k, dim)
    i0 = pi // (tile_i * dim) + (pi % (tile_i * dim) != 0)
    j0 = pj // (tile_j * dim) + (pj % (tile_j * dim) != 0)
    k0 = pk // (tile_k * dim) + (pk % (tile_k * dim) != 0)
    last = (tile_i if pi % (tile_i * dim) == 0 else (pi // dim) % tile_i,
            tile_j if pj % (tile_j * dim) == 0 else (pj // dim) % tile_j,
            tile_k if pk % (tile_k * dim) == 0 else (pk // dim) % tile_k)
    return (i0, j0, k0), last, (pi - dim_i, pj - dim_j, pk - dim_k)


def buddy_tiles(dim_i, dim_j, dim_k, cfg: Config) -> tuple[int, int, int]:
    """GemminiTileMatMulLowering::matchAndRewrite's tile sizes (act 0 or ReLU)."""
    dim = cfg.dim
    db_partition_rows = (BANK_NUM * cfg.bank_rows // 2) // 2
    db_mats_in_partition = db_partition_rows // dim
    db_mats_in_acc = (cfg.acc_rows // 2) // dim
    db_max_tile_ij = int(math.sqrt(db_mats_in_acc))
    db_max_tile_k = db_mats_in_partition // db_max_tile_ij
    pi, pj, pk = _blocks(dim_i, dim), _blocks(dim_j, dim), _blocks(dim_k, dim)
    max_spad, max_acc = BANK_NUM * cfg.bank_rows // 2, cfg.acc_rows // 2
    ti, tj, tk = min(pi // dim, db_max_tile_ij), min(pj // dim, db_max_tile_ij), min(pk // dim, db_max_tile_k)

    def spad(i, j, k):
        return (i * k + k * j) * dim
    while True:
        grown = False
        if spad(ti, tj + 1, tk) <= max_spad and ti * (tj + 1) * dim <= max_acc and (tj + 1) * dim <= pj:
            tj, grown = tj + 1, True
        if spad(ti + 1, tj, tk) <= max_spad and (ti + 1) * tj * dim <= max_acc and (ti + 1) * dim <= pi:
            ti, grown = ti + 1, True
        if spad(ti, tj, tk + 1) <= max_spad and (tk + 1) * dim <= pk:
            tk, grown = tk + 1, True
        if not grown:
            return ti, tj, tk


def buddy_tile_matmul(a_shape, b_shape, c_shape, d_shape, repeating: bool, act: int, scale: float,
                      full_c: bool, cfg: Config, tiles=None) -> Program:
    """Buddy's lowering of tile_matmul(A, B, C, D) with these memref shapes (WS, no transposes, i32 D): strides
    from the memrefs' shapes[1], its own tiles, D always loaded (noBias is always false, so ex_accumulate is
    set), no scratchpad reuse, and config_ld gives D strideD * sizeof(D) even when the bias repeats."""
    stride_a, stride_b, stride_c, stride_d = a_shape[1], b_shape[1], c_shape[1], d_shape[1]
    return _tiled_outer((a_shape[0], b_shape[1], a_shape[1]), (stride_a, stride_b, stride_c, stride_d),
                        tiles or buddy_tiles(a_shape[0], b_shape[1], a_shape[1], cfg), stride_d * ACC_T_BYTES,
                        repeating, act, scale, full_c, cfg, has_bias=True, reuse=False)


def gemmini_h_tiled_matmul(dim_i, dim_j, dim_k, has_bias: bool, repeating: bool, act: int, scale: float,
                           full_c: bool, tiles, cfg: Config) -> Program:
    """gemmini.h's tiled_matmul_outer (WS, no transposes) on dense [I][K], [K][J], [I][J] matrices and a bias
    of one row (repeating) or [I][J], as the C back end calls it (D = NULL without a bias): config_ld gives a
    repeating D stride 0, and an operand that fits is reused from the scratchpad (a_reuse, b_reuse)."""
    return _tiled_outer((dim_i, dim_j, dim_k), (dim_k, dim_j, dim_j, dim_j), tiles,
                        0 if repeating else dim_j * ACC_T_BYTES, repeating, act, scale, full_c, cfg,
                        has_bias=has_bias, reuse=True)


def _tiled_outer(dims, strides, tiles, d_load_stride: int, repeating: bool, act: int, scale: float, full_c: bool,
                 cfg: Config, has_bias: bool, reuse: bool) -> Program:
    """The tile loop tiledMatmulOuter and tiled_matmul_outer share line for line (i0, j0, k0; the D and C
    offsets, the last tiles and their padding), with what differs between them as arguments."""
    dim = cfg.dim
    dim_i, dim_j, dim_k = dims
    stride_a, stride_b, stride_c, stride_d = strides
    sizeof_d, sizeof_c = ACC_T_BYTES, ACC_T_BYTES if full_c else ELEM_T_BYTES
    ti, tj, tk = tiles
    (n_i, n_j, n_k), (last_i, last_j, last_k), (pad_i, pad_j, pad_k) = _outer(dim_i, dim_j, dim_k, ti, tj, tk, dim)
    program = Program({0: stride_a * ELEM_T_BYTES, 1: stride_b * ELEM_T_BYTES, 2: d_load_stride},
                      stride_c * sizeof_c, act & 3, scale, tiles=(ti, tj, tk))
    a_reuse, b_reuse = reuse and n_i * n_k <= 2, reuse and n_j * n_k <= 2
    for i0 in range(n_i):
        for j0 in range(n_j):
            for k0 in range(n_k):
                pre = None if k0 != 0 else \
                    Ref("D", ((0 if repeating else i0 * ti * dim) * stride_d + j0 * tj * dim) * sizeof_d)
                out = Ref("C", (i0 * ti * dim * stride_c + j0 * tj * dim) * sizeof_c) if k0 == n_k - 1 else None
                program.calls.append(LoopWs(
                    i=ti if i0 < n_i - 1 else last_i, j=tj if j0 < n_j - 1 else last_j,
                    k=tk if k0 < n_k - 1 else last_k, pad_i=pad_i if i0 == n_i - 1 else 0,
                    pad_j=pad_j if j0 == n_j - 1 else 0, pad_k=pad_k if k0 == n_k - 1 else 0,
                    a=None if a_reuse and j0 >= 1 else Ref("A", i0 * ti * dim * stride_a + k0 * tk * dim),
                    b=None if b_reuse and i0 >= 1 else Ref("B", k0 * tk * dim * stride_b + j0 * tj * dim),
                    d=pre if has_bias else None, c=out, stride_a=stride_a, stride_b=stride_b,
                    stride_d=0 if repeating else stride_d, stride_c=stride_c,
                    ex_accumulate=has_bias or pre is None, full_c=full_c, act=act,
                    a_spad_id=(1 if i0 + k0 == 0 else 2) if a_reuse else 0,
                    b_spad_id=(1 if j0 + k0 == 0 else 2) if b_reuse else 0))
    return program


class _Memory:
    def __init__(self, buffers: dict[str, np.ndarray]):
        self.bytes = {name: np.frombuffer(np.ascontiguousarray(v).tobytes(), np.uint8).copy()
                      for name, v in buffers.items()}

    def _span(self, ref: Ref, offset: int, rows: int, width: int, stride: int) -> np.ndarray:
        """`rows` rows of `width` bytes, `stride` bytes apart, from `offset` bytes past `ref` (a view)."""
        buf = self.bytes[ref.operand]
        start = ref.offset + offset
        end = start + (rows - 1) * stride + width
        if start < 0 or end > len(buf) or (rows > 1 and stride < 0):
            raise OutOfBounds(f"{ref.operand}: bytes {start}..{end} of {len(buf)}")
        return np.lib.stride_tricks.as_strided(buf[start:], (rows, width), (stride, 1))

    def read(self, ref: Ref, offset: int, rows: int, cols: int, stride: int, dtype) -> np.ndarray:
        width = cols * np.dtype(dtype).itemsize
        return np.ascontiguousarray(self._span(ref, offset, rows, width, stride)).view(dtype).reshape(rows, cols)

    def write(self, ref: Ref, offset: int, values: np.ndarray, stride: int) -> None:
        raw = np.ascontiguousarray(values).view(np.uint8).reshape(values.shape[0], -1)
        self._span(ref, offset, raw.shape[0], raw.shape[1], stride)  # the bounds check
        buf, start = self.bytes[ref.operand], ref.offset + offset
        for r, row in enumerate(raw):
            buf[start + r * stride:start + r * stride + len(row)] = row


def execute(program: Program, buffers: dict[str, np.ndarray], c_shape, cfg: Config) -> np.ndarray:
    """libgemmini's loop_ws on `buffers` (A, B, D, C by name): returns C. The scratchpad and accumulator are
    arrays of rows by address; rows nothing was loaded into hold STALE."""
    dim = cfg.dim
    full_c = any(call.full_c for call in program.calls)
    c_dtype = np.int32 if full_c else np.int8
    mem = _Memory({**buffers, "C": np.zeros(c_shape, c_dtype)})
    half = BANK_NUM * cfg.bank_rows // 2
    spad = np.full((2 * half, dim), STALE, np.int64)
    acc = np.full((cfg.acc_rows, dim), STALE, np.int64)

    for call in program.calls:
        n_i, n_j, n_k = call.i, call.j, call.k
        if (n_i * n_k + n_k * n_j) * dim > half or n_i * n_j * dim > cfg.acc_rows // 2:
            raise OutOfBounds("LOOP_WS bounds were too large for double-buffering")
        a_start = half if call.a_spad_id == 2 else 0
        b_start = (2 * half if call.b_spad_id == 2 else half) - n_k * n_j * dim
        rows = [dim - (call.pad_i if i == n_i - 1 else 0) for i in range(n_i)]
        cols = [dim - (call.pad_j if j == n_j - 1 else 0) for j in range(n_j)]
        depth = [dim - (call.pad_k if k == n_k - 1 else 0) for k in range(n_k)]
        if call.d is not None:  # mvin D into the accumulator rows of C, with config_ld's D stride
            for i in range(n_i):
                for j in range(n_j):
                    block = mem.read(call.d, (i * call.stride_d + j) * dim * ACC_T_BYTES, rows[i], cols[j],
                                     program.ld_stride[2], np.int32)
                    at = (i * n_j + j) * dim
                    acc[at:at + rows[i], :cols[j]] = block
        # mvin A blocks [i][k] and B blocks [k][j] (none when the call reuses the scratchpad's: a NULL address)
        for ref, start, stride, state_id, down, across in ((call.a, a_start, call.stride_a, 0, rows, depth),
                                                            (call.b, b_start, call.stride_b, 1, depth, cols)):
            for u in range(len(down) if ref is not None else 0):
                for v in range(len(across)):
                    at = start + (u * len(across) + v) * dim
                    spad[at:at + down[u], :across[v]] = mem.read(ref, (u * stride + v) * dim, down[u], across[v],
                                                                 program.ld_stride[state_id], np.int8)
        a = spad[a_start:a_start + n_i * n_k * dim].reshape(n_i, n_k, dim, dim).copy()
        b = spad[b_start:b_start + n_k * n_j * dim].reshape(n_k, n_j, dim, dim).copy()
        r, c = np.arange(dim)[:, None], np.arange(dim)[None, :]
        for i in range(n_i):
            for k in range(n_k):
                a[i, k][(r >= rows[i]) | (c >= depth[k])] = 0     # compute reads A_rows x A_cols
        for k in range(n_k):
            for j in range(n_j):
                b[k, j][(r >= depth[k]) | (c >= cols[j])] = 0     # and B_rows x B_cols
        product = np.einsum("ikrc,kjcs->ijrs", a, b)
        region = acc[:n_i * n_j * dim].reshape(n_i, n_j, dim, dim)
        base = 0 if not call.ex_accumulate else region           # the first k overwrites without ex_accumulate
        region[...] = numerics.wrap_int32(base + product).astype(np.int64)
        if call.c is not None:
            sizeof_c = ACC_T_BYTES if call.full_c else ELEM_T_BYTES
            for i in range(n_i):
                for j in range(n_j):
                    block = np.asarray(region[i, j, :rows[i], :cols[j]], np.int32)
                    value = block if call.full_c else numerics.acc_scale(block, program.scale, program.act == 1)
                    mem.write(call.c, (i * call.stride_c + j) * dim * sizeof_c, np.asarray(value, c_dtype),
                              program.st_stride)
    return mem.bytes["C"].view(c_dtype).reshape(c_shape).copy()
