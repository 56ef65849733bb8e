"""Compile and emulator speed against onnxruntime, side by side in one run (ratios, never asserted).

    python scripts/bench_host.py [digits resnet50 mobilenet_v2 transformer] [--repeats 3] [--samples 8]

compile: the whole `onnx2gemmini MODEL --calib CALIB` command (defaults: the held-out choice of ranges,
  equalization, bias correction, every artifact written) against a process running onnxruntime's `quantize_static` (QDQ,
  symmetric int8 activations and weights, per tensor, MinMax) on the same samples and writing its model.
  Both are whole processes (interpreter, imports, work), run in turn A B A B ...; the ratio is the median
  of the pairwise ratios, which holds when the machine's speed drifts. Also the two processes' imports alone
  (the same pairs, no model): the floor under each column's time.
emulator: seconds per image of the bit-exact emulator against onnxruntime's int8 session on the QDQ model
  of the very same quantization (which it fuses into QLinearConv/QGemm), both single-threaded (BLAS and
  onnxruntime), interleaved in one process; the peak memory numpy allocates during one emulated image.
  Also against the same quantization with uint8 activations (zero point 128) in onnxruntime's default
  session, the u8 x s8 kernels quantize_static's default activation type gets: a speed reference only (on
  this form onnxruntime's QLinearAdd, QLinearMul and QLinearAveragePool round some near-ties differently
  from the signed golden's, so it is not a golden).
  Then a dataset (--dataset images, 256 by default): the emulator in batches (Emulator.run_batch, as `diff`
  runs it, --batch images per batch) against onnxruntime's session image by image, per image; and the peak
  memory of one batch.

Models (no weights are downloaded): the bundled digits CNN, onnx's light ResNet-50 (shipped in the onnx wheel, synthetic weights),
and a MobileNetV2 (224x224, width 1.0) and a 4-layer transformer encoder (d=256, 8 heads, 128 tokens)
built with torch from seeded random weights. Calibration data are seeded random samples.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from onnx2gemmini.compare import DEFAULT_BATCH
from onnx2gemmini.ort_session import cpu_description

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
BUNDLED = Path(__file__).resolve().parents[1] / "models" / "digits_cnn.onnx"
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

ORT_QUANTIZE = """
import logging, sys, numpy as np
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
class Reader(CalibrationDataReader):
    def __init__(self, name, x):
        self.samples = iter([{name: v} for v in x])
    def get_next(self):
        return next(self.samples, None)
model, calib, out = sys.argv[1:4]
data = np.load(calib)
name = [k for k in data.files if k != "labels"][0]
logging.disable(logging.WARNING)
quantize_static(model, out, Reader(name, data[name]), quant_format=QuantFormat.QDQ, per_channel=False,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
"""

EMULATOR = """
import json, sys, time, tracemalloc, numpy as np
import onnx2gemmini as o2g
from onnx2gemmini.ort_session import session
from onnx2gemmini.golden import build_qdq
from onnx2gemmini.run.emulator import Emulator
from onnx import TensorProto, numpy_helper


def unsigned(model):  # the QDQ model with uint8 activations: each activation Q/DQ's int8 zero point 0 -> uint8 128
    inits = {t.name: t for t in model.graph.initializer}
    turned = set()
    for node in model.graph.node:
        activation = node.op_type == "QuantizeLinear" or (node.op_type == "DequantizeLinear"
                                                           and node.input[0] not in inits)
        zero = node.input[2] if activation and len(node.input) > 2 else None
        if zero is None or inits[zero].data_type != TensorProto.INT8:
            continue
        if zero + "_u8" not in inits:
            value = numpy_helper.to_array(inits[zero]).astype(np.int16) + 128
            inits[zero + "_u8"] = numpy_helper.from_array(value.astype(np.uint8), zero + "_u8")
            model.graph.initializer.append(inits[zero + "_u8"])
        node.input[2] = zero + "_u8"
        turned.add(node.output[0] if node.op_type == "QuantizeLinear" else node.input[0])
    for info in model.graph.value_info:  # declared types follow
        if info.name in turned:
            info.type.tensor_type.elem_type = TensorProto.UINT8
    return model


model, calib, repeats, dataset, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
compiled = o2g.compile(model, calib=calib, num_calib=2)
name = compiled.graph.inputs[0].name
images = np.load(calib)[name]
emulator = Emulator(compiled.plan)
golden = session(build_qdq(compiled.graph, compiled.quant))
# onnxruntime's own u8 x s8 kernels on the same quantization (default options): a speed reference, not the
# golden (its QLinearAdd/QLinearMul round some near-ties differently from the signed kernels)
fast = session(unsigned(build_qdq(compiled.graph, compiled.quant)), entries={})
shape = compiled.graph.inputs[0].shape
feeds = [{name: (images[i % len(images)] + np.float32(0.01 * i)).reshape(shape)} for i in range(max(repeats, dataset))]
emulator.run(feeds[0]); golden.run(None, feeds[0]); fast.run(None, feeds[0])  # warm-up: weights converted, sessions ready
emu, ort, ort_fast = [], [], []
for feed in feeds[:repeats]:
    t = time.perf_counter(); emulator.run(feed); emu.append(time.perf_counter() - t)
    t = time.perf_counter(); golden.run(None, feed); ort.append(time.perf_counter() - t)
    t = time.perf_counter(); fast.run(None, feed); ort_fast.append(time.perf_counter() - t)
tracemalloc.start(); emulator.run(feeds[0]); peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
# the dataset: the emulator in batches (what diff runs), onnxruntime image by image, one after the other
t = time.perf_counter()
for i in range(0, dataset, batch):
    emulator.run_batch(feeds[i:i + batch])
emu_set = time.perf_counter() - t
t = time.perf_counter()
for feed in feeds[:dataset]:
    golden.run(None, feed)
ort_set = time.perf_counter() - t
t = time.perf_counter()
for feed in feeds[:dataset]:
    fast.run(None, feed)
fast_set = time.perf_counter() - t
tracemalloc.start(); emulator.run_batch(feeds[:batch]); batch_peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"emulator_s": emu, "ort_s": ort, "ort_fast_s": ort_fast, "peak_bytes": peak, "dataset": dataset, "batch": batch,
                  "emulator_set_s": emu_set, "ort_set_s": ort_set, "ort_fast_set_s": fast_set,
                  "batch_peak_bytes": batch_peak}))
