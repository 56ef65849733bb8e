"""Tests for the host implementation of the gemmini.h API
(onnx2gemmini/runtime/host/gemmini.h).

Small C driver programs are written into a temporary directory, compiled
with the system C compiler against the host header, fed random int8 data on
stdin and compared with NumPy reference models written here from the
semantics in the project's Gemmini spec notes (section 2): float32 multiply,
round half to even (np.rint), clip to int8, ReLU; zero-valued pool padding;
global average with the float32 reciprocal of dim*dim.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HEADER_DIR = (Path(__file__).resolve().parent / ".." / ".." / "onnx2gemmini" / "runtime" / "host").resolve()
HEADER = HEADER_DIR / "gemmini.h"

CC = os.environ.get("CC", "cc")
WARN = ["-Wall", "-Wextra", "-Werror"]
RISCV_CC = "riscv64-unknown-elf-gcc"

OS, WS, CPU = 0, 1, 2
NO_ACTIVATION, RELU = 0, 1
SENTINEL = 85  # fills output padding that must stay untouched

# --------------------------------------------------------------------------
# The C driver: reads an op code, int64 parameters, float32 parameters and
# byte buffers from stdin, calls one gemmini.h function, and writes every
# buffer back to the file named by argv[1].  A buffer of size -1 is NULL.
# --------------------------------------------------------------------------
DRIVER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gemmini.h"

static long long rd(void)
{
    long long v;
    if (fread(&v, sizeof v, 1, stdin) != 1) {
        fprintf(stderr, "driver: short read\n");
        exit(3);
    }
    return v;
}

int main(int argc, char **argv)
{
    long long op, np_, nf, nb, i;
    long long P[64];
    float F[16];
    void *buf[16];
    long long sz[16];
    FILE *out;

    if (argc != 2)
        return 4;
    op = rd();
    np_ = rd();
    for (i = 0; i < np_; i++)
        P[i] = rd();
    nf = rd();
    if (nf > 0 && fread(F, sizeof(float), (size_t)nf, stdin) != (size_t)nf)
        return 3;
    nb = rd();
    for (i = 0; i < nb; i++) {
        sz[i] = rd();
        buf[i] = NULL;
        if (sz[i] >= 0) {
            buf[i] = malloc(sz[i] > 0 ? (size_t)sz[i] : 1);
            if (sz[i] > 0 && fread(buf[i], 1, (size_t)sz[i], stdin) != (size_t)sz[i])
                return 3;
        }
    }

    switch (op) {
    case 1: /* tiled_matmul_auto */
    case 2: /* tiled_matmul */
        if (op == 1)
            tiled_matmul_auto((size_t)P[0], (size_t)P[1], (size_t)P[2],
                (const elem_t *)buf[0], (const elem_t *)buf[1], buf[2], buf[3],
                (size_t)P[3], (size_t)P[4], (size_t)P[5], (size_t)P[6],
                F[0], F[1], (scale_acc_t)P[14], (int)P[7], F[2], 0.0f,
                P[8] != 0, P[9] != 0, P[10] != 0, P[11] != 0, P[12] != 0, 0,
                (enum tiled_matmul_type_t)P[13]);
        else
            tiled_matmul((size_t)P[0], (size_t)P[1], (size_t)P[2],
                (const elem_t *)buf[0], (const elem_t *)buf[1], buf[2], buf[3],
                (size_t)P[3], (size_t)P[4], (size_t)P[5], (size_t)P[6],
                F[0], F[1], (scale_acc_t)P[14], (int)P[7], F[2], 0.0f,
                P[8] != 0, (size_t)P[15], (size_t)P[16], (size_t)P[17],
                P[9] != 0, P[10] != 0, P[11] != 0, P[12] != 0, 0,
                (enum tiled_matmul_type_t)P[13]);
        break;
    case 3: /* tiled_conv_auto */
        tiled_conv_auto((int)P[0], (int)P[1], (int)P[2], (int)P[3], (int)P[4], (int)P[5],
            (int)P[6], (int)P[7], (int)P[8], (int)P[9], (int)P[10], (int)P[11],
            P[15] != 0, P[16] != 0, P[17] != 0, P[18] != 0, P[19] != 0,
            (const elem_t *)buf[0], (const elem_t *)buf[1], (const acc_t *)buf[2],
            (elem_t *)buf[3], (int)P[20], F[0], (int)P[21], (int)P[22], (int)P[23],
            (enum tiled_matmul_type_t)P[24]);
        break;
    case 4: /* tiled_conv_stride_auto */
        tiled_conv_stride_auto((int)P[0], (int)P[1], (int)P[2], (int)P[3], (int)P[4],
            (int)P[5], (int)P[6], (int)P[7], (int)P[8], (int)P[9], (int)P[10], (int)P[11],
            (int)P[12], (int)P[13], (int)P[14],
            P[15] != 0, P[16] != 0, P[17] != 0, P[18] != 0, P[19] != 0,
            (const elem_t *)buf[0], (const elem_t *)buf[1], (const acc_t *)buf[2],
            (elem_t *)buf[3], (int)P[20], F[0], (int)P[21], (int)P[22], (int)P[23],
            (enum tiled_matmul_type_t)P[24]);
        break;
    case 5: /* tiled_conv */
        tiled_conv((int)P[0], (int)P[1], (int)P[2], (int)P[3], (int)P[4],
            (int)P[5], (int)P[6], (int)P[7], (int)P[8], (int)P[9], (int)P[10], (int)P[11],
            (int)P[12], (int)P[13], (int)P[14],
            P[15] != 0, P[16] != 0, P[17] != 0, P[18] != 0, P[19] != 0,
            (int)P[25], (int)P[26], (int)P[27], (int)P[28], (int)P[29], (int)P[30], (int)P[31],
            (const elem_t *)buf[0], (const elem_t *)buf[1], (const acc_t *)buf[2],
            (elem_t *)buf[3], (int)P[20], F[0], (int)P[21], (int)P[22], (int)P[23],
            (enum tiled_matmul_type_t)P[24]);
        break;
    case 6: /* tiled_conv_dw_auto */
        tiled_conv_dw_auto((int)P[0], (int)P[1], (int)P[2], (int)P[3], (int)P[4], (int)P[5],
            (int)P[6], (int)P[7], (int)P[8],
            (elem_t *)buf[0], (elem_t *)buf[1], (acc_t *)buf[2], (elem_t *)buf[3],
            (int)P[9], F[0], (int)P[10], (int)P[11], (int)P[12],
            (enum tiled_matmul_type_t)P[13]);
        break;
    case 7: /* tiled_conv_dw */
        tiled_conv_dw((int)P[0], (int)P[1], (int)P[2], (int)P[3], (int)P[4], (int)P[5],
            (int)P[6], (int)P[7], (int)P[8],
            (int)P[14], (int)P[15], (int)P[16], (int)P[17], (int)P[18],
            (elem_t *)buf[0], (elem_t *)buf[1], (acc_t *)buf[2], (elem_t *)buf[3],
            (int)P[9], F[0], (int)P[10], (int)P[11], (int)P[12],
            (enum tiled_matmul_type_t)P[13]);
        break;
    case 8: /* tiled_resadd_auto */
    case 9: /* tiled_resadd_stride_auto */
    case 10: { /* tiled_resadd */
        elem_t *C = P[5] == 1 ? (elem_t *)buf[0] : P[5] == 2 ? (elem_t *)buf[1] : (elem_t *)buf[2];
        if (op == 8)
            tiled_resadd_auto((size_t)P[0], (size_t)P[1], F[0], F[1], F[2],
                (const elem_t *)buf[0], (const elem_t *)buf[1], C, P[3] != 0,
                (enum tiled_matmul_type_t)P[4]);
        else if (op == 9)
            tiled_resadd_stride_auto((size_t)P[0], (size_t)P[1], F[0], F[1], F[2], (size_t)P[2],
                (const elem_t *)buf[0], (const elem_t *)buf[1], C, P[3] != 0,
                (enum tiled_matmul_type_t)P[4]);
        else
            tiled_resadd((size_t)P[0], (size_t)P[1], (size_t)P[2], (size_t)P[6], (size_t)P[7],
                F[0], F[1], F[2], (const elem_t *)buf[0], (const elem_t *)buf[1], C, P[3] != 0,
                (enum tiled_matmul_type_t)P[4]);
        break;
    }
    case 11: /* tiled_global_average_auto */
        tiled_global_average_auto((const elem_t *)buf[0], (elem_t *)buf[1], (int)P[0], (int)P[1],
            (int)P[2], (enum tiled_matmul_type_t)P[3]);
        break;
    case 12: /* tiled_global_average */
        tiled_global_average((const elem_t *)buf[0], (elem_t *)buf[1], (int)P[0], (int)P[1],
            (int)P[2], (int)P[4]);
        break;
    default:
        return 5;
    }
    gemmini_fence();

    out = fopen(argv[1], "wb");
    if (out == NULL)
        return 6;
    for (i = 0; i < nb; i++)
        if (sz[i] > 0 && fwrite(buf[i], 1, (size_t)sz[i], out) != (size_t)sz[i])
            return 6;
    fclose(out);
    return 0;
}
"""

