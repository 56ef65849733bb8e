"""Softmax on Gemmini's normalizer against the CPU form: accuracy and CPU work, side by side.

    python scripts/bench_normalizer.py [--samples 8] [--eval 8] [--no-real] [--swin-t]

For each transformer (built with torch from seeded random weights, no download) the same model is compiled
twice for the `ibert` preset (a Gemmini with normalizations): with `normalizer_softmax` (each attention
softmax applied by the normalizer as the scores leave the accumulator) and without (a float softmax on the
CPU). Both are calibrated on the same samples and checked by `diff` on other ones. Printed per model: the
output SQNR against fp32 of each form and their difference (the gate for making the normalizer the default:
within 0.5 dB), whether `diff` passed, the CPU steps, and the estimated CPU cycles of the compile report
(instructions measured on Spike times the config's CPI).

Models: a 4-layer encoder (d 256, 8 heads, 128 tokens, ReLU; scripts/bench_host.py's) and a 2-layer
encoder with GELU (d 256, 8 heads, 128 tokens), two of torchvision's Swin blocks (a plain one with its
relative position bias, a shifted one), seeded normal inputs; and a trained one, PP-OCRv4's SVTR text
recognizer (scripts/bench_real_models.py's ppocr_rec: its pinned wheel, rendered text lines, 16 calibration
and 32 held-out lines), unless --no-real. A softmax whose calibrated scores do not suit the normalizer stays
on the CPU: the normalizer column counts the softmaxes it took.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np

import onnx2gemmini as o2g
from onnx2gemmini.compare import run_diff
from onnx2gemmini.config import PRESETS
from onnx2gemmini.data import Dataset
from onnx2gemmini.emit.report import build_report
from onnx2gemmini.normalizer import SOFTMAX
from onnx2gemmini.ort_session import cpu_description
from onnx2gemmini.plan import CpuOp, Matmul

MODELS = {"encoder_relu": (4, "relu"), "encoder_gelu": (2, "gelu")}
CPU_FORM = dataclasses.replace(PRESETS["ibert"], name="ibert")
NORMALIZER = dataclasses.replace(PRESETS["ibert"], name="ibert-normalizer", normalizer_softmax=True)
SCRIPTS = Path(__file__).resolve().parent


def export(name: str, folder: Path) -> Path:
    import torch
    from torch import nn

    layers, activation = MODELS[name]
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True, activation=activation)
    module = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    path = folder / f"{name}.onnx"
    # not under torch.no_grad(): there the encoder takes its fused fast path, which has no ONNX export
    torch.onnx.export(module, (torch.randn(1, 128, 256),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    return path


def swin_blocks(folder: Path, samples: int, held_out: int, rng) -> tuple[Path, Dataset, Dataset, None]:
    """Two of torchvision's Swin blocks (dim 32, 2 heads, 7x7 windows on a 14x14 map): one plain, its
    attention scores plus the relative position bias; one shifted, whose window mask keeps it on the CPU."""
    import torch
    sys.path.insert(0, str(SCRIPTS))
    import zoo

    zoo.torchvision_models()  # imports torchvision the way that works beside this torch
    from torchvision.models.swin_transformer import SwinTransformerBlock

    torch.manual_seed(0)
    module = torch.nn.Sequential(SwinTransformerBlock(32, 2, [7, 7], [0, 0]),
                                 SwinTransformerBlock(32, 2, [7, 7], [3, 3])).eval()
    path = folder / "swin_blocks.onnx"
    torch.onnx.export(module, (torch.randn(1, 14, 14, 32),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    data = rng.standard_normal((samples + held_out, 1, 14, 14, 32)).astype(np.float32)
    return (path, Dataset({"x": data[:samples]}, None, "seeded normal"),
            Dataset({"x": data[samples:]}, None, "seeded normal"), None)


def swin_t_compile(folder: Path, rng) -> None:
    """torchvision's Swin-T at 224x224 (seeded weights, 4 seeded calibration samples, mse ranges), compiled
    for both forms without diff (its diff takes long): softmax calls on the normalizer, CPU steps, estimated
    CPU cycles (report.json's totals)."""
    import torch
    sys.path.insert(0, str(SCRIPTS))
    import zoo

    torch.manual_seed(0)
    module = zoo.torchvision_models().swin_t(weights=None).eval()
    path = folder / "swin_t.onnx"
    torch.onnx.export(module, (torch.randn(1, 3, 224, 224),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    calib = Dataset({"x": rng.standard_normal((4, 1, 3, 224, 224)).astype(np.float32)}, None, "seeded normal")
    for label, config in (("CPU softmax", CPU_FORM), ("normalizer", NORMALIZER)):
        compiled = o2g.compile(path, calib=calib, config=config, calib_method="mse")
        totals = build_report(compiled, {})["totals"]
        calls = sum(isinstance(s, Matmul) and s.act == SOFTMAX for s in compiled.plan.steps)
        print(f"swin_t {label}: {calls} softmax calls on the normalizer, "
              f"{sum(isinstance(s, CpuOp) for s in compiled.plan.steps)} CPU steps, "
              f"est. CPU cycles {totals['est_cpu_cycles'] / 1e6:.2f}M", flush=True)


def svtr(calib_n: int = 16, eval_n: int = 32) -> tuple[Path, Dataset, Dataset, dict]:
    """PP-OCRv4's recognizer from its wheel, with bench_real_models' rendered text lines."""
    sys.path.insert(0, str(SCRIPTS))
    import bench_real_models as real

    real.ensure_requirements(install=True)
    m = real.MODELS["ppocr_rec"]
    (xc, _), (xe, _) = m.data(calib_n, 0, "calib"), m.data(eval_n, 0, "eval")
    reshape = lambda x: x.reshape(len(x), *m.shape)  # noqa: E731
    return (m.path(), Dataset({m.input: reshape(xc)}, None, "rendered text lines"),
            Dataset({m.input: reshape(xe)}, None, "rendered text lines"), {m.input: m.shape})


def measure(model: Path, config, calib: Dataset, held_out: Dataset, input_shape=None) -> dict:
    compiled = o2g.compile(model, calib=calib, config=config, input_shape=input_shape)
    result = run_diff(compiled, held_out)
    output = next(iter(result["outputs"].values()))["fp32_vs_int8"]
    return {"sqnr_db": output["sqnr_db"], "top1": output.get("top1_agreement"), "passed": result["verdict"]["passed"],
            "cpu_steps": sum(isinstance(s, CpuOp) for s in compiled.plan.steps),
            "softmaxes_on_gemmini": sum(isinstance(s, Matmul) and s.act == SOFTMAX for s in compiled.plan.steps),
            "est_cpu_cycles": build_report(compiled, {})["totals"]["est_cpu_cycles"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8, help="calibration samples (default 8)")
    parser.add_argument("--eval", type=int, default=8, help="held-out samples for diff (default 8)")
    parser.add_argument("--no-real", action="store_true", help="skip the trained recognizer (its wheel and data)")
    parser.add_argument("--swin-t", action="store_true", help="also compile torchvision's Swin-T (no diff)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"CPU: {cpu_description()}")
    print(f"{'model':14} {'CPU form dB':>11} {'normalizer dB':>13} {'diff dB':>8} {'top-1':>13} {'diff passed':>11} "
          f"{'softmax calls':>13} {'CPU steps':>11} {'est. CPU cycles':>21}")
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for name in MODELS:
            model = export(name, Path(tmp))
            data = rng.standard_normal((args.samples + args.eval, 1, 128, 256)).astype(np.float32)
            cases.append((name, model, *(Dataset({"x": d}, None, "seeded normal") for d in
                                         (data[:args.samples], data[args.samples:])), None))
        cases.append(("swin_blocks", *swin_blocks(Path(tmp), args.samples, args.eval, rng)))
        if not args.no_real:
            cases.append(("ppocr_rec", *svtr()))
        for name, model, calib, held_out, shape in cases:
            cpu, norm = (measure(model, c, calib, held_out, shape) for c in (CPU_FORM, NORMALIZER))
            top1 = "" if cpu["top1"] is None else f"{cpu['top1']:.3f}/{norm['top1']:.3f}"
            print(f"{name:14} {cpu['sqnr_db']:11.2f} {norm['sqnr_db']:13.2f} {norm['sqnr_db'] - cpu['sqnr_db']:+8.2f} "
                  f"{top1:>13} {str(cpu['passed'] and norm['passed']):>11} {norm['softmaxes_on_gemmini']:>13} "
                  f"{cpu['cpu_steps']:>5} -> {norm['cpu_steps']:<3} "
                  f"{cpu['est_cpu_cycles'] / 1e6:9.2f}M -> {norm['est_cpu_cycles'] / 1e6:.2f}M", flush=True)
        if args.swin_t:
            swin_t_compile(Path(tmp), rng)


if __name__ == "__main__":
    main()
