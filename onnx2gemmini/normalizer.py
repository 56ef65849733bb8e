"""Gemmini's normalizer SOFTMAX (configs with has_normalizations): a row softmax applied while the accumulator
is read out, with I-BERT's integer exponential, computed bit for bit as Gemmini's functional model does it.

Sources: gemmini-rocc-tests' include/gemmini.h (tiled_matmul_outer derives the constants from bert_scale,
the accumulator's real scale S) and ucb-bar/libgemmini's gemmini.cc (apply_iexp, apply_norm, and LOOP_WS's
schedule: a MAX pass, a SUM_EXP pass, then the write, per row of the whole J dimension):
  e(x) = iexp(x - max(row)),  p = acc_scale(e, 127 / sum(e)),  out = acc_scale(p, scale)
with iexp(q) = ((qp + qb)^2 + qc) >> z, z = (-q * qln2_inv) >> 16, qp = q + z * qln2; every sum and product an
int32 that wraps, every shift count taken mod 32 (x86 and RISC-V), acc_scale a float32 product rounded half
to even and saturated to int8. The output is about 127 * softmax(S * acc): its scale is 1/127 when
`scale` is 1.

The result approximates a softmax only where no int32 wraps (`softmax_fits`), where I-BERT's exp is close
to exp at the scale (`exp_error`) and where no shift count wraps (`fits_scores`); passes/fuse_softmax.py maps
a softmax here only then (`softmax_call` picks the operands' mvin factor that makes it so).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .numerics import acc_scale

SOFTMAX = 4  # gemmini.h's activation code
OUT_SCALE = 1.0 / 127.0  # the scale of p = 127 * softmax
INT32_MAX = 2**31 - 1
_f32 = np.float32


@dataclass(frozen=True)
class SoftmaxConstants:
    """What tiled_matmul_outer sends with config_norm for SOFTMAX."""

    qb: int
    qc: int
    qln2: int
    qln2_inv: int

    @property
    def largest_exp(self) -> int:
        """iexp's largest value (at the row's maximum, q = 0: z = 0, qp = 0)."""
        return self.qb * self.qb + self.qc


def softmax_constants(bert_scale: float) -> SoftmaxConstants | None:
    """gemmini.h's constants for bert_scale S: qln2 = (int)(0.693147 / S) in double; qb = b / S and
    qc = c / (a * S * S) in float32 (a, b, c = 0.3585, 1.353, 0.344); each truncated toward zero. None when
    one does not fit an int32 or qln2 is 0 (C would divide by zero)."""
    s = _f32(bert_scale)
    if not s > 0:
        return None
    qln2_f = 0.693147 / float(s)
    qb_f = float(_f32(1.353) / s)
    qc_f = float(_f32(0.344) / (_f32(_f32(0.3585) * s) * s))
    if not all(abs(v) < 2**31 for v in (qln2_f, qb_f, qc_f)):
        return None
    qln2 = int(qln2_f)
    if qln2 == 0:
        return None
    return SoftmaxConstants(int(qb_f), int(qc_f), qln2, 65536 // qln2)


def softmax_fits(bert_scale: float, J: int, largest_abs_acc: int) -> bool:
    """Whether no int32 wraps for rows of J accumulators of magnitude at most `largest_abs_acc`: the constants
    exist, a row's exps sum below 2^31 (each is at most largest_exp), and -q * qln2_inv stays below 2^31 for
    q = x - max >= -2 * largest_abs_acc."""
    k = softmax_constants(bert_scale)
    if k is None:
        return False
    return J * k.largest_exp <= INT32_MAX and 2 * largest_abs_acc * k.qln2_inv <= INT32_MAX


def _wrap(v: np.ndarray) -> np.ndarray:
    """int64 values as the int32 two's-complement results C computes."""
    return ((v + 2**31) & 0xFFFFFFFF) - 2**31


def iexp(q: np.ndarray, k: SoftmaxConstants) -> np.ndarray:
    """libgemmini's apply_iexp on int64 arrays holding int32 values q <= 0."""
    z = _wrap(-q * k.qln2_inv) >> 16
    qp = _wrap(q + _wrap(z * k.qln2))
    t = _wrap(qp + k.qb)
    q_exp = _wrap(_wrap(t * t) + k.qc)
    return q_exp >> (z & 31)


def softmax_rows(acc: np.ndarray, bert_scale: float, scale: float) -> np.ndarray:
    """The int8 output of a loop_ws with act SOFTMAX for the int32 accumulators `acc` [rows, J]."""
    k = softmax_constants(bert_scale)
    if k is None:
        raise ValueError(f"bert_scale {bert_scale!r} has no SOFTMAX constants")
    x = acc.astype(np.int64)
    e = iexp(_wrap(x - x.max(axis=-1, keepdims=True)), k)
    total = _wrap(e.sum(axis=-1, keepdims=True))  # the int32 sum wraps like the running one
    with np.errstate(divide="ignore"):
        inv = _f32(127.0) / total.astype(_f32)
    return acc_scale(acc_scale(e, inv), scale)  # p = 127 e / sum in int8, then the read-out scale


