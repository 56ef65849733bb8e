"""Measure the runtime's CPU kernels on Spike: the cost table of onnx2gemmini/cpu/cost_table.py, and the
depthwise kernel's fit.

    python scripts/measure_cpu_kernels.py --table    # fit every kernel path's cost terms; print the table
    python scripts/measure_cpu_kernels.py --write    # ... and write onnx2gemmini/cpu/cost_table.py
    python scripts/measure_cpu_kernels.py --check    # re-measure; exit 1 where a coefficient moved > 2%
    python scripts/measure_cpu_kernels.py [--cross riscv64-unknown-elf-] [--spike spike] [--keep DIR]
                                                     # (no mode) o2g_dwconv alone, 32 geometries, with cycle

The table: every C call of a CPU step is a cost key (a C function, or one of its paths) and terms
(onnx2gemmini/cpu/costs.py: call, elem, row, tap, mac, pixel, computed from the call's arguments by the same
functions the kernels use). TABLE_CASES below calls each key at 3 to 32 sizes through scripts/bench_spike.py's
driver (outputs checked against the NumPy kernels; the generated Makefile's `riscv` flags), reads instret
around each call on Spike and fits per key, by relative least squares (each size weighs alike),
instructions = sum of coefficient x term. Instructions retired, not cycles: the compiler multiplies them by
the config's cpu_cpi.

Why: onnx2gemmini/tiling/dw.py sends a depthwise conv to Gemmini or to this CPU kernel by comparing
estimated cycles; the CPU side comes from here instead of a guess.

What it does: copies the project's own o2g_runtime.c/.h and o2g_htif.c into a temp dir with a small
driver, builds them for rv64gc + picolibc with the flags of the generated Makefile's `riscv` target
(read from runtime/templates/Makefile.in), runs the program on Spike, and reads `csrr instret` and
`csrr cycle` around each o2g_dwconv call. Spike retires one instruction per cycle, so both counters give
INSTRUCTIONS RETIRED, not the cycles of a real core: the fit is instructions per MAC and per output, and
tiling/dw.py turns it into cycles with an explicit CPI constant. Nothing is downloaded.
scripts/bench_spike.py measures every other kernel the same way (`bench_spike.py --dw` runs this script).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

import sys

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from onnx2gemmini.cpu import costs  # noqa: E402
from onnx2gemmini.cpu.costs import taps_inside as _taps_inside  # noqa: E402


def taps_inside(size: int, kernel: int, stride: int, padding: int, out: int) -> int:
    return _taps_inside(size, kernel, stride, padding, 1, out)


RUNTIME = Path(__file__).resolve().parent.parent / "onnx2gemmini" / "runtime"

# (input rows = cols, channels); each runs with kernel 3 and 5, stride 1 and 2, "same" padding K//2
SHAPES = [(7, 16), (7, 256), (14, 64), (14, 128), (28, 32), (28, 128), (56, 16), (56, 64)]
GEOMETRIES = [(h, c, k, s) for h, c in SHAPES for k in (3, 5) for s in (1, 2)]

DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include "o2g_runtime.h"

#define MAX_IN (56 * 56 * 256)
static int8_t x[MAX_IN], y[MAX_IN], weights[5 * 5 * 256];
static int32_t bias[256];
static const int geometries[][4] = { /* rows = cols, channels, kernel, stride */
@GEOMETRIES@
};

static uint64_t instret(void) { uint64_t v; __asm__ __volatile__("csrr %0, instret" : "=r"(v)); return v; }
static uint64_t cycle(void) { uint64_t v; __asm__ __volatile__("csrr %0, cycle" : "=r"(v)); return v; }

int main(void)
{
    uint32_t seed = 1;
    size_t i, g;
    for (i = 0; i < sizeof x; i++)
        x[i] = (int8_t)((seed = seed * 1103515245u + 12345u) >> 24);
    for (i = 0; i < sizeof weights; i++)
        weights[i] = (int8_t)((seed = seed * 1103515245u + 12345u) >> 24);
    for (i = 0; i < 256; i++)
        bias[i] = (int32_t)(seed = seed * 1103515245u + 12345u) >> 20;
    for (g = 0; g < sizeof geometries / sizeof geometries[0]; g++) {
        const int h = geometries[g][0], c = geometries[g][1], k = geometries[g][2], s = geometries[g][3];
        const int p = k / 2, out = (h + 2 * p - k) / s + 1;
        const struct o2g_window w = {k, k, s, s, p, p, p, p, 1, 1, out, out};
        uint64_t i0, c0, i1, c1;
        uint32_t sum = 0;
        int j;
        i0 = instret();
        c0 = cycle();
        o2g_dwconv(x, weights, bias, y, 1, h, h, c, &w, 1, 0.0123f, 1);
        c1 = cycle();
        i1 = instret();
        for (j = 0; j < out * out * c; j++)
            sum = sum * 31u + (uint8_t)y[j];
        printf("dw %d %d %d %d %d %llu %llu %lu\n", h, c, k, s, out, (unsigned long long)(i1 - i0),
               (unsigned long long)(c1 - c0), (unsigned long)sum);
    }
    return 0;
}
"""


