"""Measure the C back end on ResNet-50 (onnx's light model): emit time, `make` time, run time, sizes.

    python scripts/bench_c_build.py [--jobs 2] [--keep DIR]

The light model ships with the onnx package (no network); it is compiled with one calibration sample.
The number to watch is the make time: weights go through weights.bin + .incbin, so it stays seconds.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

import onnx2gemmini as o2g
from onnx2gemmini.emit.c import write_c
from onnx2gemmini.memory import plan_memory
from onnx2gemmini.run import hostc
from onnx2gemmini.run.emulator import Emulator
from onnx2gemmini.run.selftest import selftest_case

MODEL = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="write OUT/c here and keep it")
    args = parser.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="o2g-bench-c-"))
    timing: dict[str, float] = {}
    t = time.perf_counter()
    compiled = o2g.compile(MODEL, num_calib=1)
    timing["compile_s"] = time.perf_counter() - t
    t = time.perf_counter()
    c_dir = write_c(compiled.plan, out / "c", *selftest_case(compiled.plan), "scripts/bench_c_build.py")
    timing["emit_s"] = time.perf_counter() - t
    t = time.perf_counter()
    hostc.build(c_dir, ("model",), jobs=args.jobs)
    timing["make_s"] = time.perf_counter() - t
    plan = compiled.plan
    x = np.random.default_rng(0).standard_normal(plan.tensors[plan.inputs[0]].shape).astype(np.float32)
    sample = {plan.tensors[plan.inputs[0]].onnx_name: x}
    t = time.perf_counter()
    got = hostc.run(c_dir, plan, sample)
    timing["run_s"] = time.perf_counter() - t
    want = Emulator(plan).run(sample)
    mem = plan_memory(plan)
    report = {
        "model": MODEL.name,
        "timing": {k: round(v, 2) for k, v in timing.items()},
        "bytes": {"weights.bin": (c_dir / "weights.bin").stat().st_size, "model.c": (c_dir / "model.c").stat().st_size,
                  "arena": mem.arena_bytes, "arena_lower_bound": mem.lower_bound_bytes},
        "outputs_equal_emulator": all(np.array_equal(got[t], want[t]) for t in plan.outputs),
    }
    print(json.dumps(report, indent=2))
    if not args.keep:
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
