"""Agreement measures between a reference and a quantized result."""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

BLOCK_ELEMENTS = 1 << 22  # 4M values: a block's float64 temporaries are tens of MB, not GB


def blocks(shape: tuple[int, ...], limit: int = BLOCK_ELEMENTS) -> Iterator[tuple]:
    """Index tuples that cut an array of `shape` into consecutive blocks of at most about `limit` values
    (ranges along one axis, whole along the axes after it). A per-layer comparison of a transformer's
    attention scores (800 MB at 4096 tokens) would otherwise hold several GB of float64 temporaries; its
    sums are taken block by block instead."""
    size = math.prod(shape)
    if size <= limit:
        yield (Ellipsis,)
        return
    axis, inner = len(shape) - 1, 1  # ranges along `axis`; `inner` values per index of it
    while axis > 0 and inner * shape[axis] <= limit:
        inner *= shape[axis]
        axis -= 1
    step = max(1, limit // inner)
    for outer in np.ndindex(*shape[:axis]):
        for start in range(0, shape[axis], step):
            yield outer + (slice(start, start + step),)


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