# Exact prototypes from the spec (section 3 / 3.8a).  Assigning each function
# to a pointer of this type fails to compile (-Werror) if a signature differs.
SIGNATURES_C = r"""
#include "gemmini.h"
#include "gemmini.h" /* include guard */

#define CHECK_CAT2(a, b) a##b
#define CHECK_CAT(a, b) CHECK_CAT2(a, b)
#define CHECK(cond) typedef char CHECK_CAT(check_, __LINE__)[(cond) ? 1 : -1]

static void (*const p_matmul_auto)(size_t, size_t, size_t,
        const elem_t*, const elem_t*, const void*, void*,
        size_t, size_t, size_t, size_t,
        scale_t, scale_t, scale_acc_t,
        int, acc_scale_t, acc_scale_t,
        bool, bool, bool, bool, bool, uint8_t,
        enum tiled_matmul_type_t) = tiled_matmul_auto;
static void (*const p_matmul)(size_t, size_t, size_t,
        const elem_t*, const elem_t*, const void*, void*,
        size_t, size_t, size_t, size_t,
        scale_t, scale_t, scale_acc_t,
        int, acc_scale_t, acc_scale_t, bool,
        size_t, size_t, size_t,
        bool, bool, bool, bool, uint8_t,
        enum tiled_matmul_type_t) = tiled_matmul;
static void (*const p_conv_auto)(int, int, int, int, int, int, int,
        int, int, int, int, int,
        bool, bool, bool, bool, bool,
        const elem_t*, const elem_t*, const acc_t*, elem_t*,
        int, acc_scale_t, int, int, int,
        enum tiled_matmul_type_t) = tiled_conv_auto;
static void (*const p_conv_stride_auto)(int, int, int, int, int, int, int,
        int, int, int, int, int,
        int, int, int,
        bool, bool, bool, bool, bool,
        const elem_t*, const elem_t*, const acc_t*, elem_t*,
        int, acc_scale_t, int, int, int,
        enum tiled_matmul_type_t) = tiled_conv_stride_auto;
static void (*const p_conv)(int, int, int, int, int, int, int,
        int, int, int, int, int,
        int, int, int,
        bool, bool, bool, bool, bool,
        int, int, int, int, int, int, int,
        const elem_t*, const elem_t*, const acc_t*, elem_t*,
        int, acc_scale_t, int, int, int,
        enum tiled_matmul_type_t) = tiled_conv;
static void (*const p_conv_dw_auto)(int, int, int, int, int, int,
        int, int, int,
        elem_t*, elem_t*, acc_t*, elem_t*,
        int, acc_scale_t, int, int, int,
        enum tiled_matmul_type_t) = tiled_conv_dw_auto;
static void (*const p_conv_dw)(int, int, int, int, int, int,
        int, int, int,
        int, int, int, int, int,
        elem_t*, elem_t*, acc_t*, elem_t*,
        int, acc_scale_t, int, int, int,
        enum tiled_matmul_type_t) = tiled_conv_dw;
static void (*const p_resadd_auto)(const size_t, const size_t,
        const scale_t, const scale_t, const acc_scale_t,
        const elem_t*, const elem_t*, elem_t*, bool,
        enum tiled_matmul_type_t) = tiled_resadd_auto;
static void (*const p_resadd_stride_auto)(const size_t, const size_t,
        const scale_t, const scale_t, const acc_scale_t, const size_t,
        const elem_t*, const elem_t*, elem_t*, bool,
        enum tiled_matmul_type_t) = tiled_resadd_stride_auto;
static void (*const p_resadd)(const size_t, const size_t, const size_t,
        const size_t, const size_t,
        const scale_t, const scale_t, const acc_scale_t,
        const elem_t*, const elem_t*, elem_t*, bool,
        enum tiled_matmul_type_t) = tiled_resadd;
static void (*const p_gap_auto)(const elem_t*, elem_t*, int, int, int,
        enum tiled_matmul_type_t) = tiled_global_average_auto;
static void (*const p_gap)(const elem_t*, elem_t*, int, int, int, int) = tiled_global_average;
static uint64_t (*const p_cycles)(void) = read_cycles;

CHECK(sizeof(elem_t) == 1 && (elem_t)-1 < 0);
CHECK(sizeof(acc_t) == 4 && (acc_t)-1 < 0);
CHECK(sizeof(full_t) == 8 && (full_t)-1 < 0);
CHECK(sizeof(scale_acc_t) == 4);
CHECK(sizeof(scale_t) == sizeof(float));
CHECK(sizeof(acc_scale_t) == sizeof(float));
CHECK(OS == 0 && WS == 1 && CPU == 2);
CHECK(NO_ACTIVATION == 0 && RELU == 1);
CHECK(elem_t_max == 127 && elem_t_min == -128);
CHECK(DIM == EXPECT_DIM && BANK_NUM == 4 && BANK_ROWS == 4096 && ACC_ROWS == 1024);

static elem_t aligned_in[4][DIM] row_align(1);
static acc_t aligned_bias[DIM] row_align_acc(1);

int main(void)
{
    uint64_t t0, t1;
    gemmini_flush(0);
    t0 = read_cycles();
    gemmini_fence();
    t1 = read_cycles();
    if ((size_t)aligned_in % (DIM * sizeof(elem_t)) != 0)
        return 1;
    if ((size_t)aligned_bias % (DIM * sizeof(acc_t)) != 0)
        return 1;
    if (!((scale_t)0.5f > 0.0f && (acc_scale_t)0.5f > 0.0f))
        return 1; /* both float types */
    if (!(MVIN_SCALE_IDENTITY > 0.99 && MVIN_SCALE_IDENTITY < 1.01 && ACC_SCALE_IDENTITY > 0.99 &&
          ACC_SCALE_IDENTITY < 1.01))
        return 1;
    return (p_matmul_auto && p_matmul && p_conv_auto && p_conv_stride_auto && p_conv &&
            p_conv_dw_auto && p_conv_dw && p_resadd_auto && p_resadd_stride_auto && p_resadd &&
            p_gap_auto && p_gap && p_cycles && t1 >= t0) ? 0 : 1;
}
"""


