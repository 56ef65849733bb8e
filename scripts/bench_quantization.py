"""Which quantization options pay off on hard-to-quantize (depthwise) networks, measured side by side.

Two tasks, both built from scikit-learn's 8x8 digits (local data, nothing is downloaded; needs the `models`
extra: torch and scikit-learn):

- `digits32` (default): the digits upsampled to 32x32 with random affine jitter (rotation, scale, shear,
  shift), contrast and brightness changes and additive Gaussian noise, drawn afresh each training epoch.
  The test set is four jittered copies of each held-out digit (2876 samples, fixed seed), so fp32 accuracy
  stays well below 100% and int8 errors have samples near a decision boundary to flip.
- `digits8`: the original easy task (8x8 digits, no augmentation; `--task digits8 --model v2` reproduces
  the original benchmark): int8 accuracy barely moves, only SQNR does.

Two models: `v3`, a MobileNetV3-small-like net (depthwise 3x3 and 5x5 convs, squeeze-excite with
hard-sigmoid, hard-swish, BatchNorm folded at export: the kind of net the literature reports per-tensor int8
weights hurt) and `v2`, the small MobileNetV2-style net of the original benchmark (depthwise 3x3, ReLU; a
stride-2 stem and a third block on 32x32 inputs). The spread of per-channel weight ranges of each depthwise
conv after BatchNorm folding is printed, since that spread is what per-tensor weight scales suffer from.

Each model is exported to ONNX and compiled with every range estimator, with and without cross-layer
equalization and with and without bias correction (table 1), then with one weight scale per tensor, per DIM
output channels and per output channel (table 2, with the costs: Gemmini calls, estimated cycles, DRAM bytes
and the bytes the CPU copies around Gemmini's calls). fp32 accuracy and onnxruntime's own quantize_static
(QDQ, symmetric int8, MinMax, per-tensor and per-channel weights) are printed for reference.

    python scripts/bench_quantization.py                            # digits32, both models (~9 min, 2 cores)
    python scripts/bench_quantization.py --model v3 --eval-samples 0  # one model, the whole test set
    python scripts/bench_quantization.py --task digits8 --model v2    # the original benchmark

Everything is deterministic (fixed seeds, one torch thread for training). `--jobs` compiles and evaluates
configurations in parallel worker processes; the figures do not depend on it.
"""
from __future__ import annotations

import argparse
import logging
import math
import multiprocessing
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, \
    quantize_static
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn import functional as F

import onnx2gemmini as o2g
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import Dataset
from onnx2gemmini.ort_session import session
from onnx2gemmini.emit.report import build_report
from onnx2gemmini.plan import CpuOp

CPU_MOVES = ("remap", "concat", "transpose")  # CPU steps that only copy int8 bytes around Gemmini's calls


# ---------------------------------------------------------------------------------------------- models

