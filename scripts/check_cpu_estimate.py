"""The CPU half of the cost model against Spike: each model's estimated CPU-step instructions (the cost table,
onnx2gemmini/cpu/cost_table.py) beside the instructions its `make riscv` self-test retires in those steps.

    python scripts/check_cpu_estimate.py                 # the bundled digits CNN and four small models built here
    python scripts/check_cpu_estimate.py --only lstm,digits
    python scripts/check_cpu_estimate.py --steps         # also every CPU step

Each model is compiled (random calibration data, default config), its generated C built by
scripts/bench_spike.py's model mode (`make model-riscv`, this checkout's runtime) and run on Spike, whose
per-layer read_cycles() are instructions retired. Only CPU steps are compared: under the bundled host
gemmini.h a Gemmini step is an emulation on the core, not Gemmini's cost. Needs what bench_spike.py needs
(riscv64-unknown-elf-gcc, picolibc, dtc, PyPI spike) and torch to build the small models.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import onnx2gemmini as o2g  # noqa: E402
from onnx2gemmini.plan import CpuOp  # noqa: E402


def _torch_models() -> dict:
    import torch
    from torch import nn

    class MobileNetStyle(nn.Module):
        """Depthwise separable blocks with hard-swish and a squeeze-excite gate (hard-sigmoid), as PP-LCNet."""

        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, 2, 1)
            self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
            self.pw = nn.Conv2d(16, 32, 1)
            self.se1, self.se2 = nn.Conv2d(32, 8, 1), nn.Conv2d(8, 32, 1)
            self.dw2 = nn.Conv2d(32, 32, 5, 2, 2, groups=32)
            self.pw2 = nn.Conv2d(32, 48, 1)
            self.fc = nn.Linear(48, 10)

        def forward(self, x):
            hs = nn.functional.hardswish
            x = hs(self.stem(x))
            x = hs(self.dw(x))
            x = hs(self.pw(x))
            s = x.mean((2, 3), keepdim=True)
            x = x * nn.functional.hardsigmoid(self.se2(torch.relu(self.se1(s))))
            x = hs(self.pw2(hs(self.dw2(x))))
            return torch.softmax(self.fc(x.mean((2, 3))), -1)

    class YoloStyle(nn.Module):
        """Conv + SiLU blocks, a C2f-like split and concat, a detection head with sigmoid class scores."""

        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, 2, 1)
            self.c2 = nn.Conv2d(16, 32, 3, 2, 1)
            self.b1, self.b2 = nn.Conv2d(16, 16, 3, 1, 1), nn.Conv2d(16, 16, 3, 1, 1)
            self.c3 = nn.Conv2d(64, 32, 1)
            self.box, self.cls = nn.Conv2d(32, 16, 1), nn.Conv2d(32, 8, 1)

        def forward(self, x):
            silu = nn.functional.silu
            x = silu(self.c2(silu(self.c1(x))))
            a, b = x.chunk(2, 1)
            b1 = silu(self.b1(b))
            b2 = silu(self.b2(b1))
            x = silu(self.c3(torch.cat([a, b, b1, b2], 1)))
            return self.box(x), torch.sigmoid(self.cls(x))

    class TransformerBlock(nn.Module):
        """Pre-norm attention (2 heads) and a GELU MLP over 16 tokens of 64."""

        def __init__(self, d=64, heads=2):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            n, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(n, t, d))
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    class LstmModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(16, 48)
            self.fc = nn.Linear(48, 10)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.fc(y[-1])

    torch.manual_seed(0)
    return {"mobilenet": (MobileNetStyle(), (1, 3, 48, 48)), "yolo": (YoloStyle(), (1, 3, 48, 48)),
            "transformer": (TransformerBlock(), (1, 16, 64)), "lstm": (LstmModel(), (12, 1, 16))}


def export(name: str, work: Path) -> Path:
    import torch
    module, shape = _torch_models()[name]
    path = work / f"{name}.onnx"
    torch.onnx.export(module.eval(), (torch.randn(*shape),), str(path), opset_version=17, dynamo=False)
    return path


def models(work: Path, only: list[str] | None) -> list[tuple[str, Path, object]]:
    names = ["digits", "mobilenet", "yolo", "transformer", "lstm"]
    out = []
    for name in names:
        if only and name not in only:
            continue
        if name == "digits":
            out.append((name, ROOT / "models" / "digits_cnn.onnx", str(ROOT / "models" / "digits_calib.npz")))
        else:
            out.append((name, export(name, work), None))
    return out


def check(name: str, path: Path, calib, work: Path, spike: str, steps: bool) -> tuple[int, int, int]:
    """(CPU steps, estimated instructions, Spike's instructions) of one model."""
    import bench_spike as bs
    compiled = o2g.compile(str(path), calib=calib)
    out = work / f"{name}_out"
    compiled.write(str(out), force=True)
    plan = compiled.plan
    rows, _ = bs.model_counts(out / "c", work / f"{name}_build", bs.RUNTIME / "o2g_runtime.c", spike, [], "riscv",
                              [], 7200)
    counted = {i: c for i, _, c in rows}
    est_total = spike_total = n = 0
    for i, step in enumerate(plan.steps):
        if not isinstance(step, CpuOp):
            continue
        est = plan.costs[i]["cpu_instructions"]
        got = counted[i]
        n, est_total, spike_total = n + 1, est_total + est, spike_total + got
        if steps:
            print(f"  {i:>3} {step.op:<14} {step.node[:40]:<40} est {est:>10,} spike {got:>10,} {est / got - 1:>+7.1%}")
    return n, est_total, spike_total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--steps", action="store_true", help="print every CPU step")
    parser.add_argument("--spike", default="spike")
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="o2g-check-cpu-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for name, path, calib in models(work, args.only.split(",") if args.only else None):
            print(f"{name}:")
            results.append((name, *check(name, path, calib, work, args.spike, args.steps)))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    cpi = o2g.config.load_config(None).cpu_cpi
    print(f"\n| model | CPU steps | estimated CPU instructions | Spike (instret) | estimate / Spike | "
          f"est. CPU cycles (x {cpi}) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, n, est, got in results:
        print(f"| {name} | {n} | {est:,} | {got:,} | {est / got:.3f} | {int(np.ceil(est * cpi)):,} |")


if __name__ == "__main__":
    main()
