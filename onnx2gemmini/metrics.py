"""Agreement measures between a reference and a quantized result."""
from __future__ import annotations

import math

import numpy as np


def sqnr_db(ref: np.ndarray, x: np.ndarray) -> float | None:
    """Signal-to-quantization-noise ratio in dB; None when there is no error at all."""
    ref, x = ref.astype(np.float64).ravel(), x.astype(np.float64).ravel()
    noise = float(np.sum((ref - x) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return None
    if signal == 0.0:
        return float(-10.0 * math.log10(noise))  # reference all zero: report -noise power
    return 10.0 * math.log10(signal / noise)


def cosine(ref: np.ndarray, x: np.ndarray) -> float:
    ref, x = ref.astype(np.float64).ravel(), x.astype(np.float64).ravel()
    na, nb = float(np.linalg.norm(ref)), float(np.linalg.norm(x))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(ref, x) / (na * nb))


def top1_agreement(ref: np.ndarray, x: np.ndarray) -> float | None:
    """Share of samples (axis 0) whose argmax over the last axis agrees; None for single-value outputs."""
    if ref.ndim < 2 or ref.shape[-1] < 2:
        return None
    a = ref.reshape(ref.shape[0], -1, ref.shape[-1]).argmax(-1)
    b = x.reshape(x.shape[0], -1, x.shape[-1]).argmax(-1)
    return float(np.mean(a == b))