# --------------------------------------------------------------------------
# Building and running
# --------------------------------------------------------------------------
def _compile(compiler, src: Path, exe: Path, extra=()):
    cmd = [compiler, *WARN, *extra, f"-I{HEADER_DIR}", str(src), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    return exe


BUILDS = {
    "gnu99-O2": ["-std=gnu99", "-O2"],
    "c11-O2": ["-std=c11", "-O2"],
    "gnu99-O0": ["-std=gnu99", "-O0"],
    "gnu99-O2-ffast-math": ["-std=gnu99", "-O2", "-ffast-math"],
}


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("host_gemmini")


@pytest.fixture(scope="session")
def drivers(build_dir):
    """Compile the driver once per build flavour (lazily)."""
    src = build_dir / "driver.c"
    src.write_text(DRIVER_C)
    cache = {}

    def get(name="gnu99-O2", extra=()):
        key = (name, tuple(extra))
        if key not in cache:
            exe = build_dir / f"driver-{name}-{len(cache)}"
            cache[key] = _compile(CC, src, exe, [*BUILDS[name], *extra])
        return cache[key]

    return get


@pytest.fixture(scope="session")
def driver(drivers):
    return drivers()


class Result:
    def __init__(self, proc, bufs):
        self.returncode = proc.returncode
        self.stdout = proc.stdout.decode(errors="replace")
        self.stderr = proc.stderr.decode(errors="replace")
        self.bufs = bufs


def run(exe, tmp_path, op, params, floats, bufs):
    """bufs: list of numpy arrays (or None = NULL).  Returns Result whose
    .bufs holds the arrays as the driver left them (same shapes/dtypes)."""
    data = bytearray()
    data += struct.pack("<q", op)
    data += struct.pack("<q", len(params)) + struct.pack(f"<{len(params)}q", *[int(p) for p in params])
    data += struct.pack("<q", len(floats)) + np.asarray(floats, dtype=np.float32).tobytes()
    data += struct.pack("<q", len(bufs))
    for b in bufs:
        if b is None:
            data += struct.pack("<q", -1)
        else:
            raw = np.ascontiguousarray(b).tobytes()
            data += struct.pack("<q", len(raw)) + raw
    out_file = tmp_path / f"out-{op}.bin"
    if out_file.exists():
        out_file.unlink()
    proc = subprocess.run([str(exe), str(out_file)], input=bytes(data), capture_output=True, timeout=120)
    outs = []
    if proc.returncode == 0:
        raw = out_file.read_bytes()
        pos = 0
        for b in bufs:
            if b is None or b.nbytes == 0:
                outs.append(b)
                continue
            n = b.nbytes
            outs.append(np.frombuffer(raw[pos:pos + n], dtype=b.dtype).reshape(b.shape).copy())
            pos += n
        assert pos == len(raw)
    return Result(proc, outs)


def ok(res):
    assert res.returncode == 0, f"rc={res.returncode}\nstdout: {res.stdout}\nstderr: {res.stderr}"
    assert res.stdout == ""
    return res.bufs


# --------------------------------------------------------------------------
# NumPy reference model (spec section 2)
# --------------------------------------------------------------------------
def acc_scale(acc, scale, relu=False):
    """Accumulator read-out: float32(acc) * float32(scale), round half to
    even, clip to int8, then ReLU (spec 2.4)."""
    acc32 = np.asarray(acc, dtype=np.int64).astype(np.int32)  # 32-bit accumulator
    y = acc32.astype(np.float32) * np.float32(scale)
    assert y.dtype == np.float32
    q = np.clip(np.rint(y), -128, 127)
    if relu:
        q = np.maximum(q, 0)
    return q.astype(np.int8)


def mvin_scale(x, s):
    """MVIN_SCALE (spec 2.2): sat_int8(rne(float32(x) * float32(s)))."""
    y = np.asarray(x).astype(np.float32) * np.float32(s)
    return np.clip(np.rint(y), -128, 127).astype(np.int64)


def rand_i8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int64).astype(np.int8)


def spread_scale(n_terms):
    """An output scale that spreads int8*int8 sums of n_terms over int8."""
    return float(np.float32(40.0 / (max(1.0, np.sqrt(n_terms)) * 74.0 * 74.0)))


# --------------------------------------------------------------------------
# Matmul
# --------------------------------------------------------------------------
def matmul_case(driver, tmp_path, *, I, J, K, seed=0, bias="none", relu=False,
                transpose_A=False, transpose_B=False, pad_A=0, pad_B=0, pad_D=0, pad_C=0,
                full_C=False, low_D=False, A_scale=1.0, B_scale=1.0, D_scale_factor=1,
                scale=None, mtype=WS, tiles=None, exe=None, A=None, B=None, D=None):
    rng = np.random.default_rng(seed)
    sA = (I if transpose_A else K) + pad_A
    sB = (K if transpose_B else J) + pad_B
    sD = J + pad_D
    sC = J + pad_C
    A_buf = rand_i8(rng, (K if transpose_A else I, sA)) if A is None else A
    B_buf = rand_i8(rng, (J if transpose_B else K, sB)) if B is None else B
    A_log = (A_buf[:, :I].T if transpose_A else A_buf[:, :K]).astype(np.int64)
    B_log = (B_buf[:, :K].T if transpose_B else B_buf[:, :J]).astype(np.int64)

    D_rows = 1 if bias == "repeating" else I
    if D is not None:
        D_buf = D
    elif bias == "none":
        D_buf = None
    elif low_D:
        D_buf = rand_i8(rng, (D_rows, sD))
    else:
        D_buf = rng.integers(-20000, 20000, size=(D_rows, sD), dtype=np.int64).astype(np.int32)

    C_dtype = np.int32 if full_C else np.int8
    C_buf = np.full((I, sC), SENTINEL, dtype=C_dtype)
    if scale is None:
        scale = spread_scale(K)

    # reference
    a = mvin_scale(A_log, A_scale)
    b = mvin_scale(B_log, B_scale)
    acc = a @ b
    if D_buf is not None:
        d = D_buf[:, :J].astype(np.int64)
        if low_D:
            d = mvin_scale(d, np.float32(D_scale_factor))
        acc = acc + d  # broadcasts the single row when repeating
    if full_C:
        expect = acc.astype(np.int64).astype(np.int32)
    else:
        expect = acc_scale(acc, scale, relu)

    params = [I, J, K, sA, sB, sD, sC, RELU if relu else NO_ACTIVATION,
              bias == "repeating", transpose_A, transpose_B, full_C, low_D, mtype, D_scale_factor]
    op = 1
    if tiles is not None:
        params += list(tiles)
        op = 2
    res = run(exe or driver, tmp_path, op, params, [A_scale, B_scale, scale],
              [A_buf, B_buf, D_buf, C_buf])
    out = ok(res)
    C_out = out[3]
    np.testing.assert_array_equal(C_out[:, :J], expect)
    assert (C_out[:, J:] == SENTINEL).all(), "matmul wrote past J"
    # inputs untouched
    np.testing.assert_array_equal(out[0], A_buf)
    np.testing.assert_array_equal(out[1], B_buf)
    return C_out[:, :J]


MATMUL_CASES = [
    pytest.param(dict(I=5, J=7, K=9), id="plain-5x7x9"),
    pytest.param(dict(I=16, J=16, K=16, bias="full"), id="bias-full"),
    pytest.param(dict(I=13, J=21, K=30, bias="repeating"), id="bias-repeating"),
    pytest.param(dict(I=13, J=21, K=30, bias="repeating", relu=True), id="bias-repeating-relu"),
    pytest.param(dict(I=8, J=8, K=8, relu=True), id="relu"),
    pytest.param(dict(I=9, J=11, K=17, transpose_B=True, bias="repeating"), id="transpose_B"),
    pytest.param(dict(I=9, J=11, K=17, transpose_A=True), id="transpose_A"),
    pytest.param(dict(I=10, J=12, K=14, bias="full", pad_A=3, pad_B=5, pad_D=2, pad_C=4),
                 id="strides-larger-than-dims"),
    pytest.param(dict(I=10, J=12, K=14, transpose_B=True, pad_B=7, pad_C=1),
                 id="transpose_B-strided"),
    pytest.param(dict(I=6, J=10, K=50, full_C=True), id="full_C"),
    pytest.param(dict(I=3, J=70, K=300, full_C=True, bias="repeating", transpose_B=True),
                 id="full_C-K300-transpose_B"),
    pytest.param(dict(I=6, J=10, K=50, full_C=True, bias="full", pad_C=3, pad_D=1),
                 id="full_C-bias-strided"),
    pytest.param(dict(I=7, J=9, K=12, low_D=True, bias="full"), id="low_D"),
    pytest.param(dict(I=7, J=9, K=12, low_D=True, bias="repeating", D_scale_factor=3),
                 id="low_D-scaled"),
    pytest.param(dict(I=7, J=9, K=12, A_scale=0.5, B_scale=1.7), id="mvin-scales-saturating"),
    pytest.param(dict(I=40, J=70, K=100, bias="repeating", relu=True), id="J-over-chunk-70"),
    pytest.param(dict(I=3, J=129, K=1, bias="full"), id="K1-J129"),
    pytest.param(dict(I=1, J=1, K=1), id="1x1x1"),
    pytest.param(dict(I=9, J=11, K=17, mtype=OS), id="type-OS"),
    pytest.param(dict(I=9, J=11, K=17, mtype=CPU, transpose_A=True), id="type-CPU"),
]


@pytest.mark.parametrize("case", MATMUL_CASES)
def test_matmul_auto(driver, tmp_path, case):
    matmul_case(driver, tmp_path, **case)