def softmax_call(real_scale: float, J: int, K: int, bias: np.ndarray | None = None) -> tuple[float, float] | None:
    """(bert_scale, mvin factor for A and B) for a SOFTMAX read-out of an int8 x int8 product over K terms
    whose accumulators have real scale `real_scale`, rows of J: the factor is 1 where no int32 can wrap,
    else the largest one (in steps of 2^-1/8) that makes the accumulators coarse enough, A and B both
    rounded by the mvin scaler to int8 values factor times their own (the product's real scale grows by
    1/factor^2), and where I-BERT's exp is within MAX_EXP_ERROR (exp_error: at fine scales qln2_inv =
    65536 // qln2 is a small integer and z comes out wrong). `bias`: the constant added to the scores (in
    real units; the int32 D round(bias / bert_scale) adds to the accumulators). None if no factor down to
    1/64 does both. The pass, the lowering and the golden all call this, so they agree on the factor."""
    largest_bias = 0.0 if bias is None else float(np.abs(bias).max(initial=0.0))
    factor = 1.0
    while factor >= 1 / 64:
        a = float(_f32(factor))
        bert = float(_f32(real_scale / (a * a)))
        largest = K * 128 * 128 + int(np.ceil(largest_bias / bert))
        if softmax_fits(bert, J, largest) and exp_error(bert) <= MAX_EXP_ERROR:
            return bert, a
        factor *= 2 ** -0.125
    return None


# How far the calibrated scores' range must stay inside score_range (unseen inputs reach further).
SCORE_HEADROOM = 1.25
# The largest relative error of the integer exp a fused softmax may have (about 2.5 LSB of 1/127 at p = 1).
MAX_EXP_ERROR = 0.02
# Below this share of the row's largest exp a value's error cannot move its int8 probability (127 p < 1/2).
NEGLIGIBLE_EXP = 1.0 / 256


@functools.lru_cache(maxsize=256)
def exp_error(bert_scale: float) -> float:
    """The largest relative error of iexp(q) / iexp(0) against exp(q * S) over every q whose exact exp is at
    least NEGLIGIBLE_EXP: I-BERT's polynomial, its integer constants and the shift's truncated z, evaluated
    at each of those q (not a textbook bound)."""
    k = softmax_constants(bert_scale)
    s = float(_f32(bert_scale))
    q = -np.arange(0, int(np.log(1 / NEGLIGIBLE_EXP) / s) + 1, dtype=np.int64)
    ratio = iexp(q, k).astype(np.float64) / k.largest_exp
    return float(np.max(np.abs(ratio / np.exp(q * s) - 1.0)))


def _relative_error(bert_scale: float, biased: bool) -> float:
    """How far each probability may be from the exact one, relatively: each exp within exp_error(S) = e of
    its exact value (with a bias D rounded to whole units of S, its score within S / 2: e grows by
    expm1(S / 2)), numerator and sum alike: 2e / (1 - e)."""
    e = exp_error(bert_scale) + (float(np.expm1(bert_scale / 2)) if biased else 0.0)
    return 2 * e / (1 - e)


def softmax_lsb(bert_scale: float, biased: bool = False) -> int:
    """The largest difference, in 1/127, between the normalizer's softmax and an exact one quantized the same
    way: 127 p times the relative error (p <= 1), plus one LSB for the two roundings landing on either side."""
    return int(np.floor(127 * _relative_error(bert_scale, biased))) + 1


def softmax_mismatch_rate(bert_scale: float, J: int, biased: bool = False) -> float:
    """The expected share of values that differ from an exact softmax quantized the same way, at most: a value
    of probability p moves by at most 127 p r LSB (r the relative error), so it crosses a rounding boundary
    with probability at most min(1, 127 p r); p averages 1/J over a row, so the share is at most 127 r / J."""
    return min(1.0, 127 * _relative_error(bert_scale, biased) / J)


def score_range(bert_scale: float) -> float:
    """The widest row (largest minus smallest score, in real units) whose exps all shift by less than 32:
    beyond it libgemmini's shift count wraps (z & 31) and a value far below its row's largest gets an exp as
    large as the largest's (about 32 ln 2 = 22.2 at any scale)."""
    k = softmax_constants(bert_scale)
    return ((2**21 - 1) // k.qln2_inv) * float(_f32(bert_scale))


def fits_scores(bert_scale: float, score_amax: float) -> bool:
    """Whether scores calibrated within +-score_amax stay inside score_range with SCORE_HEADROOM to spare."""
    return 2 * score_amax * SCORE_HEADROOM <= score_range(bert_scale)
