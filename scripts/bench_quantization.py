"""Which quantization options pay off on a hard-to-quantize (depthwise) network, measured side by side.

Trains a small MobileNetV2-style net on scikit-learn's digits (deterministic, seconds on a CPU; needs the
`models` extra: torch and scikit-learn), then compiles it with every range estimator, with and without
cross-layer equalization and with and without bias correction, and reports int8 accuracy against
fp32 and the output SQNR.

    python scripts/bench_quantization.py
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import onnx2gemmini as o2g
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import Dataset


def block(c_in, c_out, stride):
    h = c_in * 4
    return nn.Sequential(nn.Conv2d(c_in, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                         nn.Conv2d(h, h, 3, stride, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                         nn.Conv2d(h, c_out, 1, bias=False), nn.BatchNorm2d(c_out))


def train() -> tuple[nn.Module, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.4, random_state=0,
                                                        stratify=digits.target)
    net = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(), block(16, 24, 1), nn.ReLU(),
                        block(24, 32, 2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for epoch in range(30):
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 32):
            idx = perm[i:i + 32]
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    net.eval()
    return net, x_train[:200], x_test, y_test


def main() -> None:
    net, calib, x_test, y_test = train()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mbv2_digits.onnx"
        torch.onnx.export(net, (torch.from_numpy(calib[:1]),), str(path), dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["logits"])
        calib_set = Dataset({"input": calib[:, None]}, None, "train split")  # samples shaped like the input
        test_set = Dataset({"input": x_test[:, None]}, y_test, "test split")
        print(f"{'estimator':10} {'CLE':4} {'bias c.':7} {'fp32 acc':>9} {'int8 acc':>9} {'SQNR dB':>8} "
              f"{'max LSB vs QDQ':>15}")
        for method in ("minmax", "percentile", "mse"):
            for cle in (False, True):
                for bc in (False, True):
                    compiled = o2g.compile(path, calib=calib_set, calib_method=method, equalize=cle,
                                           bias_correction=bc)
                    r = run_diff(compiled, test_set)
                    out = r["outputs"]["logits"]
                    print(f"{method:10} {'yes' if cle else 'no':4} {'yes' if bc else 'no':7} "
                          f"{r['accuracy']['fp32']:9.2%} {r['accuracy']['int8']:9.2%} "
                          f"{out['fp32_vs_int8']['sqnr_db']:8.2f} {out['int8_vs_ort_qdq']['max_lsb']:15}")


if __name__ == "__main__":
    main()