def test_matmul_types_agree(driver, tmp_path):
    outs = [matmul_case(driver, tmp_path, I=11, J=13, K=40, bias="repeating", relu=True, mtype=t)
            for t in (OS, WS, CPU)]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[1], outs[2])


def _rounding_inputs():
    rng = np.random.default_rng(1234)
    accs, scales = [], []
    # ties: acc = (2m+1) * 2^k, scale = 2^-(k+1) -> exactly m + 0.5
    for k in range(0, 12):
        for m in range(-130, 130, 7):
            accs.append((2 * m + 1) * 2 ** k)
            scales.append(2.0 ** -(k + 1))
    # spec examples: 1000*0.0625 = 62.5 -> 62; 1016*0.0625 = 63.5 -> 64
    accs += [1000, 1016, -1000, -1016]
    scales += [0.0625] * 4
    # int32 -> float32 rounding matters: 2^26+2^22+1 -> 2^26+2^22, *2^-23 = 8.5 -> 8
    accs += [2 ** 26 + 2 ** 22 + 1, -(2 ** 26 + 2 ** 22 + 1)]
    scales += [2.0 ** -23] * 2
    # product rounding matters: exact 0.5 + 2^-25 - 2^-48 rounds to float 0.5 -> 0
    accs += [2 ** 24 - 1]
    scales += [float(np.float32(2.0 ** -25 * (1 + 2.0 ** -23)))]
    # extremes
    accs += [2 ** 31 - 1, -(2 ** 31), 0, 1, -1, 127, 128, -128, -129]
    scales += [1.0, 1.0, 3.0, 1e-10, 0.5, 1.0, 1.0, 1.0, 1.0]
    for s in 10.0 ** rng.uniform(-10, 1, size=30):  # wide accs, log-uniform scales
        accs += list(rng.integers(-(2 ** 31), 2 ** 31, size=25))
        scales += [s] * 25
    for s in rng.uniform(0, 0.1, size=20):  # typical accs and scales
        accs += list(rng.integers(-5000, 5000, size=25))
        scales += [s] * 25
    return np.array(accs, dtype=np.int64), np.array(scales, dtype=np.float32)


@pytest.mark.parametrize("build", list(BUILDS))
def test_acc_scale_rounding_bit_exact(drivers, tmp_path, build):
    """acc (via a bias-only matmul) -> float32 scale -> round half even -> clip."""
    exe = drivers(build)
    accs, scales = _rounding_inputs()
    # group by scale value: one call per distinct scale
    got = np.empty(len(accs), dtype=np.int64)
    uniq = sorted(set(scales.tolist()))
    groups = {s: np.nonzero(scales == np.float32(s))[0] for s in uniq}
    # batch all accs of all scales: per scale, I=1, J=len(group), K=1, A=0
    for s, idx in groups.items():
        J = len(idx)
        D = accs[idx].astype(np.int32).reshape(1, J)
        A = np.zeros((1, 1), np.int8)
        B = np.ones((1, J), np.int8)
        C = np.full((1, J), SENTINEL, np.int8)
        res = run(exe, tmp_path, 1, [1, J, 1, 1, J, J, J, NO_ACTIVATION, 0, 0, 0, 0, 0, WS, 1],
                  [1.0, 1.0, s], [A, B, D, C])
        got[idx] = ok(res)[3][0]
    np.testing.assert_array_equal(got, acc_scale(accs, scales))
    # a few explicit values from the spec
    lut = {(1000, 0.0625): 62, (1016, 0.0625): 64, (2 ** 26 + 2 ** 22 + 1, 2.0 ** -23): 8}
    for (a, s), q in lut.items():
        i = np.nonzero((accs == a) & (scales == np.float32(s)))[0][0]
        assert got[i] == q


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    I=st.integers(1, 24), J=st.integers(1, 80), K=st.integers(1, 160),
    bias=st.sampled_from(["none", "full", "repeating"]), relu=st.booleans(),
    trans=st.sampled_from(["none", "A", "B"]), pads=st.tuples(*[st.integers(0, 3)] * 4),
    full_C=st.booleans(), seed=st.integers(0, 2 ** 32 - 1),
    scale=st.floats(0.0001220703125, 0.0625, width=32),
)
def test_matmul_random(driver, tmp_path, I, J, K, bias, relu, trans, pads, full_C, seed, scale):
    matmul_case(driver, tmp_path, I=I, J=J, K=K, bias=bias, relu=relu,
                transpose_A=trans == "A", transpose_B=trans == "B",
                pad_A=pads[0], pad_B=pads[1], pad_D=pads[2], pad_C=pads[3],
                full_C=full_C, seed=seed, scale=scale)


@pytest.mark.parametrize("tiles,mtype", [
    pytest.param((1, 1, 1), WS, id="1-1-1"),
    pytest.param((2, 3, 4), WS, id="2-3-4"),
    pytest.param((5, 5, 51), WS, id="5-5-51-spad-8160"),
    pytest.param((1, 32, 1), WS, id="1-32-1-acc-512"),
    pytest.param((8, 8, 1), OS, id="OS-8-8-1-acc-1024"),
    pytest.param((3, 2, 1), CPU, id="CPU-3-2-1"),
])
def test_matmul_explicit_tiles_valid(driver, tmp_path, tiles, mtype):
    kw = dict(I=37, J=45, K=70, bias="repeating", relu=True, seed=7, mtype=mtype)
    auto = matmul_case(driver, tmp_path, **kw)
    tiled = matmul_case(driver, tmp_path, tiles=tiles, **kw)
    np.testing.assert_array_equal(auto, tiled)


# --------------------------------------------------------------------------
# Convolution
# --------------------------------------------------------------------------
def conv_ref_acc(x, w, bias, *, stride, padding, kdil=1, idil=1, out_rows, out_cols, dw=False):
    """int64 accumulators of a conv. x: (N,H,W,C); w: (K,K,C,OC) or (C,K,K) for dw."""
    N, H, W, C = x.shape
    K = w.shape[1] if dw else w.shape[0]
    Hd, Wd = (H - 1) * idil + 1, (W - 1) * idil + 1
    xd = np.zeros((N, Hd, Wd, C), np.int64)
    xd[:, ::idil, ::idil, :] = x
    need_r = (out_rows - 1) * stride + (K - 1) * kdil + 1
    need_c = (out_cols - 1) * stride + (K - 1) * kdil + 1
    xp = np.zeros((N, max(need_r, padding + Hd), max(need_c, padding + Wd), C), np.int64)
    xp[:, padding:padding + Hd, padding:padding + Wd, :] = xd
    OC = C if dw else w.shape[3]
    acc = np.zeros((N, out_rows, out_cols, OC), np.int64)
    if bias is not None:
        acc += np.asarray(bias, np.int64)
    for kr in range(K):
        for kc in range(K):
            r0, c0 = kr * kdil, kc * kdil
            patch = xp[:, r0:r0 + (out_rows - 1) * stride + 1:stride,
                       c0:c0 + (out_cols - 1) * stride + 1:stride, :]
            if dw:
                acc += patch * w[:, kr, kc].astype(np.int64)
            else:
                acc += np.tensordot(patch, w[kr, kc].astype(np.int64), axes=([3], [0]))
    return acc


def pool_ref(y, size, stride, padding):
    """Max pool whose out-of-range positions count as 0 (spec 2.9)."""
    N, R, C, OC = y.shape
    pr = (R + 2 * padding - size) // stride + 1
    pc = (C + 2 * padding - size) // stride + 1
    yp = np.zeros((N, R + 2 * padding, C + 2 * padding, OC), np.int64)
    yp[:, padding:padding + R, padding:padding + C, :] = y
    wins = [yp[:, i:i + (pr - 1) * stride + 1:stride, j:j + (pc - 1) * stride + 1:stride, :]
            for i in range(size) for j in range(size)]
    return np.max(np.stack(wins), axis=0).astype(np.int8)


def natural_out(dim, k, stride, padding, kdil=1, idil=1):
    dd = (dim - 1) * idil + 1
    return (dd + 2 * padding - ((k - 1) * kdil + 1)) // stride + 1


