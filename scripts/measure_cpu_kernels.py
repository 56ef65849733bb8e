"""Measure the runtime's int8 depthwise kernel (o2g_dwconv) on Spike: instructions per MAC and per output.

    python scripts/measure_cpu_kernels.py [--cross riscv64-unknown-elf-] [--spike spike] [--keep DIR]

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

from onnx2gemmini.tiling.dw import taps_inside

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cross", default="riscv64-unknown-elf-")
    parser.add_argument("--spike", default="spike")
    parser.add_argument("--keep", type=Path, help="build in this directory and keep it")
    args = parser.parse_args()
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
