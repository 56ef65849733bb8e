"""Emulator speed against onnxruntime, side by side in one run (reported as ratios, never asserted).

    python scripts/bench_emulator.py [resnet50 ...]

Uses onnx's light model-zoo architectures (synthetic weights: fine for speed, never for accuracy).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import onnx

import onnx2gemmini as o2g
from onnx2gemmini.ort_session import session
from onnx2gemmini.golden import build_qdq
from onnx2gemmini.run.emulator import Emulator

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def best_of(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet50"])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'model':14} {'emulator s':>11} {'ORT fp32 s':>11} {'ORT QDQ s':>10} {'emu/fp32':>9} {'emu/QDQ':>8}")
    for name in args.models:
        compiled = o2g.compile(LIGHT / f"light_{name}.onnx", num_calib=1)
        inp = compiled.graph.inputs[0]
        x = {inp.name: np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)}
        emulator = Emulator(compiled.plan)
        fp32 = session(compiled.loaded.model)
        qdq = session(build_qdq(compiled.graph, compiled.quant))
        emu_t, _ = best_of(lambda: emulator.run(x), args.repeats)
        fp_t, _ = best_of(lambda: fp32.run(None, x), args.repeats)
        q_t, _ = best_of(lambda: qdq.run(None, x), args.repeats)
        print(f"{name:14} {emu_t:11.3f} {fp_t:11.3f} {q_t:10.3f} {emu_t / fp_t:9.2f} {emu_t / q_t:8.2f}")


if __name__ == "__main__":
    main()