def conv_case(driver, tmp_path, *, N=1, H=8, W=8, IC=3, OC=5, K=3, stride=1, padding=1,
              kdil=1, idil=1, out_rows=None, out_cols=None, bias=True, relu=False,
              pool=(0, 0, 0), pad_in=0, pad_w=0, pad_out=0, ctype=WS, seed=0, scale=None,
              tiles=None, op=None, dw=False, x=None, small=False):
    """small=True: values in [-2, 2] and scale 1, so every int8 output equals
    its int32 accumulator (catches off-by-one-term errors)."""
    rng = np.random.default_rng(seed)
    draw = (lambda shape: rng.integers(-2, 3, size=shape).astype(np.int8)) if small else \
        (lambda shape: rand_i8(rng, shape))
    if out_rows is None:
        out_rows = natural_out(H, K, stride, padding, kdil, idil)
    if out_cols is None:
        out_cols = natural_out(W, K, stride, padding, kdil, idil)
    if dw:
        OC = IC
    in_stride, w_stride, out_stride = IC + pad_in, OC + pad_w, OC + pad_out
    x_buf = draw((N, H, W, in_stride)) if x is None else x
    if dw:
        w_buf = draw((IC, K, K))
        w_log = w_buf
    else:
        w_buf = draw((K * K * IC, w_stride))
        w_log = w_buf[:, :OC].reshape(K, K, IC, OC)
    b_max = 10 if small else 30000
    b_buf = rng.integers(-b_max, b_max, size=OC, dtype=np.int64).astype(np.int32) if bias else None
    pool_size, pool_stride, pool_padding = pool
    if pool_stride:
        R = (out_rows + 2 * pool_padding - pool_size) // pool_stride + 1
        Cc = (out_cols + 2 * pool_padding - pool_size) // pool_stride + 1
    else:
        R, Cc = out_rows, out_cols
    out_buf = np.full((N, R, Cc, out_stride), SENTINEL, np.int8)
    if scale is None:
        scale = 1.0 if small else spread_scale(K * K * (1 if dw else IC))

    acc = conv_ref_acc(x_buf[..., :IC], w_log, b_buf, stride=stride, padding=padding, kdil=kdil,
                       idil=idil, out_rows=out_rows, out_cols=out_cols, dw=dw)
    y = acc_scale(acc, scale, relu)
    expect = pool_ref(y, pool_size, pool_stride, pool_padding) if pool_stride else y

    act = RELU if relu else NO_ACTIVATION
    if dw:
        params = [N, H, W, IC, out_rows, out_cols, stride, padding, K, act,
                  pool_size, pool_stride, pool_padding, ctype]
        if tiles is None:
            op = 6
        else:
            op = 7
            params += list(tiles)
    else:
        params = [N, H, W, IC, OC, out_rows, out_cols, stride, idil, kdil, padding, K,
                  in_stride, w_stride, out_stride, 0, 0, 0, 0, 0, act,
                  pool_size, pool_stride, pool_padding, ctype]
        if tiles is not None:
            op = 5
            params += list(tiles)
        elif op is None:
            op = 3 if (pad_in == 0 and pad_w == 0 and pad_out == 0) else 4
    res = run(driver, tmp_path, op, params, [scale], [x_buf, w_buf, b_buf, out_buf])
    out = ok(res)[3]
    np.testing.assert_array_equal(out[..., :OC], expect)
    assert (out[..., OC:] == SENTINEL).all(), "conv wrote outside its channels"
    return out[..., :OC]


CONV_CASES = [
    pytest.param(dict(), id="3x3-s1-p1"),
    pytest.param(dict(K=1, padding=0, IC=16, OC=16), id="1x1"),
    pytest.param(dict(K=3, stride=2, padding=1, H=9, W=7, IC=4, OC=6), id="3x3-s2-p1-odd"),
    pytest.param(dict(K=5, stride=1, padding=2, IC=3, OC=8, relu=True), id="5x5-s1-p2-relu"),
    pytest.param(dict(K=7, stride=2, padding=3, H=16, W=16, IC=3, OC=8, relu=True,
                      pool=(3, 2, 1)), id="7x7-s2-p3-relu-pool3s2p1"),
    pytest.param(dict(K=3, padding=0, kdil=2, H=9, W=10), id="kernel-dilation-2"),
    pytest.param(dict(K=3, padding=2, kdil=2, H=7, W=7, relu=True), id="kernel-dilation-2-pad2"),
    pytest.param(dict(K=3, padding=1, idil=2, H=5, W=6), id="input-dilation-2"),
    pytest.param(dict(K=3, padding=1, idil=3, stride=2, H=5, W=5, ctype=CPU),
                 id="input-dilation-3-stride2-CPU"),
    pytest.param(dict(K=3, padding=1, H=6, W=6, out_rows=8, out_cols=7),
                 id="bottom-right-zero-pad"),
    pytest.param(dict(K=2, padding=0, H=5, W=5, out_rows=5, out_cols=5, relu=True),
                 id="asymmetric-pad-end-only"),
    pytest.param(dict(bias=False), id="no-bias"),
    pytest.param(dict(N=3, H=5, W=4), id="batch-3"),
    pytest.param(dict(IC=20, OC=70, H=5, W=5, relu=True), id="OC-70-chunked"),
    pytest.param(dict(IC=5, OC=7, pad_in=3, pad_w=9, pad_out=4), id="strided-channels"),
    pytest.param(dict(IC=5, OC=7, pad_in=3, pad_w=9, pad_out=4, pool=(2, 2, 0), relu=True),
                 id="strided-channels-pool"),
    pytest.param(dict(K=1, padding=0, stride=2, H=8, W=8, IC=8, OC=8), id="1x1-s2-downsample-shape"),
    pytest.param(dict(ctype=CPU, relu=True), id="type-CPU"),
    pytest.param(dict(small=True, K=3, IC=3, OC=4, stride=2, H=9, W=9), id="exact-3x3-s2"),
    pytest.param(dict(small=True, K=3, IC=2, OC=3, kdil=2, padding=2, out_rows=9, out_cols=8),
                 id="exact-dilated-extra-out"),
    pytest.param(dict(small=True, K=3, IC=2, OC=3, idil=2, H=4, W=5), id="exact-input-dilation"),
    pytest.param(dict(small=True, K=2, IC=3, OC=66, pool=(3, 2, 1), pad_out=2), id="exact-pool"),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(driver, tmp_path, case):
    conv_case(driver, tmp_path, **case)


POOLS = [(2, 1, 0), (2, 2, 0), (3, 1, 1), (3, 2, 1), (3, 2, 0), (2, 2, 1), (3, 1, 0), (2, 1, 1)]


@pytest.mark.parametrize("pool", [pytest.param(p, id=f"size{p[0]}-stride{p[1]}-pad{p[2]}")
                                  for p in POOLS])
@pytest.mark.parametrize("relu", [pytest.param(True, id="relu"), pytest.param(False, id="norelu")])
def test_conv_pool(driver, tmp_path, pool, relu):
    conv_case(driver, tmp_path, H=9, W=8, IC=4, OC=6, relu=relu, pool=pool, seed=sum(pool))


def test_conv_pool_padding_counts_as_zero(driver, tmp_path):
    """All-negative conv outputs: zero padding shows up as 0 in the border windows,
    while the one window inside the 4x4 conv output keeps its negative max."""
    x = np.full((1, 4, 4, 1), 1, np.int8)
    out = np.full((1, 2, 2, 1), SENTINEL, np.int8)
    w = np.full((1, 1), -100, np.int8)  # 1x1 conv, IC=OC=1
    params = [1, 4, 4, 1, 1, 4, 4, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, NO_ACTIVATION, 3, 2, 1, WS]
    res = run(driver, tmp_path, 3, params, [0.5], [x, w, None, out])
    # windows start at rows/cols -1 and 1: three of them reach into the padding
    expect = np.array([0, 0, 0, -50], np.int8).reshape(1, 2, 2, 1)
    np.testing.assert_array_equal(ok(res)[3], expect)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(), N=st.integers(1, 2), H=st.integers(1, 9), W=st.integers(1, 9),
    IC=st.integers(1, 9), OC=st.integers(1, 20), K=st.integers(1, 4), stride=st.integers(1, 3),
    kdil=st.integers(1, 2), relu=st.booleans(), bias=st.booleans(),
    pads=st.tuples(*[st.integers(0, 3)] * 3), seed=st.integers(0, 2 ** 32 - 1), small=st.booleans(),
)
def test_conv_random(driver, tmp_path, data, N, H, W, IC, OC, K, stride, kdil, relu, bias, pads, seed,
                     small):
    padding = data.draw(st.integers(0, K - 1), label="padding")
    out_rows = natural_out(H, K, stride, padding, kdil)
    out_cols = natural_out(W, K, stride, padding, kdil)
    extra = data.draw(st.tuples(st.integers(0, 2), st.integers(0, 2)), label="extra_out")
    out_rows, out_cols = out_rows + extra[0], out_cols + extra[1]
    if out_rows < 1 or out_cols < 1:
        out_rows, out_cols = max(out_rows, 1), max(out_cols, 1)
    pool = (0, 0, 0)
    if data.draw(st.booleans(), label="pool"):
        size = data.draw(st.integers(1, 3), label="pool_size")
        pst = data.draw(st.integers(1, 3), label="pool_stride")
        ppad = data.draw(st.integers(0, 1), label="pool_padding")
        if out_rows + 2 * ppad >= size and out_cols + 2 * ppad >= size:
            pool = (size, pst, ppad)
    conv_case(driver, tmp_path, N=N, H=H, W=W, IC=IC, OC=OC, K=K, stride=stride, padding=padding,
              kdil=kdil, out_rows=out_rows, out_cols=out_cols, bias=bias, relu=relu, pool=pool,
              pad_in=pads[0], pad_w=pads[1], pad_out=pads[2], seed=seed, op=4, small=small)


