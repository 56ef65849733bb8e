"""Plan onnx's light ResNet-50 and compare our tiles with gemmini.h's heuristic, layer by layer.

Usage:  python scripts/bench_planning.py [--model PATH] [--config NAME] [--check]

Prints, for every conv/matmul step, the baseline's and our tiles, the modelled DMA bytes (exact, from the
tiles and gemmini.h's loop nests) and the estimated cycles (an ESTIMATE, see docs/cost_model.md), then the
totals and the planning time. --check exits 1 unless the targets hold: total bytes <= 0.8x the baseline,
no layer above its baseline, planning under 10 s.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import onnx

import onnx2gemmini as o2g
from onnx2gemmini.config import load_config
from onnx2gemmini.plan import Conv, Matmul
from onnx2gemmini.tiling import apply_tiles, plan_costs
from onnx2gemmini.tiling.cost import conv_axis, conv_axis_sums

TARGET_RATIO, TARGET_SECONDS = 0.8, 10.0


def default_model() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx")


def fmt_tiles(tiles: dict) -> str:
    return "(" + ",".join(str(v) for v in tiles.values()) + ")"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--config", default="default")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the targets are met")
    args = ap.parse_args(argv)

    config = load_config(args.config)
    plan = o2g.compile(args.model, num_calib=1, config=config, tiling="auto").plan  # untiled: time the search
    conv_axis.cache_clear()
    conv_axis_sums.cache_clear()
    t0 = time.perf_counter()
    tiled = apply_tiles(plan, config)
    t_search = time.perf_counter() - t0
    t0 = time.perf_counter()
    costs = plan_costs(tiled)
    t_cost = time.perf_counter() - t0

    print(f"model {os.path.basename(args.model)}, config {config.name} (DIM {config.dim}); "
          "bytes are exact for the model, cycles are ESTIMATES")
    print(f"{'layer':8} {'call':6} {'baseline tiles':26} {'ours':26} {'base bytes':>11} {'our bytes':>11} "
          f"{'ratio':>6} {'base cyc':>9} {'our cyc':>9}")
    ours = base = ours_cyc = base_cyc = 0
    ours_nb = base_nb = 0
    worst = (0.0, "")
    layers = 0
    for step, c in zip(tiled.steps, costs):
        if c is None or not isinstance(step, (Matmul, Conv)):
            continue
        layers += 1
        ratio = c["dram_bytes"] / c["baseline_dram_bytes"]
        worst = max(worst, (ratio, step.node))
        ours += c["dram_bytes"]
        base += c["baseline_dram_bytes"]
        ours_cyc += c["est_cycles"]
        base_cyc += c["baseline_est_cycles"]
        ours_nb += c["dram_bytes"] - c["dram_breakdown"]["bias"]
        base_nb += c["baseline_dram_bytes"] - c["baseline_dram_breakdown"]["bias"]
        print(f"{step.node[:8]:8} {step.kind:6} {fmt_tiles(c['baseline_tiles']):26} {fmt_tiles(c['tiles']):26} "
              f"{c['baseline_dram_bytes']:11,} {c['dram_bytes']:11,} {ratio:6.3f} "
              f"{c['baseline_est_cycles']:9,} {c['est_cycles']:9,}")
    others = [(s, c) for s, c in zip(tiled.steps, costs) if c is not None and not isinstance(s, (Matmul, Conv))]
    other_bytes = sum(c["dram_bytes"] for _, c in others)
    worse = [s.node for s, c in zip(tiled.steps, costs)
             if c is not None and c["dram_bytes"] > c["baseline_dram_bytes"]]
    total_ratio = ours / base
    print()
    print(f"conv/matmul layers: {layers}")
    print(f"DMA bytes, conv+matmul: ours {ours:,} vs baseline {base:,} = {total_ratio:.3f}x "
          f"(target <= {TARGET_RATIO}x)")
    print(f"  without the int32 bias rows (re-read per output row): {ours_nb:,} vs {base_nb:,} = "
          f"{ours_nb / base_nb:.3f}x")
    print(f"  worst layer: {worst[1]} at {worst[0]:.3f}x; layers above baseline: {len(worse)}")
    print(f"DMA bytes, all {layers + len(others)} Gemmini steps (resadd/global-average tiles unchanged): "
          f"{(ours + other_bytes) / (base + other_bytes):.3f}x")
    print(f"estimated cycles, conv+matmul (ESTIMATE): ours {ours_cyc:,} vs baseline {base_cyc:,} = "
          f"{ours_cyc / base_cyc:.3f}x")
    print(f"planning time: search {t_search:.3f} s, cost figures {t_cost:.3f} s (target < {TARGET_SECONDS} s)")
    ok = total_ratio <= TARGET_RATIO and not worse and t_search < TARGET_SECONDS
    print("targets:", "met" if ok else "NOT met")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