def makefile_vars(path: Path) -> dict[str, str]:
    """The `NAME ?= value` settings of the generated Makefile, with $(NAME) references expanded,
    so the measured build uses exactly the flags a user's `make riscv` uses."""
    text = path.read_text().replace("\\\n", " ")
    raw = dict(re.findall(r"^([A-Z_]+)\s*\?=[ \t]*(.*)$", text, re.M))

    def expand(value: str) -> str:
        return re.sub(r"\$\((\w+)\)", lambda m: expand(raw.get(m.group(1), "")), value)
    return {name: expand(value) for name, value in raw.items()}


def build(work: Path, cross: str) -> Path:
    for name in ("o2g_runtime.c", "o2g_runtime.h", "o2g_htif.c"):
        shutil.copy(RUNTIME / name, work / name)
    rows = ",\n".join(f"    {{{h}, {c}, {k}, {s}}}" for h, c, k, s in GEOMETRIES)
    (work / "driver.c").write_text(DRIVER.replace("@GEOMETRIES@", rows))
    v = makefile_vars(RUNTIME / "templates" / "Makefile.in")
    cmd = [f"{cross}gcc", *v["RISCV_CFLAGS"].split(), *v["PICOLIBC_SPECS"].split(), "-I.", "-o", "dw-riscv",
           "driver.c", "o2g_runtime.c", "o2g_htif.c", *v["RISCV_MEMORY"].split(), "-lm"]
    print("build:", " ".join(cmd))
    subprocess.run(cmd, cwd=work, check=True)
    return work / "dw-riscv"