"""


def build_models(names: list[str], folder: Path) -> dict[str, Path]:
    """The benchmark models as ONNX files in `folder`."""
    paths = {}
    for name in names:
        if name == "resnet50":
            paths[name] = LIGHT / "light_resnet50.onnx"
            continue
        if name == "digits":
            paths[name] = BUNDLED
            continue
        import torch
        from torch import nn

        torch.manual_seed(0)
        if name == "mobilenet_v2":
            module, shape = mobilenet_v2(nn), (1, 3, 224, 224)
        elif name == "transformer":
            layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True)
            module, shape = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False), (1, 128, 256)
        else:
            raise SystemExit(f"unknown model {name} (digits, resnet50, mobilenet_v2, transformer)")
        module.eval()
        path = folder / f"{name}.onnx"
        # not under torch.no_grad(): there the encoder takes its fused fast path, which has no ONNX export
        torch.onnx.export(module, (torch.randn(*shape),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
        paths[name] = path
    return paths


def mobilenet_v2(nn):
    """torchvision's MobileNetV2 (width 1.0, 1000 classes), rebuilt here: inverted residuals with ReLU6."""
    class Block(nn.Module):
        def __init__(self, c_in, c_out, expand, stride):
            super().__init__()
            h = c_in * expand
            layers = [] if expand == 1 else [nn.Conv2d(c_in, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6()]
            layers += [nn.Conv2d(h, h, 3, stride, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                       nn.Conv2d(h, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and c_in == c_out

        def forward(self, x):
            return x + self.block(x) if self.residual else self.block(x)

    layers, c = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()], 32
    for t, out, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                         (6, 320, 1, 1)]:
        for i in range(n):
            layers.append(Block(c, out, t, s if i == 0 else 1))
            c = out
    layers += [nn.Conv2d(c, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(), nn.AdaptiveAvgPool2d(1),
               nn.Flatten(), nn.Linear(1280, 1000)]
    net = nn.Sequential(*layers)
    for m in net.modules():  # trained-like BatchNorm statistics, so folding is exercised
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return net


def calibration(model: Path, samples: int, folder: Path) -> Path:
    """`samples` seeded standard-normal samples for the model's (single) input, as an .npz."""
    m = onnx.load(model, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    vi = next(i for i in m.graph.input if i.name not in inits)
    shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal((samples, *shape)).astype(np.float32)
    path = folder / f"{model.stem}_calib.npz"
    np.savez(path, **{vi.name: x})
    return path


def timed(cmd: list[str], env: dict | None = None) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return elapsed


def bench_compile(model: Path, calib: Path, repeats: int, folder: Path) -> dict:
    ours_cmd = [sys.executable, "-m", "onnx2gemmini.cli", str(model), "--calib", str(calib), "-o",
                str(folder / "out"), "--force", "-q"]
    ort_cmd = [sys.executable, "-c", ORT_QUANTIZE, str(model), str(calib), str(folder / "ort_qdq.onnx")]
    result = pairs(ours_cmd, ort_cmd, repeats)
    result["phases"] = json.loads((folder / "out" / "report.json").read_text())["timing"]
    return result


def bench_imports(repeats: int) -> dict:
    """The floor of both columns: a process that only imports what each command imports (no model, no work).
    quantize_static on a small model is little more than this."""
    return pairs([sys.executable, "-c", "import onnx2gemmini.cli"],
                 [sys.executable, "-c", "from onnxruntime.quantization import quantize_static"], repeats)


def pairs(ours_cmd: list[str], ort_cmd: list[str], repeats: int) -> dict:
    """Both commands timed in turn, A B A B ..., after one untimed run each (file caches)."""
    ours, ort = [], []
    timed(ours_cmd)
    timed(ort_cmd)
    for _ in range(repeats):
        ours.append(timed(ours_cmd))
        ort.append(timed(ort_cmd))
    return {"ours_s": ours, "ort_s": ort, "ratio": statistics.median(a / b for a, b in zip(ours, ort))}


def bench_emulator(model: Path, calib: Path, repeats: int, dataset: int, batch: int) -> dict:
    env = {**os.environ, **SINGLE_THREAD}
    proc = subprocess.run([sys.executable, "-c", EMULATOR, str(model), str(calib), str(repeats), str(dataset),
                           str(batch)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"emulator benchmark failed:\n{proc.stderr[-2000:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    per_image = lambda total: 1e3 * total / r["dataset"]  # noqa: E731
    return {
        "one": {"emulator_ms": 1e3 * statistics.median(r["emulator_s"]), "ort_ms": 1e3 * statistics.median(r["ort_s"]),
                "fast_ms": 1e3 * statistics.median(r["ort_fast_s"]),
                "ratio": statistics.median(a / b for a, b in zip(r["emulator_s"], r["ort_s"])),
                "fast_ratio": statistics.median(a / b for a, b in zip(r["emulator_s"], r["ort_fast_s"])),
                "peak_mib": r["peak_bytes"] / 2**20},
        "set": {"emulator_ms": per_image(r["emulator_set_s"]), "ort_ms": per_image(r["ort_set_s"]),
                "fast_ms": per_image(r["ort_fast_set_s"]), "ratio": r["emulator_set_s"] / r["ort_set_s"],
                "fast_ratio": r["emulator_set_s"] / r["ort_fast_set_s"], "peak_mib": r["batch_peak_bytes"] / 2**20},
        "raw": r}


def print_emulator(title: str, results: dict, key: str, peak: str) -> None:
    """One emulator table: per model ms per image against both onnxruntime sessions, and the peak memory."""
    print(title)
    print(f"{'model':14} {'emulator ms':>11} {'ORT int8 ms':>11} {'ratio':>6} {peak:>9} {'ORT u8 ms':>9} {'ratio':>6}")
    for name, r in results.items():
        e = r["emulator"][key]
        print(f"{name:14} {e['emulator_ms']:11.1f} {e['ort_ms']:11.1f} {e['ratio']:6.2f} {e['peak_mib']:9.1f} "
              f"{e['fast_ms']:9.1f} {e['fast_ratio']:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["digits", "resnet50", "mobilenet_v2", "transformer"])
    parser.add_argument("--repeats", type=int, default=3, help="timed compile pairs per model (default 3)")
    parser.add_argument("--images", type=int, default=10, help="timed emulator images per model (default 10)")
    parser.add_argument("--samples", type=int, default=8, help="calibration samples (default 8)")
    parser.add_argument("--dataset", type=int, default=256, help="emulated images of the dataset run (default 256)")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                        help=f"images per emulator batch in the dataset run (default {DEFAULT_BATCH}, diff's)")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args()
    results = {}
    imports = bench_imports(args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, model in build_models(args.models, folder).items():
            calib = calibration(model, args.samples, folder)
            results[name] = {"compile": bench_compile(model, calib, args.repeats, folder),
                             "emulator": bench_emulator(model, calib, args.images, args.dataset, args.batch)}
    if args.json:
        print(json.dumps({"imports": imports, **results}, indent=2))
        return
    med = statistics.median
    print(f"CPU: {cpu_description()}\n")
    print(f"compile: whole `onnx2gemmini MODEL --calib` vs onnxruntime quantize_static, {args.samples} samples "
          f"(median s, median ratio of {args.repeats} pairs)")
    print(f"{'model':14} {'onnx2gemmini':>12} {'quantize_static':>15} {'ratio':>6}   phases (s, one run)")
    for name, r in results.items():
        c = r["compile"]
        phases = ", ".join(f"{k[:-2]} {v:.2f}" for k, v in c["phases"].items() if k != "total_s")
        print(f"{name:14} {med(c['ours_s']):12.2f} {med(c['ort_s']):15.2f} {c['ratio']:6.2f}   {phases}")
    print(f"{'(imports only)':14} {med(imports['ours_s']):12.2f} {med(imports['ort_s']):15.2f} "
          f"{imports['ratio']:6.2f}   each process importing what its command imports, no work: the floor")
    print_emulator(f"\nemulator: one image, single thread, vs onnxruntime's int8 session on the same QDQ model "
                   f"(median of {args.images} images; ratio: median of the pairwise ratios)", results, "one", "peak MiB")
    print("(ORT int8: the golden's exact session on the QDQ model; ORT u8: the same quantization with uint8 "
          "activations in onnxruntime's default session, its u8 x s8 kernels: a speed reference, not a golden)")
    print_emulator(f"\nemulator over a dataset: {args.dataset} images in batches of {args.batch} (Emulator.run_batch, "
                   f"as diff runs it) vs onnxruntime image by image, single thread (ms per image; ratio of the "
                   f"totals)", results, "set", "batch MiB")

if __name__ == "__main__":
    main()