def v2_block(c_in, c_out, stride):
    h = c_in * 4
    return nn.Sequential(nn.Conv2d(c_in, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                         nn.Conv2d(h, h, 3, stride, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                         nn.Conv2d(h, c_out, 1, bias=False), nn.BatchNorm2d(c_out))


def mobilenet_v2_small(digits32: bool = False) -> nn.Module:
    """The original benchmark's net; on 32x32 inputs a stride-2 stem and a third block (4x4 maps)."""
    if not digits32:
        return nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(), v2_block(16, 24, 1), nn.ReLU(),
                             v2_block(24, 32, 2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(), v2_block(16, 24, 1), nn.ReLU(),
                         v2_block(24, 32, 2), nn.ReLU(), v2_block(32, 48, 2), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(48, 10))


class SqueezeExcite(nn.Module):
    """x * hardsigmoid(conv(relu(conv(mean(x))))), as in MobileNetV3."""

    def __init__(self, c: int):
        super().__init__()
        squeezed = max(8, c // 4)
        self.gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, squeezed, 1), nn.ReLU(),
                                  nn.Conv2d(squeezed, c, 1), nn.Hardsigmoid())

    def forward(self, x):
        return x * self.gate(x)


class Bneck(nn.Module):
    """MobileNetV3 bottleneck: 1x1 expand, depthwise kxk, optional squeeze-excite, 1x1 project, residual."""

    def __init__(self, c_in: int, kernel: int, expand: int, c_out: int, se: bool, act: type, stride: int):
        super().__init__()
        layers = []
        if expand != c_in:
            layers += [nn.Conv2d(c_in, expand, 1, bias=False), nn.BatchNorm2d(expand), act()]
        layers += [nn.Conv2d(expand, expand, kernel, stride, kernel // 2, groups=expand, bias=False),
                   nn.BatchNorm2d(expand), act()]
        if se:
            layers.append(SqueezeExcite(expand))
        layers += [nn.Conv2d(expand, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v3_small() -> nn.Module:
    """MobileNetV3-small's layer pattern at a width and depth for 32x32 single-channel inputs."""
    RE, HS = nn.ReLU, nn.Hardswish
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), HS(),  # 16x16
        Bneck(16, 3, 16, 16, True, RE, 1),
        Bneck(16, 3, 64, 24, False, RE, 2),                                # 8x8
        Bneck(24, 3, 72, 24, False, RE, 1),
        Bneck(24, 5, 96, 40, True, HS, 2),                                 # 4x4
        Bneck(40, 5, 120, 40, True, HS, 1),
        Bneck(40, 5, 120, 48, True, HS, 1),
        nn.Conv2d(48, 144, 1, bias=False), nn.BatchNorm2d(144), HS(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(144, 128), HS(), nn.Linear(128, 10))


# ----------------------------------------------------------------------------------------------- tasks

def jitter(images: np.ndarray, copies: int, seed: int, size: int = 32) -> np.ndarray:
    """`copies` randomly distorted size x size versions of each 8x8 digit (values 0..16), all drawn from `seed`."""
    g = torch.Generator().manual_seed(seed)
    x = torch.from_numpy((images / 16.0).astype(np.float32))[:, None].repeat(copies, 1, 1, 1)
    x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    n = len(x)
    u = lambda lo, hi: lo + (hi - lo) * torch.rand(n, generator=g)  # noqa: E731
    angle, zoom, shear = u(-25, 25) * math.pi / 180, u(0.6, 1.0), u(-0.3, 0.3)
    cos, sin = torch.cos(angle), torch.sin(angle)
    # output -> input coordinates: rotate, shear, divide by the zoom; shift by up to 1/8 of the width (4 px)
    theta = torch.stack([torch.stack([cos / zoom, (-sin + shear * cos) / zoom, u(-0.25, 0.25)], 1),
                         torch.stack([sin / zoom, (cos + shear * sin) / zoom, u(-0.25, 0.25)], 1)], 1)
    grid = F.affine_grid(theta, [n, 1, size, size], align_corners=False)
    x = F.grid_sample(x, grid, padding_mode="zeros", align_corners=False)
    contrast, brightness, noise = u(0.3, 1.2), u(-0.3, 0.3), u(0.05, 0.35)
    x = x * contrast[:, None, None, None] + brightness[:, None, None, None]
    x = x + noise[:, None, None, None] * torch.randn(x.shape, generator=g)
    return x.numpy()


class Task:
    """Test and calibration arrays shaped [N, 1, H, W]; `epoch_data(epoch)` gives one epoch's training data."""

    def __init__(self, name: str, test_copies: int = 4):
        digits = load_digits()
        self.name = name
        idx_train, idx_test = train_test_split(np.arange(len(digits.target)), test_size=0.4, random_state=0,
                                               stratify=digits.target)
        self.images_train, self.y_train = digits.images[idx_train], digits.target[idx_train]
        if name == "digits8":  # exactly the original benchmark's arrays (strides included: they pick torch kernels)
            x = (digits.images / 16.0).astype(np.float32)[:, None]
            self.x_train, self.x_test = x[idx_train], x[idx_test]
            self.y_test = digits.target[idx_test]
            self.calib = self.x_train[:200]
            self.description = f"8x8 digits, {len(self.y_test)} test samples"
        else:
            self.x_test = jitter(digits.images[idx_test], test_copies, seed=1234)
            self.y_test = np.tile(digits.target[idx_test], test_copies)
            self.calib = jitter(self.images_train[:256], 1, seed=999)
            self.description = (f"32x32 jittered digits, {len(self.y_test)} test samples "
                                f"({test_copies} augmented copies of {len(idx_test)} held-out digits)")

    def epoch_data(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.name == "digits8":
            return torch.from_numpy(self.x_train), torch.from_numpy(self.y_train)
        x = jitter(self.images_train, 4, seed=100 + epoch)
        return torch.from_numpy(x), torch.from_numpy(np.tile(self.y_train, 4))


def train(model: str, task: Task, epochs: int) -> nn.Module:
    torch.manual_seed(0)
    if model == "v3":
        net = mobilenet_v3_small()
    else:
        net = mobilenet_v2_small(task.name == "digits32")
    lr = 3e-3
    opt = torch.optim.Adam(net.parameters(), lr)
    for epoch in range(epochs):
        if task.name != "digits8":  # cosine decay; digits8 keeps the original constant rate
            for group in opt.param_groups:
                group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * epoch / epochs))
        net.train()
        xt, yt = task.epoch_data(epoch)
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 32):
            idx = perm[i:i + 32]
            opt.zero_grad()
            F.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    net.eval()
    return net


def torch_accuracy(net: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((net(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


# --------------------------------------------------------------------------- onnxruntime's own int8 flow

class _Reader(CalibrationDataReader):
    def __init__(self, calib: np.ndarray):
        self.samples = iter([{"input": s[None]} for s in calib])

    def get_next(self):
        return next(self.samples, None)


def ort_accuracy(path: Path, x: np.ndarray, y: np.ndarray) -> float:
    sess = session(path)
    pred = [sess.run(None, {"input": s[None]})[0].argmax() for s in x]
    return float(np.mean(np.array(pred) == y))


def ort_quantize_static(path: Path, calib: np.ndarray, per_channel: bool) -> Path:
    out = path.with_name(f"{path.stem}_ort_qdq_{'pc' if per_channel else 'pt'}.onnx")
    logging.disable(logging.WARNING)  # its advice to run onnxruntime's pre-processing first
    try:
        quantize_static(str(path), str(out), _Reader(calib), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    finally:
        logging.disable(logging.NOTSET)
    return out


# ------------------------------------------------------------------------------------ onnx2gemmini runs

_WORKER: dict = {}


def _init_worker(path, calib_set, test_set):
    _WORKER.update(path=path, calib=calib_set, test=test_set)


def evaluate(options: dict) -> dict:
    """Compile with `options`, compare over the test set, and measure the plan's costs."""
    compiled = o2g.compile(_WORKER["path"], calib=_WORKER["calib"], **options)
    r = run_diff(compiled, _WORKER["test"])
    out = next(iter(r["outputs"].values()))
    worst = max(r["layers"], key=lambda l: (l["max_lsb_vs_ort_qdq"], l["tolerance_lsb"]))
    totals = build_report(compiled, {})["totals"]
    plan = compiled.plan
    moved = sum(plan.tensors[t].nbytes for s in plan.steps
                if isinstance(s, CpuOp) and s.target == "cpu" and s.op in CPU_MOVES for t in s.outputs)
    moves = sum(isinstance(s, CpuOp) and s.target == "cpu" and s.op in CPU_MOVES for s in plan.steps)
    return {"fp32": r["accuracy"]["fp32"], "int8": r["accuracy"]["int8"], "sqnr": out["fp32_vs_int8"]["sqnr_db"],
            "agree": out["fp32_vs_int8"]["top1_agreement"],
            "out_lsb": out["int8_vs_ort_qdq"]["max_lsb"], "layer_lsb": worst["max_lsb_vs_ort_qdq"],
            "layer_tol": worst["tolerance_lsb"], "passed": r["verdict"]["passed"],
            "failures": r["verdict"]["failures"],
            "tolerant": sorted({(l["op"], l["tolerance_lsb"]) for l in r["layers"] if l["tolerance_lsb"]}),
            "calls": sum(s.target == "gemmini" for s in plan.steps),
            "cycles": totals["est_cycles"], "dram": totals["dram_bytes"], "cpu_moved": moved, "cpu_moves": moves}


def depthwise_spread(path: Path) -> list[float]:
    """Per depthwise conv of the exported model (BatchNorm folded): largest / smallest per-channel max|w|."""
    model = onnx.load(str(path))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    spread = []
    for node in model.graph.node:
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        w = weights.get(node.input[1]) if node.op_type == "Conv" else None
        if w is not None and group > 1 and w.shape[1] == 1:
            r = np.abs(w.reshape(len(w), -1)).max(1)
            spread.append(float(r.max() / max(r.min(), 1e-12)))
    return spread


def noise_note(rows: list[dict], n: int) -> str:
    """How large an accuracy difference to int8's own fp32 reference the sample count can resolve."""
    flips = max(round((1 - r["agree"]) * n) for r in rows)
    return (f"resolution: at most {flips} of {n} samples change class between fp32 and int8 in any row, so an\n"
            f"int8 accuracy within about +-{2 * math.sqrt(flips) / n:.2%} of fp32 (2 sigma of the paired difference) "
            "is indistinguishable from it")


def print_references(path: Path, task: Task, x_eval: np.ndarray, y_eval: np.ndarray) -> None:
    """fp32 and onnxruntime's own static int8 flow, on the evaluated samples (and on all, if subsampled)."""
    subsampled = len(y_eval) < len(task.y_test)
    rows = [("fp32 (onnxruntime)", path)] + [
        (f"onnxruntime quantize_static: QDQ, symmetric int8, MinMax, per-{'channel' if pc else 'tensor'} weights",
         ort_quantize_static(path, task.calib, pc)) for pc in (False, True)]
    print(f"\n{'reference (calibration: the same ' + str(len(task.calib)) + ' training samples)':86} "
          f"{'accuracy':>9}" + (f" {'all ' + str(len(task.y_test)):>9}" if subsampled else ""))
    for label, p in rows:
        line = f"{label:86} {ort_accuracy(p, x_eval, y_eval):9.2%}"
        if subsampled:
            line += f" {ort_accuracy(p, task.x_test, task.y_test):9.2%}"
        print(line)


def lsb_cells(r: dict) -> str:
    return f"{r['out_lsb']:>4} {r['layer_lsb']:>3}/{r['layer_tol']:<3} {'ok' if r['passed'] else 'FAIL':4}"


def print_tables(grid1: list[dict], grid2: list[dict], results: dict, key, n: int) -> None:
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    head = f"{'int8 acc':>9} {'=fp32':>6} {'SQNR dB':>8}  {'out':>4} {'layer/tol':9} {'':4}"
    tolerant = results[key(grid1[0])]["tolerant"]
    print(f"\nint8 on Gemmini (onnx2gemmini) over {n} test samples (1 sample = {1 / n:.2%}).\n"
          "=fp32: share of samples whose int8 top-1 class is fp32's.\n"
          "Max LSB vs onnxruntime's QDQ run of the same quantization: out = model output end to end;\n"
          "layer/tol = worst layer fed the emulator's own inputs / that layer's stated tolerance;\n"
          "ok = every layer within its stated tolerance. Layers with a stated tolerance (LSB): "
          + (", ".join(f"{op} {tol}" for op, tol in tolerant) or "none (bit-exact model: out must be 0)"))
    print(f"\n{'estimator':10} {'CLE':4} {'bias c.':7} {'fp32 acc':>9} {head}")
    for o in grid1:
        r = results[key(o)]
        print(f"{o['calib_method']:10} {yes(o['equalize']):4} {yes(o['bias_correction']):7} {r['fp32']:9.2%} "
              f"{r['int8']:9.2%} {r['agree']:6.1%} {r['sqnr']:8.2f}  {lsb_cells(r)}")
    print(f"\nweight scales, with minmax and bias correction. CPU bytes moved = output bytes of the CPU\n"
          f"{'/'.join(CPU_MOVES)} steps (channel copies around Gemmini calls), and how many such steps")
    print(f"{'weight scales':13} {'CLE':4} {head} {'calls':>6} {'est. cycles':>12} {'DRAM bytes':>11} "
          f"{'CPU bytes moved':>16} {'(steps)':>7}")
    for o in grid2:
        r = results[key(o)]
        print(f"{o['weight_scales']:13} {yes(o['equalize']):4} {r['int8']:9.2%} {r['agree']:6.1%} {r['sqnr']:8.2f}  "
              f"{lsb_cells(r)} {r['calls']:6} {r['cycles']:12,} {r['dram']:11,} {r['cpu_moved']:16,} "
              f"{r['cpu_moves']:7}")
    print(noise_note([results[key(o)] for o in grid1 + grid2], n))
    for o in grid1 + grid2:
        for failure in results[key(o)]["failures"]:
            print(f"FAIL {o}: {failure}")


def bench_model(model: str, task: Task, epochs: int, eval_samples: int | None, jobs: int) -> None:
    t0 = time.perf_counter()
    net = train(model, task, epochs)
    name = {"v2": "MobileNetV2-style", "v3": "MobileNetV3-small-like"}[model]
    print(f"\n=== {name} ({model}) on {task.description}; trained {epochs} epochs in "
          f"{time.perf_counter() - t0:.0f} s")
    x_eval, y_eval = task.x_test, task.y_test
    if eval_samples and eval_samples < len(y_eval):  # a deterministic subsample, evenly spaced over the test set
        keep = np.linspace(0, len(y_eval) - 1, eval_samples).round().astype(int)
        x_eval, y_eval = x_eval[keep], y_eval[keep]
        print(f"SUBSAMPLED for run time: the onnx2gemmini rows use {len(y_eval)} of the {len(task.y_test)} test "
              f"samples (evenly spaced, fixed); the reference rows show both")
    # every configuration spelled out in full; table 2's per-tensor rows are table 1's minmax + bias c. rows
    grid1 = [dict(calib_method=m, equalize=cle, bias_correction=bc, weight_scales="tensor")
             for m in ("minmax", "percentile", "mse") for cle in (False, True) for bc in (False, True)]
    grid2 = [dict(calib_method="minmax", equalize=cle, bias_correction=True, weight_scales=ws)
             for cle in (False, True) for ws in ("tensor", "groups", "channel")]
    key = lambda o: tuple(sorted(o.items()))  # noqa: E731
    unique = list({key(o): o for o in grid1 + grid2}.values())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{model}_{task.name}.onnx"
        with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(net, (torch.from_numpy(task.calib[:1]),), str(path), dynamo=False, opset_version=17,
                              input_names=["input"], output_names=["logits"])
        print("depthwise conv weights after BatchNorm folding, largest/smallest per-channel range: "
              + ", ".join(f"{s:.1f}" for s in depthwise_spread(path)))
        print_references(path, task, x_eval, y_eval)
        calib_set = Dataset({"input": task.calib[:, None]}, None, "train split")  # samples shaped like the input
        test_set = Dataset({"input": x_eval[:, None]}, y_eval, "test split")
        t1 = time.perf_counter()
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
                                 initargs=(path, calib_set, test_set)) as pool:
            results = dict(zip(map(key, unique), pool.map(evaluate, unique)))
    print_tables(grid1, grid2, results, key, len(y_eval))
    print(f"({len(unique)} compilations evaluated in {time.perf_counter() - t1:.0f} s with {jobs} worker process(es))")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=("digits32", "digits8"), default="digits32")
    parser.add_argument("--model", choices=("v2", "v3", "both"), default="both")
    parser.add_argument("--epochs", type=int, help="training epochs (default: 30 on digits8, 8 on digits32)")
    parser.add_argument("--eval-samples", type=int, default=1000,
                        help="test samples the onnx2gemmini rows are evaluated on (0: all; default 1000)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for the compilations")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    torch.set_num_threads(1)
    task = Task(args.task)
    epochs = args.epochs or (30 if args.task == "digits8" else 8)
    for model in (("v3", "v2") if args.model == "both" else (args.model,)):
        bench_model(model, task, epochs, args.eval_samples or None, args.jobs)


if __name__ == "__main__":
    main()
