#!/usr/bin/env python3
"""Train the small digits CNN used as onnx2gemmini's end-to-end test model.

Why this script exists
----------------------
onnx2gemmini needs a real, trained ONNX model that (a) is tiny enough to
commit, (b) only uses ops the compiler maps exactly to Gemmini (Conv,
BatchNormalization, Relu, MaxPool, Flatten, Gemm), and (c) comes with
calibration data for int8 quantisation and held-out data for measuring the
accuracy of the compiled model against its fp32 reference.  This script
produces all of that from scikit-learn's bundled copy of the UCI optical
recognition of handwritten digits data (1797 8x8 images, 10 classes), so the
committed files in ``models/`` can be regenerated bit-for-bit by anyone:

    python scripts/train_digits.py            # writes to models/
    python scripts/train_digits.py --out DIR  # writes elsewhere

Outputs (in ``--out``):

* ``digits_cnn.onnx``    fp32 model, input ``input`` [N,1,8,8] float32 in
                         [0,1], output ``logits`` [N,10] (no softmax).
                         Opset 17, exported by the TorchScript exporter with
                         constant folding off so BatchNormalization stays a
                         separate node (not fused into the preceding Conv).
* ``digits_calib.npz``   200 held-out samples for quantisation calibration,
                         keys ``input`` (float32 [200,1,8,8]) and ``labels``
                         (int64 [200]).
* ``digits_eval.npz``    the remaining held-out samples for accuracy
                         evaluation, same keys.

Determinism: fixed seeds, ``torch.use_deterministic_algorithms(True)``, a
single CPU thread, a seeded ``torch.Generator`` for shuffling and fixed
sklearn ``random_state`` values for the splits.  The .npz files are written
with ``np.savez_compressed``, whose zip members carry a fixed timestamp, so
reruns are byte-identical (the compressed bytes depend only on the zlib
version; the array contents never vary).

Only torch, scikit-learn, numpy, onnx and onnxruntime are used.
"""

from __future__ import annotations

import argparse
import hashlib
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx2gemmini.ort_session import session
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

SEED = 0
SPLIT_RANDOM_STATE = 0
TRAIN_FRACTION = 0.6
N_CALIB = 200
EPOCHS = 40
BATCH_SIZE = 32
LEARNING_RATE = 1e-3
OPSET = 17

INPUT_NAME = "input"
OUTPUT_NAME = "logits"
ONNX_FILE = "digits_cnn.onnx"
CALIB_FILE = "digits_calib.npz"
EVAL_FILE = "digits_eval.npz"

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "models"


class DigitsCNN(nn.Module):
    """Conv-BN-ReLU, 2x (Conv-ReLU-MaxPool), then a two-layer MLP head.

    Every layer maps to an op onnx2gemmini lowers exactly; do not change the
    architecture without checking the compiler supports the result.
    """

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
            nn.Conv2d(32, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 4x4 -> 2x2
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 2 * 2, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def set_determinism(seed: int) -> None:
    """Pin every source of randomness / nondeterminism we rely on."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def load_splits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Return stratified train / calib / eval splits as (x, y) arrays.

    x is float32 [n,1,8,8] scaled to [0,1]; y is int64 [n].
    """
    digits = load_digits()
    x = (digits.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    y = digits.target.astype(np.int64)

    x_train, x_held, y_train, y_held = train_test_split(
        x, y, train_size=TRAIN_FRACTION, stratify=y, random_state=SPLIT_RANDOM_STATE
    )
    x_calib, x_eval, y_calib, y_eval = train_test_split(
        x_held, y_held, train_size=N_CALIB, stratify=y_held,
        random_state=SPLIT_RANDOM_STATE,
    )
    splits = {
        "train": (x_train, y_train),
        "calib": (x_calib, y_calib),
        "eval": (x_eval, y_eval),
    }
    return {
        k: (np.ascontiguousarray(xs, dtype=np.float32),
            np.ascontiguousarray(ys, dtype=np.int64))
        for k, (xs, ys) in splits.items()
    }


def train(model: nn.Module, x: np.ndarray, y: np.ndarray) -> None:
    """Plain Adam + cross-entropy, seeded shuffling, fixed epoch count."""
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(SEED)
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for _ in range(EPOCHS):
        perm = torch.randperm(len(xt), generator=gen)
        for start in range(0, len(xt), BATCH_SIZE):
            idx = perm[start:start + BATCH_SIZE]
            opt.zero_grad()
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    model.eval()


def export_onnx(model: nn.Module, path: Path) -> None:
    """Export with BatchNormalization kept as its own node.

    With do_constant_folding=False the TorchScript exporter skips its eval
    peephole pass, which is what would otherwise fuse BN into the Conv.
    """
    model.eval()
    with warnings.catch_warnings():
        # dynamo=False is deliberate (see above); silence the legacy-exporter
        # deprecation notice so the summary stays readable.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (torch.zeros(1, 1, 8, 8),),
            str(path),
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=False,
            export_params=True,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "N"}, OUTPUT_NAME: {0: "N"}},
        )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT,
        help="output directory (default: the models/ dir next to scripts/)",
    )
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    set_determinism(SEED)
    splits = load_splits()
    x_eval, y_eval = splits["eval"]
    x_calib, y_calib = splits["calib"]

    model = DigitsCNN()
    train(model, *splits["train"])
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(x_eval)).numpy()
    torch_acc = float((torch_logits.argmax(1) == y_eval).mean())

    onnx_path = out / ONNX_FILE
    export_onnx(model, onnx_path)
    np.savez_compressed(out / CALIB_FILE, **{INPUT_NAME: x_calib, "labels": y_calib})
    np.savez_compressed(out / EVAL_FILE, **{INPUT_NAME: x_eval, "labels": y_eval})

    # Verify the exported graph.
    proto = onnx.load(str(onnx_path))
    onnx.checker.check_model(proto)
    ops = [n.op_type for n in proto.graph.node]
    if "BatchNormalization" not in ops:
        raise RuntimeError(f"BatchNormalization missing from ONNX graph: {ops}")

    sess = session(onnx_path)
    ort_logits = sess.run([OUTPUT_NAME], {INPUT_NAME: x_eval})[0]
    max_diff = float(np.abs(ort_logits - torch_logits).max())
    if max_diff >= 1e-4:
        raise RuntimeError(f"onnxruntime/torch logits differ by {max_diff:.3g}")
    ort_acc = float((ort_logits.argmax(1) == y_eval).mean())

    print(f"splits: train={len(splits['train'][1])} calib={len(y_calib)} "
          f"eval={len(y_eval)}")
    print(f"torch fp32 eval accuracy:       {torch_acc:.4f}")
    print(f"onnxruntime fp32 eval accuracy: {ort_acc:.4f} "
          f"({int((ort_logits.argmax(1) == y_eval).sum())}/{len(y_eval)})")
    print(f"max |onnxruntime - torch| logit diff: {max_diff:.3g}")
    print(f"onnx ops: {' '.join(ops)}")
    for name in (ONNX_FILE, CALIB_FILE, EVAL_FILE):
        p = out / name
        print(f"{name}: {p.stat().st_size} bytes sha256={sha256(p)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