@pytest.mark.parametrize("tiles", [
    pytest.param((1, 1, 1, 1, 1, 1, 1), id="all-1"),
    pytest.param((1, 2, 3, 16, 3, 3, 4), id="mixed"),
    pytest.param((2, 4, 4, 5, 3, 3, 4), id="full-problem"),
])
def test_conv_explicit_tiles_valid(driver, tmp_path, tiles):
    kw = dict(N=2, H=8, W=8, IC=4, OC=5, relu=True, pool=(2, 2, 0), seed=3)
    auto = conv_case(driver, tmp_path, **kw)
    tiled = conv_case(driver, tmp_path, tiles=tiles, **kw)
    np.testing.assert_array_equal(auto, tiled)


def test_conv_explicit_tiles_large_channels(driver, tmp_path):
    """kchs=512 of 1024 input channels fits (A+B = 1152+4608 rows <= 8192)."""
    conv_case(driver, tmp_path, N=1, H=4, W=4, IC=1024, OC=16, K=3, padding=1,
              tiles=(1, 4, 4, 16, 3, 3, 512), seed=5)


# --------------------------------------------------------------------------
# Depthwise convolution
# --------------------------------------------------------------------------
DW_CASES = [
    pytest.param(dict(IC=8, K=3, padding=1), id="3x3-s1-p1"),
    pytest.param(dict(IC=8, K=3, stride=2, padding=1, H=9, W=9, relu=True), id="3x3-s2-p1-relu"),
    pytest.param(dict(IC=5, K=5, padding=2, H=7, W=6), id="5x5-p2"),
    pytest.param(dict(IC=70, K=3, padding=1, H=4, W=4, relu=True), id="C70-chunked"),
    pytest.param(dict(IC=6, K=3, padding=1, relu=True, pool=(3, 2, 1)), id="pool3s2p1-relu"),
    pytest.param(dict(IC=6, K=3, padding=1, pool=(2, 2, 0)), id="pool2s2-norelu"),
    pytest.param(dict(IC=6, K=3, padding=0, bias=False, N=2), id="no-bias-batch2"),
    pytest.param(dict(IC=6, K=3, padding=1, out_rows=9, out_cols=10), id="bottom-right-zero-pad"),
    pytest.param(dict(IC=6, K=3, padding=1, ctype=CPU), id="type-CPU"),
    pytest.param(dict(IC=67, K=5, padding=2, stride=2, small=True), id="exact-5x5-s2-C67"),
]


@pytest.mark.parametrize("case", DW_CASES)
def test_conv_dw(driver, tmp_path, case):
    conv_case(driver, tmp_path, dw=True, **case)


@pytest.mark.parametrize("tiles", [
    pytest.param((1, 1, 1, 1, 1), id="all-1"),
    pytest.param((1, 2, 3, 3, 3), id="mixed"),
])
def test_conv_dw_explicit_tiles_valid(driver, tmp_path, tiles):
    kw = dict(dw=True, IC=7, K=3, padding=1, relu=True, seed=11)
    auto = conv_case(driver, tmp_path, **kw)
    tiled = conv_case(driver, tmp_path, tiles=tiles, **kw)
    np.testing.assert_array_equal(auto, tiled)


# --------------------------------------------------------------------------
# Residual add
# --------------------------------------------------------------------------
def resadd_case(driver, tmp_path, *, I=7, J=19, pad=0, A_scale=1.0, B_scale=1.0, C_scale=1.0,
                relu=False, alias=0, mtype=WS, seed=0, tiles=None, op=None):
    rng = np.random.default_rng(seed)
    stride = J + pad
    A = rand_i8(rng, (I, stride))
    B = rand_i8(rng, (I, stride))
    C = np.full((I, stride), SENTINEL, np.int8)
    a = mvin_scale(A[:, :J], A_scale)
    b = mvin_scale(B[:, :J], B_scale)
    expect = acc_scale(a + b, C_scale, relu)
    params = [I, J, stride, relu, mtype, alias]
    if tiles is not None:
        op = 10
        params += list(tiles)
    elif op is None:
        op = 8 if pad == 0 else 9
    res = run(driver, tmp_path, op, params, [A_scale, B_scale, C_scale], [A, B, C])
    outs = ok(res)
    got = outs[[2, 0, 1][alias]]
    np.testing.assert_array_equal(got[:, :J], expect)
    if pad:
        assert (got[:, J:] == ([SENTINEL] if alias == 0 else [A, B][alias - 1][:, J:])).all()
    if alias != 1:
        np.testing.assert_array_equal(outs[0], A)
    if alias != 2:
        np.testing.assert_array_equal(outs[1], B)
    return got[:, :J]


RESADD_CASES = [
    pytest.param(dict(), id="identity-scales"),
    pytest.param(dict(A_scale=0.5, B_scale=0.75, C_scale=0.8), id="scales-below-1"),
    pytest.param(dict(A_scale=1.5, B_scale=2.0, C_scale=0.5), id="scales-above-1-saturating"),
    pytest.param(dict(A_scale=0.3, C_scale=1.7, relu=True), id="relu-output-saturating"),
    pytest.param(dict(A_scale=0.7, relu=True, alias=2), id="in-place-C-is-B"),
    pytest.param(dict(B_scale=0.6, alias=1), id="in-place-C-is-A"),
    pytest.param(dict(I=5, J=10, pad=6, A_scale=0.9, C_scale=0.5), id="stride"),
    pytest.param(dict(I=5, J=10, pad=6, A_scale=0.9, relu=True, alias=2), id="stride-in-place"),
    pytest.param(dict(I=33, J=100, A_scale=0.25, B_scale=0.5, C_scale=3.0), id="large"),
    pytest.param(dict(mtype=CPU, A_scale=0.5, relu=True), id="type-CPU"),
]


@pytest.mark.parametrize("case", RESADD_CASES)
def test_resadd(driver, tmp_path, case):
    resadd_case(driver, tmp_path, **case)


def test_resadd_input_saturates_before_add(driver, tmp_path):
    """a' = sat(100*2) = 127, b' = 0 -> 127 with C_scale 1, not 200*0.5 = 100."""
    A = np.full((1, 1), 100, np.int8)
    B = np.zeros((1, 1), np.int8)
    C = np.zeros((1, 1), np.int8)
    res = run(driver, tmp_path, 8, [1, 1, 1, 0, WS, 0], [2.0, 1.0, 0.5], [A, B, C])
    assert ok(res)[2][0, 0] == 64  # round_half_even(127 * 0.5 = 63.5) = 64


@pytest.mark.parametrize("tiles", [
    pytest.param((1, 1), id="1x1"),
    pytest.param((7, 19), id="whole"),
    pytest.param((16, 512), id="acc-512"),
])
def test_resadd_explicit_tiles_valid(driver, tmp_path, tiles):
    resadd_case(driver, tmp_path, A_scale=0.5, relu=True, alias=2, tiles=tiles)