def run(binary: Path, spike: str) -> list[dict]:
    out = subprocess.run([spike, str(binary)], capture_output=True, text=True, check=True, timeout=3600).stdout
    rows = []
    for line in out.splitlines():
        if line.startswith("dw "):
            h, c, k, s, o, instret, cycles, _ = (int(f) for f in line.split()[1:])
            taps = taps_inside(h, k, s, k // 2, o)
            rows.append({"h": h, "c": c, "k": k, "s": s, "out": o, "instret": instret, "cycles": cycles,
                         "outputs": o * o * c, "macs": o * o * c * k * k, "valid_macs": taps * taps * c,
                         "pixels": o * o})
    if len(rows) != len(GEOMETRIES):
        raise SystemExit(f"expected {len(GEOMETRIES)} measurements, got {len(rows)}:\n{out}")
    return rows


def fit(rows: list[dict]) -> tuple[float, float, float]:
    """Least squares, no intercept, relative error (a 7x7 layer weighs as much as a 56x56 one: the decision
    is made for both): instret = per_mac * MACs inside the input + per_output * outputs + per_pixel * output
    pixels. The kernel skips taps in the padding and sets up each pixel once for all channels; a two-term
    fit over padded MACs (ConvDw.macs) misses small maps by up to 25% (printed for comparison)."""
    return _least_squares(rows, ("valid_macs", "outputs", "pixels"))


def _least_squares(rows: list[dict], terms: tuple[str, ...]) -> tuple[float, ...]:
    a = np.array([[r[t] for t in terms] for r in rows], float)
    b = np.array([r["instret"] for r in rows], float)
    coefficients, *_ = np.linalg.lstsq(a / b[:, None], np.ones_like(b), rcond=None)
    return tuple(float(c) for c in coefficients)


# --- the cost table --------------------------------------------------------------------------------------

BINARY_KINDS = [a + b for a in "QFS" for b in "QFS"]
TABLE_PATH = ROOT / "onnx2gemmini" / "cpu" / "cost_table.py"


def _binary_case(bs, r, fn, kinds, rows, run):
    """a is full (rows x run) unless S (rows x 1); b is broadcast over rows (1 x run) unless S (rows x 1)."""
    ka, kb = kinds
    a_shape = (rows, 1) if ka == "S" else (rows, run)
    b_shape = (rows, 1) if kb == "S" else (1, run)
    out = tuple(max(x, y) for x, y in zip(a_shape, b_shape))
    case = bs.binary_case(r, fn, a_shape, b_shape, a_float=ka == "F", b_float=kb == "F")
    parts = costs.binary_terms(fn, out, bs.broadcast_strides(a_shape, out), bs.broadcast_strides(b_shape, out),
                               ka == "F", kb == "F", False)
    assert len(parts) == 1
    return parts[0] + (case,)


def table_cases(seed: int = 0) -> list[tuple[str, dict, object]]:
    """(cost key, terms, bench_spike Case) for every measured call."""
    import bench_spike as bs
    r = np.random.default_rng(seed)
    out = []

    def add(terms, case):
        out.append((*terms, case))

    for n in (1000, 4096, 50000):
        add(costs.quantize_terms(n), bs.quantize_case(r, n))
    for shape in ((1, 3, 32, 32), (1, 16, 16, 16), (1, 1, 28, 28), (1, 64, 8, 8), (1, 3, 64, 64)):
        add(costs.quantize_nhwc_terms(*shape), bs.quantize_nhwc_case(r, *shape))
    for shape, perm in (((1, 28, 28, 64), (0, 3, 1, 2)), ((1, 64, 28, 28), (0, 2, 3, 1)),
                        ((1, 28, 28, 2, 58), (0, 1, 2, 4, 3)), ((4, 49, 8, 32), (0, 2, 1, 3)),
                        ((1, 7, 7, 512), (0, 3, 1, 2)), ((1, 16, 64, 64), (0, 2, 1, 3)), ((1, 4, 4, 8), (0, 3, 1, 2)),
                        ((1, 8, 2, 2), (0, 2, 3, 1)), ((2, 3, 16), (1, 0, 2)), ((1, 10, 6, 6), (0, 2, 3, 1)),
                        ((1, 16, 3, 2, 32), (2, 0, 3, 1, 4)), ((1, 2, 16, 32), (0, 2, 1, 3)), ((2, 16, 32), (0, 2, 1))):
        add(costs.transpose_terms(shape, perm), bs.transpose_case(r, shape, perm))
    for n, lo, hi in ((1000, 0, 127), (65536, 0, 127), (4096, 0, 100), (65536, 0, 100), (300, 0, 6),
                      (65536, 3, 60), (5000, 3, 60), (65536, 3, 127), (5000, 3, 127),
                      (4096, -128, 127), (65536, -128, 127), (100, -128, 127),
                      (65536, -50, 60), (2000, -20, 127), (10, -20, 100), (40, -20, 100), (63, -5, 5)):
        add(costs.clip_terms(n, lo, hi), bs.clip_case(r, n, lo, hi))
    for n in (1000, 4096, 65536):
        add(costs.lut_terms(n), bs.lut_case(r, n))
    for outer, n, inner, count in ((784, 64, 1, 32), (100, 64, 1, 8), (1, 1000, 1, 500), (1, 1000, 64, 128),
                                   (1, 100, 16, 50), (4, 50, 256, 20), (1, 12, 48, 1), (1, 8, 16, 2), (2, 4, 8, 4)):
        add(costs.gather_terms(outer, inner, count), bs.gather_case(r, outer, n, inner, count))
    for in_shape, maps in (((1, 28, 28, 64), [[0], bs.pad_map(28, 1, 1), bs.pad_map(28, 1, 1), list(range(64))]),
                           ((1, 28, 28, 128), [[0], list(range(28)), list(range(28)), list(range(32, 96))]),
                           ((1, 56, 56, 32), [[0], list(range(0, 56, 2)), list(range(0, 56, 2)), list(range(32))]),
                           ((1, 14, 14, 64), [[0], [i // 2 for i in range(28)], [i // 2 for i in range(28)],
                                              list(range(64))]),
                           ((1, 64, 28, 28), [[0], list(range(64)), list(range(1, 27)), list(range(1, 27))]),
                           ((1, 20, 20, 16), [[0], bs.pad_map(20, 0, 1), bs.pad_map(20, 0, 1), list(range(16))]),
                           ((1, 32, 40, 40), [[0], list(range(32)), list(range(0, 40, 2)), list(range(0, 40, 2))]),
                           ((1, 16, 30, 30), [[0], list(range(16)), list(range(2, 28)), list(range(2, 28))]),
                           ((1, 8, 20, 20), [[0], list(range(8)), list(range(20)), [i // 2 for i in range(40)]]),
                           ((1, 10, 10, 64), [[0], list(range(10)), list(range(10)), list(range(0, 64, 2))]),
                           ((1, 16, 192), [[0], list(range(16)), list(range(64, 128))]),
                           ((1, 4, 48), [[0], list(range(4)), list(range(16))]),
                           ((1, 8, 8, 32), [[0], list(range(8)), list(range(8)), list(range(16, 32))])):
        index = [i for m in maps for i in m]
        add(costs.remap_terms(in_shape, [len(m) for m in maps], index), bs.remap_case(r, in_shape, maps))
    for outer, part, inner, total, offset, si, so in ((784, 32, 1, 96, 32, .02, .02), (1, 64, 784, 128, 64, .02, .02),
                                                      (49, 256, 1, 512, 0, .02, .02), (1, 32, 100, 32, 0, .02, .02),
                                                      (400, 16, 1, 48, 16, .02, .02), (144, 16, 1, 64, 16, .02, .02),
                                                      (144, 16, 1, 64, 16, .02, .03), (36, 32, 1, 64, 0, .02, .03),
                                                      (784, 32, 1, 96, 32, .02, .03), (100, 16, 1, 48, 0, .02, .03),
                                                      (1, 64, 784, 128, 0, .02, .03), (16, 128, 1, 256, 0, .02, .03),
                                                      (10, 8, 1, 16, 8, .02, .03), (4, 16, 1, 32, 0, .02, .03),
                                                      (1, 100, 1, 200, 0, .02, .03)):
        same = np.float32(si) == np.float32(so)
        add(costs.concat_terms(outer, part, inner, total, same),
            bs.concat_case(r, outer, part, inner, total, offset, si, so))
    for op, geos in (("im2col", ((28, 28, 32, 3, 1, 1), (56, 56, 3, 7, 2, 3), (14, 14, 64, 3, 2, 1), (8, 8, 16, 2, 2, 0),
                                 (32, 32, 3, 3, 1, 1), (16, 16, 8, 5, 1, 2))),
                     ("maxpool", ((56, 56, 64, 3, 2, 1), (28, 28, 32, 2, 2, 0), (14, 14, 128, 3, 1, 1),
                                  (8, 8, 16, 2, 2, 0), (20, 20, 64, 5, 1, 2))),
                     ("avgpool", ((28, 28, 64, 3, 1, 1), (14, 14, 128, 2, 2, 0), (7, 7, 256, 7, 1, 0),
                                  (8, 8, 32, 3, 2, 1)))):
        for h, w, c, k, st, p in geos:
            o = (bs.out_dims(h, k, st, p, p, 1), bs.out_dims(w, k, st, p, p, 1))
            add(costs.window_terms(op, 1, c, (k, k), o), bs.windowed(op, r, 1, h, w, c, k, st, p))
    for h, c, k, st in GEOMETRIES:
        p = k // 2
        o = (bs.out_dims(h, k, st, p, p, 1),) * 2
        add(costs.dwconv_terms(1, h, h, c, 1, (k, k), (st, st), (p,) * 4, (1, 1), o), bs.dwconv_case(r, 1, h, h, c, k, st, p))
    for outer, n, inner in ((1, 1000, 1), (32, 64, 1), (128, 10, 1), (8, 197, 1), (64, 49, 1), (1, 10, 1), (1, 100, 1), (4, 300, 1),
                            (1, 10, 64), (1, 20, 16), (4, 8, 32)):
        add(costs.softmax_terms(outer, n, inner), bs.softmax_case(r, outer, n, inner))
    for outer, n in ((128, 256), (16, 768), (49, 96), (64, 64), (8, 32)):
        add(costs.layernorm_terms(outer, n), bs.layernorm_case(r, outer, n))
    for outer, c, inner, size in ((784, 64, 1, 5), (1, 64, 196, 5), (100, 32, 1, 3)):
        add(costs.lrn_terms(outer, c, inner, size), bs.lrn_case(r, outer, c, inner, size))
    for outer, c, inner in ((784, 64, 1), (400, 16, 1), (1000, 8, 1), (1, 64, 784), (100, 32, 1), (10, 8, 1),
                            (2, 16, 100)):
        add(costs.affine_terms(outer, c, inner), bs.affine_case(r, outer, c, inner))
    for kind in ("sum", "mean", "max", "min", "l2"):
        for outer, n, inner in ((1, 196, 64), (64, 196, 1), (16, 49, 8), (128, 8, 1), (1, 49, 256), (4, 16, 32),
                                (1, 1000, 1)):
            add(costs.reduce_terms(kind, outer, n, inner), bs.reduce_case(r, outer, n, inner, kind))
    for a, b, axes in (((1, 14, 14, 64), (1, 28, 28, 64), (1, 2)), ((1, 8, 16, 16), (1, 8, 32, 32), (2, 3)),
                       ((1, 4, 8, 32), (1, 8, 16, 32), (1, 2))):
        add(costs.resize_terms("linear", a, b), bs.resize_case(r, a, b, axes))
    for a, b, axes, onnx in (((1, 14, 14, 64), (1, 28, 28, 64), (1, 2), (1, 64, 14, 14)),
                             ((1, 8, 16, 16), (1, 8, 32, 32), (2, 3), None),
                             ((1, 4, 8, 32), (1, 8, 16, 32), (1, 2), (1, 32, 4, 8))):
        add(costs.resize_terms("cubic", a, b), bs.cubic_resize_case(r, a, b, axes, onnx_shape=onnx))
    for cell in ("lstm", "gru"):
        for seq, batch, hidden, dirs in ((24, 1, 128, 2), (10, 1, 32, 1), (16, 2, 64, 1), (8, 1, 256, 1)):
            add(costs.recurrent_terms(cell, seq, batch, hidden, dirs),
                bs.recurrent_case(r, cell, seq, batch, hidden, dirs, wide=True))
    for fn in ("add", "sub", "mul", "div", "max", "min", "prelu", "hypot"):
        for kinds in BINARY_KINDS:
            geos = ((1, 400), (50, 8), (20, 64), (6, 200)) if set(kinds) == {"Q", "S"} else \
                ((1, 2000), (200, 8), (40, 64), (6, 600))
            for rows, run in geos:
                out.append(_binary_case(bs, r, fn, kinds, rows, run))
    for rows, run in ((1, 4096), (8, 512), (64, 600), (2, 2000)):
        out.append(_binary_case(bs, r, "mul", "QS", rows, run))
    t = np.random.default_rng(7)  # the transformer kernels' own stream: the other keys' data stay as they were
    for outer, n, inner in ((1, 1000, 1), (32, 64, 1), (128, 10, 1), (8, 197, 1), (64, 49, 1), (1, 10, 1), (4, 300, 1),
                            (1, 10, 64), (1, 20, 16), (4, 8, 32)):
        add(costs.softmax_terms(outer, n, inner, "softmax_masked"), bs.softmax_masked_case(t, outer, n, inner, (n, inner)))
    for batch, heads, queries, keys, form in ((1, 4, 16, 16, "padding"), (2, 12, 32, 32, "causal"),
                                              (1, 2, 128, 128, "padding"), (1, 8, 64, 64, "causal"),
                                              (1, 1, 4, 300, "padding"), (2, 2, 8, 8, "query_key")):
        add(costs.softmax_terms(batch * heads * queries, keys, 1, "softmax_input_mask"),
            bs.softmax_input_mask_case(t, batch, heads, queries, keys, form))
    for outer, rows, inner, count in ((1, 1000, 64, 16), (1, 5000, 128, 128), (1, 50, 768, 32), (1, 100, 16, 256),
                                      (1, 2, 64, 16)):
        add(costs.lookup_terms("embedding", inner, count), bs.embedding_case(t, outer, rows, inner, count, 8))
    for batch, seq, rows, inner in ((1, 16, 66, 64), (2, 128, 514, 128), (1, 32, 64, 768), (4, 8, 20, 16)):
        add(costs.lookup_terms("position_embedding", inner, batch * seq),
            bs.position_embedding_case(t, batch, seq, rows, inner, 1))
    for rows, row_len in ((16, 64), (128, 768), (32, 128), (256, 16), (4, 1000)):
        add(costs.lookup_terms("mask_rows", row_len, rows), bs.mask_rows_case(t, rows, row_len))
    return out


def measure_table(work: Path, spike: str, cross: str, keys=None) -> list[tuple[str, dict, object, int]]:
    """Each table case (of `keys`, default all) measured on Spike: (key, terms, case, instructions)."""
    import bench_spike as bs
    cases = [c for c in table_cases() if keys is None or c[0] in keys]
    results = bs.measure([c[2] for c in cases], work, spike, cross)
    # a kernel allowed 1 LSB (libm) is checked by hash first: compare its bytes where the hash differs
    again = [k for k, res in enumerate(results) if not res.ok and res.case.tol != bs.EXACT]
    if again:
        for k, res in zip(again, bs.measure([results[k].case for k in again], work / "dump", spike, cross, dump=True)):
            results[k] = res
    bad = [res.case.name for res in results if not res.ok]
    if bad:
        raise SystemExit(f"wrong outputs: {', '.join(bad)}")
    return [(k, t, c, res.instret) for (k, t, c), res in zip(cases, results)]


def fit_table(measured) -> dict[str, dict[str, float]]:
    """Per key: relative non-negative least squares over its terms (no term may cost negative instructions,
    so a small call never gets a negative estimate); errors per case are printed."""
    from scipy.optimize import nnls
    table = {}
    for key in sorted({m[0] for m in measured}):
        rows = [m for m in measured if m[0] == key]
        names = sorted({t for m in rows for t in m[1]}, key=["call", "elem", "row", "pixel", "tap", "mac"].index)
        a = np.array([[m[1].get(t, 0) for t in names] for m in rows], float)
        b = np.array([m[3] for m in rows], float)
        coef = nnls(a / b[:, None], np.ones_like(b))[0]
        table[key] = {t: round(float(c), 3) for t, c in zip(names, coef)}
    return table


def table_errors(measured, table) -> list[tuple[str, str, int, float, float]]:
    """(key, case name, measured, estimated, relative error) per case."""
    rows = []
    for key, terms, case, n in measured:
        est = sum(table.get(key, {}).get(t, 0.0) * c for t, c in terms.items())
        rows.append((key, case.name, n, est, est / n - 1))
    return rows


def write_table(table: dict, path: Path = TABLE_PATH) -> None:
    lines = ['"""GENERATED by `python scripts/measure_cpu_kernels.py --write`: do not edit.',
             "",
             "Instructions retired on Spike per term (onnx2gemmini/cpu/costs.py) of each CPU kernel path: the runtime's",
             "o2g_runtime.c built with the generated Makefile's `riscv` flags (rv64gc, -O2 -ffast-math, picolibc).",
             '"""', "COSTS: dict[str, dict[str, float]] = {"]
    for key, coef in table.items():
        lines.append(f"    {key!r}: {{" + ", ".join(f"{t!r}: {c!r}" for t, c in coef.items()) + "},")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


def run_table(args) -> None:
    work = args.keep or Path(tempfile.mkdtemp(prefix="o2g-measure-table-"))
    try:
        measured = measure_table(work, args.spike, args.cross)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    from onnx2gemmini.cpu.cost_table import COSTS
    table = COSTS if args.check else fit_table(measured)
    errors = table_errors(measured, table)
    print(f"{'key':<22} {'case':<52} {'instructions':>13} {'estimate':>13} {'error':>7}")
    for key, name, n, est, err in errors:
        print(f"{key:<22} {name[:52]:<52} {n:>13,} {est:>13,.0f} {err:>+7.1%}")
    worst = max(abs(e[4]) for e in errors)
    print(f"\n{len(errors)} calls, {len(table)} keys; |error| max {worst:.1%}, "
          f"mean {np.mean([abs(e[4]) for e in errors]):.1%}")
    if args.check:
        fitted = fit_table(measured)
        def off(k, t):  # per-call constants move with the driver's own set-up code around each call
            rel, absolute = (0.15, 40.0) if t == "call" else (0.02, 1.0)
            return abs(fitted[k].get(t, 0) - table[k].get(t, 0)) > max(rel * abs(table[k].get(t, 0)), absolute)
        stale = [k for k in fitted if k not in table or any(off(k, t) for t in set(fitted[k]) | set(table[k]))]
        if stale:
            raise SystemExit(f"cost table out of date for {', '.join(stale)}: python scripts/measure_cpu_kernels.py --write")
        print("cost table up to date (each coefficient within 2% of a re-fit or 1 instruction; per call 15% or 40)")
        return
    for key, coef in table.items():
        print(f"  {key:<22} " + ", ".join(f"{t} {c:g}" for t, c in coef.items()))
    if args.write:
        write_table(table)
        print(f"wrote {TABLE_PATH.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cross", default="riscv64-unknown-elf-")
    parser.add_argument("--spike", default="spike")
    parser.add_argument("--keep", type=Path, help="build in this directory and keep it")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--table", action="store_true", help="fit and print the cost table")
    mode.add_argument("--write", action="store_true", help="fit and write onnx2gemmini/cpu/cost_table.py")
    mode.add_argument("--check", action="store_true", help="re-measure and compare with the table")
    args = parser.parse_args()
    if args.table or args.write or args.check:
        run_table(args)
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="o2g-measure-dw-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        rows = run(build(work, args.cross), args.spike)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    per_mac, per_output, per_pixel = fit(rows)
    print(f"\n{'in':>3} {'C':>4} {'K':>2} {'s':>2} {'out':>3} {'MACs inside':>11} {'outputs':>8} {'instret':>11} "
          f"{'cycle':>11} {'instr/MAC':>9} {'fit err':>8}")
    errors = []
    for r in rows:
        predicted = per_mac * r["valid_macs"] + per_output * r["outputs"] + per_pixel * r["pixels"]
        errors.append(predicted / r["instret"] - 1)
        print(f"{r['h']:>3} {r['c']:>4} {r['k']:>2} {r['s']:>2} {r['out']:>3} {r['valid_macs']:>11,} "
              f"{r['outputs']:>8,} {r['instret']:>11,} {r['cycles']:>11,} {r['instret'] / r['valid_macs']:>9.2f} "
              f"{errors[-1]:>+8.1%}")
    err = np.abs(errors)
    print(f"\nfit over {len(rows)} geometries: instret = {per_mac:.2f} * MACs inside the input + {per_output:.2f} "
          f"* outputs + {per_pixel:.2f} * output pixels; |error| max {err.max():.1%}, mean {err.mean():.1%}")
    two = _least_squares(rows, ("macs", "outputs"))
    err2 = np.abs([(two[0] * r["macs"] + two[1] * r["outputs"]) / r["instret"] - 1 for r in rows])
    print(f"(two terms over padded MACs: {two[0]:.2f} * MACs + {two[1]:.2f} * outputs; |error| max {err2.max():.1%})")
    print("Spike retires one instruction per cycle: these are instructions, not a real core's cycles.")
    print(f"onnx2gemmini/tiling/dw.py:\nCPU_INSTRUCTIONS_PER_MAC = {per_mac:.2f}\n"
          f"CPU_INSTRUCTIONS_PER_OUTPUT = {per_output:.2f}\nCPU_INSTRUCTIONS_PER_PIXEL = {per_pixel:.2f}")

if __name__ == "__main__":
    main()
