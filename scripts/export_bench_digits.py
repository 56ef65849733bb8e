#!/usr/bin/env python3
"""Write the benchmark's two digits nets and their data to models/bench/, once, so every machine measures the
same ones.

Why: bench_real_models.py used to train bench_quantization.py's nets (and jitter their data) with torch at
benchmark time. Torch's float kernels differ between CPUs, eight epochs of training amplify that, and the same
commit gave another table on another machine (digits v3: +0.14 dB on an AMD EPYC, -0.51 dB on an Intel Xeon).
The files written here are the nets' definition from now on; this script says how they were made, and a rerun on
another CPU may write other bytes (the benchmark then measures those).

    python scripts/export_bench_digits.py            # writes models/bench/
    python scripts/export_bench_digits.py --out DIR

Writes digits_v3.onnx and digits_v2.onnx (bench_quantization.train, 8 epochs, one CPU thread; input `input`
[N, 1, 32, 32], output `logits` [N, 10]) and digits32.npz: `calib` (the 256 calibration images), `x_test` and
`y_test` (the 500 evaluation images bench_real_models.py uses, evenly spread over bench_quantization's test
set), the images stored as float16 (the nets run them as float32; half the size, and the rounding is part of
the data's definition). Needs the `models` extra (torch).
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parent
OUT = SCRIPTS.parent / "models" / "bench"
NETS = ("v3", "v2")
EPOCHS = 8
EVAL_SAMPLES = 500


def export(out: Path) -> None:
    sys.path.insert(0, str(SCRIPTS))
    import torch

    import bench_quantization as bq
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    task = bq.Task("digits32")
    keep = np.linspace(0, len(task.y_test) - 1, EVAL_SAMPLES).round().astype(int)
    np.savez_compressed(out / "digits32.npz", calib=task.calib.astype(np.float16)[:, None],
                        x_test=task.x_test[keep].astype(np.float16)[:, None], y_test=task.y_test[keep].astype(np.int64))
    for name in NETS:
        net = bq.train(name, task, EPOCHS)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(net, (torch.from_numpy(task.calib[:1]),), str(out / f"digits_{name}.onnx"), dynamo=False,
                              opset_version=17, input_names=["input"], output_names=["logits"])
        print(f"digits_{name}.onnx: {bq.torch_accuracy(net, task.x_test[keep], task.y_test[keep]):.3f} top-1 "
              f"on the {EVAL_SAMPLES} evaluation images")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    export(parser.parse_args().out)


if __name__ == "__main__":
    main()