# --------------------------------------------------------------------------
# Global average pooling
# --------------------------------------------------------------------------
def gap_ref(x, dim):
    N = x.shape[0]
    s = x.reshape(N, dim * dim, -1).astype(np.int64).sum(axis=1)
    return acc_scale(s, np.float32(1.0 / (dim * dim)))


@pytest.mark.parametrize("N,C,dim", [
    pytest.param(1, 8, 1, id="dim1"), pytest.param(2, 16, 2, id="dim2"),
    pytest.param(1, 10, 3, id="dim3-inexact-reciprocal"), pytest.param(3, 70, 7, id="dim7-C70"),
    pytest.param(1, 5, 5, id="dim5"),
])
@pytest.mark.parametrize("gtype", [pytest.param(WS, id="WS"), pytest.param(CPU, id="CPU")])
def test_global_average(driver, tmp_path, N, C, dim, gtype):
    rng = np.random.default_rng(dim * 100 + C)
    x = rand_i8(rng, (N, dim, dim, C))
    out = np.full((N, C), SENTINEL, np.int8)
    res = run(driver, tmp_path, 11, [N, C, dim, gtype], [], [x, out])
    np.testing.assert_array_equal(ok(res)[1], gap_ref(x, dim))


def test_global_average_ties_round_half_even(driver, tmp_path):
    # dim=2: 4 pixels per channel; reciprocal 0.25 is exact, so sums hit .5 exactly
    sums = [2, 6, -2, -6, 10, -10, 14, -14, 508, -512, 1, -1, 3, -3]
    expect = [0, 2, 0, -2, 2, -2, 4, -4, 127, -128, 0, 0, 1, -1]
    # (sum + count/2)/count, the CPU twin upstream, would give 1, 2, 0, -1, ... instead
    x = np.zeros((1, 2, 2, len(sums)), np.int8)
    for c, s in enumerate(sums):
        q, r = divmod(s, 4)
        vals = [q + 1] * r + [q] * (4 - r)
        assert sum(vals) == s and all(-128 <= v <= 127 for v in vals)
        x[0, :, :, c] = np.array(vals, np.int8).reshape(2, 2)
    out = np.full((1, len(sums)), SENTINEL, np.int8)
    res = run(driver, tmp_path, 11, [1, len(sums), 2, WS], [], [x, out])
    got = ok(res)[1][0]
    np.testing.assert_array_equal(got, np.array(expect, np.int8))
    np.testing.assert_array_equal(got, gap_ref(x, 2)[0])


def test_global_average_ties_dim3(driver, tmp_path):
    """dim=3: float32(1/9) is slightly above 1/9, so 4.5-ish sums round via float32 math."""
    rng = np.random.default_rng(99)
    x = rand_i8(rng, (4, 3, 3, 64))
    x[0, :, :, :] = 0
    x[0, 0, 0, :] = np.arange(-32, 32) * 4 + 2  # sums k*9/2-ish around ties
    out = np.full((4, 64), SENTINEL, np.int8)
    res = run(driver, tmp_path, 11, [4, 64, 3, WS], [], [x, out])
    np.testing.assert_array_equal(ok(res)[1], gap_ref(x, 3))


def test_global_average_explicit_tile(driver, tmp_path):
    rng = np.random.default_rng(5)
    x = rand_i8(rng, (2, 4, 4, 20))
    out = np.full((2, 20), SENTINEL, np.int8)
    res = run(driver, tmp_path, 12, [2, 20, 4, WS, 16], [], [x, out])
    np.testing.assert_array_equal(ok(res)[1], gap_ref(x, 4))


# --------------------------------------------------------------------------
# Rejected arguments: exit status 1 and a "gemmini: <function>: ..." message
# --------------------------------------------------------------------------
def _mm_params(**kw):
    p = dict(I=8, J=8, K=8, sA=8, sB=8, sD=8, sC=8, act=0, rep=0, tA=0, tB=0, fullC=0, lowD=0,
             type=WS, dsf=1, tI=1, tJ=1, tK=1)
    p.update(kw)
    return list(p.values())


def _mm_bufs():
    return [np.zeros((8, 8), np.int8), np.zeros((8, 8), np.int8), None, np.zeros((8, 8), np.int8)]


def _conv_params(**kw):
    p = dict(N=1, H=4, W=4, IC=2, OC=2, OR=4, OCOL=4, stride=1, idil=1, kdil=1, padding=1, K=3,
             ins=2, ws=2, outs=2, wrot180=0, to1203=0, ti3120=0, tw1203=0, tw0132=0, act=0,
             psize=0, pstride=0, ppad=0, type=WS, b=1, pr=1, pc=1, poch=2, kr=3, kc=3, kch=2)
    p.update(kw)
    return list(p.values())


def _conv_bufs(H=4, W=4, IC=2, OC=2, K=3, out=(4, 4)):
    return [np.zeros((1, H, W, IC), np.int8), np.zeros((K * K * IC, OC), np.int8), None,
            np.zeros((1, out[0], out[1], OC), np.int8)]


def _dw_params(**kw):
    p = dict(N=1, H=4, W=4, C=2, OR=4, OCOL=4, stride=1, padding=1, K=3, act=0,
             psize=0, pstride=0, ppad=0, type=WS, b=1, pr=1, pc=1, kr=3, kc=3)
    p.update(kw)
    return list(p.values())


def _dw_bufs():
    return [np.zeros((1, 4, 4, 2), np.int8), np.zeros((2, 3, 3), np.int8), None,
            np.zeros((1, 4, 4, 2), np.int8)]


def _ra_bufs():
    return [np.zeros((4, 8), np.int8), np.zeros((4, 8), np.int8), np.zeros((4, 8), np.int8)]


REJECT_CASES = [
    pytest.param(1, _mm_params(tA=1, tB=1), [1, 1, 1], _mm_bufs(),
                 r"tiled_matmul_auto: WS cannot transpose both", id="matmul-WS-transpose-both"),
    pytest.param(1, _mm_params(tB=1, type=OS), [1, 1, 1], _mm_bufs(),
                 r"tiled_matmul_auto: OS does not support transpose", id="matmul-OS-transpose"),
    pytest.param(1, _mm_params(fullC=1, type=CPU), [1, 1, 1], _mm_bufs(),
                 r"tiled_matmul_auto: full_C and low_D are not implemented for CPU",
                 id="matmul-CPU-full_C"),
    pytest.param(1, _mm_params(act=2), [1, 1, 1], _mm_bufs(),
                 r"tiled_matmul_auto: activation 2 is not supported", id="matmul-LAYERNORM"),
    pytest.param(1, _mm_params(type=7), [1, 1, 1], _mm_bufs(),
                 r"tiled_matmul_auto: unknown tiled_matmul_type_t 7", id="matmul-bad-type"),
    pytest.param(2, _mm_params(tI=0), [1, 1, 1], _mm_bufs(),
                 r"tiled_matmul: tile sizes must be positive", id="matmul-tile-zero"),
    pytest.param(2, _mm_params(tI=5, tJ=5, tK=52), [1, 1, 1], _mm_bufs(),
                 r"tiled_matmul: tile \(tile_I=5, tile_J=5, tile_K=52\) exceeds the scratchpad: "
                 r"8320 rows > 8192", id="matmul-tile-spad"),
    pytest.param(2, _mm_params(tI=6, tJ=6, tK=1), [1, 1, 1], _mm_bufs(),
                 r"tiled_matmul: tile \(tile_I=6, tile_J=6, tile_K=1\) exceeds the accumulator: "
                 r"576 rows > 512", id="matmul-tile-acc"),
    pytest.param(2, _mm_params(tI=8, tJ=9, tK=1, type=OS), [1, 1, 1], _mm_bufs(),
                 r"tiled_matmul: tile .* exceeds the accumulator: 1152 rows > 1024",
                 id="matmul-tile-acc-OS"),
    pytest.param(3, _conv_params(type=OS), [1.0], _conv_bufs(),
                 r"tiled_conv_auto: Gemmini convs do not currently support OS", id="conv-OS"),
    pytest.param(4, _conv_params(wrot180=1), [1.0], _conv_bufs(),
                 r"tiled_conv_stride_auto: wrot180/trans_\* layouts are not supported",
                 id="conv-wrot180"),
    pytest.param(3, _conv_params(ti3120=1), [1.0], _conv_bufs(),
                 r"tiled_conv_auto: wrot180/trans_\* layouts", id="conv-trans_input_3120"),
    pytest.param(3, _conv_params(tw0132=1), [1.0], _conv_bufs(),
                 r"tiled_conv_auto: wrot180/trans_\* layouts", id="conv-trans_weight_0132"),
    pytest.param(3, _conv_params(padding=3), [1.0], _conv_bufs(),
                 r"tiled_conv_auto: kernel_dim \(3\) must be larger than padding \(3\)",
                 id="conv-padding-ge-kernel"),
    pytest.param(3, _conv_params(idil=3), [1.0], _conv_bufs(),
                 r"tiled_conv_auto: Gemmini supports input_dilation <= 2", id="conv-input-dilation-3"),
    pytest.param(3, _conv_params(idil=2, stride=2), [1.0], _conv_bufs(),
                 r"tiled_conv_auto: Gemmini supports input_dilation <= 2, and 2 only with stride 1",
                 id="conv-input-dilation-2-stride-2"),
    pytest.param(3, _conv_params(psize=4, pstride=1), [1.0], _conv_bufs(),
                 r"tiled_conv_auto: Gemmini pooling needs", id="conv-pool-size-4"),
    pytest.param(3, _conv_params(act=3), [1.0], _conv_bufs(),
                 r"tiled_conv_auto: activation 3 is not supported", id="conv-IGELU"),
    pytest.param(5, _conv_params(kch=0), [1.0], _conv_bufs(),
                 r"tiled_conv: tile sizes must be positive", id="conv-tile-zero"),
    pytest.param(5, _conv_params(IC=1024, ins=1024, H=4, W=4, kch=1024, poch=2, pr=4, pc=4),
                 [1.0], _conv_bufs(IC=1024),
                 r"tiled_conv: tile \(batches=1, porows=4, pocols=4, pochs=2, krows=3, kcols=3, "
                 r"kchs=1024\) exceeds the scratchpad: \d+ rows > 8192", id="conv-tile-spad"),
    pytest.param(5, _conv_params(H=24, W=24, OR=24, OCOL=24, pr=20, pc=20, poch=32, OC=32, ws=32,
                                 outs=32), [1.0], _conv_bufs(H=24, W=24, OC=32, out=(24, 24)),
                 r"tiled_conv: tile .* exceeds the accumulator: 800 rows > 512", id="conv-tile-acc"),
    pytest.param(6, _dw_params(type=OS), [1.0], _dw_bufs(),
                 r"tiled_conv_dw_auto: Gemmini convs do not currently support OS", id="dw-OS"),
    pytest.param(7, _dw_params(pr=3, pc=3, b=60), [1.0], _dw_bufs(),
                 r"tiled_conv_dw: tile .* exceeds the accumulator: 540 rows > 512", id="dw-tile-acc"),
    pytest.param(8, [4, 8, 8, 0, OS, 0], [1, 1, 1], _ra_bufs(),
                 r"tiled_resadd_auto: resadd supports only WS and CPU", id="resadd-OS"),
    pytest.param(10, [4, 8, 8, 0, WS, 0, 17, 512], [1, 1, 1], _ra_bufs(),
                 r"tiled_resadd: tile \(tile_I=17, tile_J=512\) exceeds the accumulator: "
                 r"1024 rows > 512", id="resadd-tile-acc"),
    pytest.param(10, [4, 8, 8, 0, WS, 0, 0, 8], [1, 1, 1], _ra_bufs(),
                 r"tiled_resadd: tile sizes must be positive", id="resadd-tile-zero"),
    pytest.param(12, [1, 2, 2, WS, 0], [], [np.zeros((1, 2, 2, 2), np.int8), np.zeros((1, 2), np.int8)],
                 r"tiled_global_average: tile size must be positive", id="gap-tile-zero"),
]


@pytest.mark.parametrize("op,params,floats,bufs,message", REJECT_CASES)
def test_rejected_arguments(driver, tmp_path, op, params, floats, bufs, message):
    res = run(driver, tmp_path, op, params, floats, bufs)
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert re.search(r"^gemmini: " + message, res.stdout, re.M), res.stdout


def test_params_overridable(drivers, tmp_path):
    """-DACC_ROWS=64 shrinks the accumulator budget to 32 rows for WS tiles."""
    exe = drivers("gnu99-O2", ["-DACC_ROWS=64"])
    res = run(exe, tmp_path, 2, _mm_params(tI=1, tJ=2, tK=1), [1, 1, 1], _mm_bufs())
    ok(res)
    res = run(exe, tmp_path, 2, _mm_params(tI=1, tJ=3, tK=1), [1, 1, 1], _mm_bufs())
    assert res.returncode == 1
    assert "exceeds the accumulator: 48 rows > 32" in res.stdout
    exe8 = drivers("gnu99-O2", ["-DDIM=8"])
    ok(run(exe8, tmp_path, 2, _mm_params(tI=8, tJ=8, tK=1), [1, 1, 1], _mm_bufs()))  # 512 rows


# --------------------------------------------------------------------------
# Compilation: signatures, warnings, standards, cross compiler
# --------------------------------------------------------------------------
@pytest.mark.parametrize("flags", [
    pytest.param(["-std=gnu99", "-O2"], id="gnu99"),
    pytest.param(["-std=c11", "-O2"], id="c11"),
    pytest.param(["-std=c99", "-O0", "-Wpedantic"], id="c99-pedantic"),
    pytest.param(["-std=c11", "-O2", "-Wpedantic", "-Wshadow", "-Wconversion", "-Wsign-conversion",
                  "-Wfloat-equal", "-Wstrict-prototypes", "-Wmissing-prototypes", "-Wcast-qual",
                  "-Wundef", "-Wunused-function"], id="c11-many-warnings"),
    pytest.param(["-std=c11", "-O2", "-DGEMMINI_HOST_PORTABLE_CYCLES"], id="c11-portable-cycles"),
    pytest.param(["-std=gnu99", "-O2", "-DGEMMINI_HOST_PORTABLE_CYCLES"], id="gnu99-portable-cycles"),
])
def test_header_compiles_with_exact_signatures(tmp_path, flags):
    src = tmp_path / "sig.c"
    src.write_text(SIGNATURES_C)
    exe = _compile(CC, src, tmp_path / "sig", [*flags, "-DEXPECT_DIM=16"])
    assert subprocess.run([str(exe)]).returncode == 0


def test_dim_override(tmp_path):
    src = tmp_path / "sig.c"
    src.write_text(SIGNATURES_C)
    exe = _compile(CC, src, tmp_path / "sig", ["-std=gnu99", "-O2", "-DDIM=32", "-DEXPECT_DIM=32"])
    assert subprocess.run([str(exe)]).returncode == 0


def _riscv_available():
    return shutil.which(RISCV_CC) is not None


@pytest.mark.parametrize("target", [
    pytest.param(["-march=rv64gc", "-mabi=lp64d"], id="rv64gc"),
    pytest.param(["-march=rv32imac", "-mabi=ilp32"], id="rv32imac"),
])
@pytest.mark.parametrize("std", ["gnu99", "c11"])
def test_riscv_picolibc_compile(tmp_path, target, std):
    if not _riscv_available():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{RISCV_CC} is required when CI=true "
                        "(apt-get install gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf)")
        pytest.skip(f"{RISCV_CC} not installed")
    # --oslib=semihost supplies stdio/exit for linking (Spike/QEMU semihosting)
    flags = [*target, "--specs=picolibc.specs", "--oslib=semihost", f"-std={std}", "-O2"]
    sig = tmp_path / "sig.c"
    sig.write_text(SIGNATURES_C)
    _compile(RISCV_CC, sig, tmp_path / "sig.elf", [*flags, "-DEXPECT_DIM=16"])
    drv = tmp_path / "driver.c"
    drv.write_text(DRIVER_C)
    _compile(RISCV_CC, drv, tmp_path / "driver.elf", flags)
    # rdcycle is what read_cycles uses on RISC-V
    dump = shutil.which("riscv64-unknown-elf-objdump")
    if dump:
        text = subprocess.run([dump, "-d", str(tmp_path / "sig.elf")], capture_output=True,
                              text=True).stdout
        assert re.search(r"\brdcycle\b|csrr\s+\w+,\s*cycle\b", text)
