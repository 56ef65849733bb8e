"""The numbers of Gemmini's int8 quantization, in one leaf module (imports NumPy only).

Every scale, multiplier and rounding the compiler, the emulator and the golden use is defined here once,
so they cannot drift apart (spec/gemmini.md §2):

* activations: symmetric int8, zero point 0, one float32 scale; ONNX QuantizeLinear is float32 true
  division, round half to even, saturate (`quantize`);
* weights: symmetric in [-127, 127]; int32 bias at float32(s_in * s_w);
* Gemmini's read-out: float32(acc) * float32(multiplier), round half to even, clip, then ReLU
  (`acc_scale`), with the multiplier float32(float32(s_in * s_w) / s_out) (`multiplier`);
* the DMA's mvin scaling (`mvin_scale`) and the residual add's scales and error bounds.
"""
from __future__ import annotations

import math

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
WEIGHT_MAX = 127          # symmetric weights never use -128
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def f32(x: float) -> float:
    """`x` rounded to the nearest float32, as a Python float."""
    return float(np.float32(x))


def channel_ranges(w: np.ndarray, axis: int = 0) -> np.ndarray:
    """Each channel's largest |w| along `axis` (the range one weight scale per channel covers)."""
    if not w.size:
        return np.zeros(w.shape[axis])
    others = tuple(a for a in range(w.ndim) if a != axis % w.ndim)
    # max(max w, -min w) is max |w| exactly, without an |w| copy of the weights (or a transposed one)
    return np.maximum(np.max(w, axis=others), -np.min(w, axis=others)) if others else np.abs(w)


def run_tops(ranges: np.ndarray, size: int) -> np.ndarray:
    """The largest range of each run of `size` channels, in order (one weight scale per run)."""
    return np.asarray([np.max(ranges[i:i + size]) for i in range(0, len(ranges), size)], np.float64)


def scale_for(amax: float) -> float:
    """Symmetric int8 scale of a range; an all-zero (or non-finite) range gets a harmless 1/127, and so does a
    range of subnormal values, whose scale would not be a normal float32 (its products and quotients would
    underflow to 0 or overflow): those values quantize to 0."""
    scale = f32(amax / INT8_MAX) if amax > 0 and np.isfinite(amax) else 0.0
    return scale if scale >= np.finfo(np.float32).tiny else f32(1.0 / INT8_MAX)


def bias_scale(s_in: float, s_w: float) -> float:
    """The int32 bias's scale: float32(s_in * s_w), the scale of the accumulator."""
    return float(np.float32(s_in) * np.float32(s_w))


def multiplier(s_in: float, s_w: float, s_out: float) -> float:
    """Gemmini's acc_scale: float32(float32(s_in*s_w)/s_out) — the exact value onnxruntime uses."""
    return float(np.float32(np.float32(s_in) * np.float32(s_w)) / np.float32(s_out))


def along_axis(values, axis: int, rank: int) -> np.ndarray:
    """float32 `values`, one per index along `axis`, shaped to broadcast against a `rank`-dim array (per-axis
    scales: a model output that keeps its concat inputs' scales)."""
    shape = [1] * rank
    shape[axis] = -1
    return np.asarray(values, np.float32).reshape(shape)


def quantize(x: np.ndarray, scale: float, lo: int = INT8_MIN) -> np.ndarray:
    """ONNX QuantizeLinear to int8 with zero point 0: float32 true division, round half to even,
    saturate to [lo, 127] (lo=0 quantizes and applies a ReLU in one go: the zero point is 0).

    NaN quantizes to `lo`, as onnxruntime's x86 kernel does it (max(NaN, lo) gives lo) and as a fused
    ReLU would clamp it; infinities saturate."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        q = np.rint(np.asarray(x, np.float32) / np.float32(scale))
    q = np.clip(q, lo, INT8_MAX)
    if q.dtype.kind == "f":
        q = np.where(np.isnan(q), np.float32(lo), q)
    return q.astype(np.int8)


def quantize_value(x: float, scale: float) -> int:
    """`quantize` of one number, as a Python int (clip bounds, pad values)."""
    return int(quantize(np.float32(x), scale))


def quantize_accumulator(x: np.ndarray, scale: float) -> np.ndarray:
    """A float product back to int32 accumulators at `scale` (a full_C matmul's output): the float32 value
    over the float32 scale in float64 (float32 division would round accumulators above 2^24), round half to
    even, saturated to int32."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        q = np.rint(np.asarray(x, np.float32).astype(np.float64) / np.float64(np.float32(scale)))
    return np.clip(np.nan_to_num(q), INT32_MIN, INT32_MAX).astype(np.int32)


def accumulator_lsb(bound: int) -> int:
    """How many units a full_C matmul's golden accumulator may be off when it comes back from onnxruntime's
    float output (QGemm: the exact int32 sum, converted to float32 and multiplied by float32(s_x*s_w), two
    roundings of at most 2^-24 relative each): floor(bound * 2^-23 + 1/2) for accumulators up to `bound`
    (kernels.accumulator_bound), so 0 below 2^22."""
    return math.floor(bound / 2**23 + 0.5)


def dequantize(q: np.ndarray, scale: float) -> np.ndarray:
    """int8 (or int32) at `scale` -> float32, as ONNX DequantizeLinear does it."""
    return np.asarray(q).astype(np.float32) * np.float32(scale)


def requantize(q: np.ndarray, s_in: float, s_out: float) -> np.ndarray:
    """int8 at s_in -> int8 at s_out as DQ then Q do it: float32(q*s_in)/s_out, RNE, saturate."""
    if s_in == s_out:
        return q
    return quantize(dequantize(q, s_in), s_out)


def symmetric_int8(w: np.ndarray, scale) -> np.ndarray:
    """Symmetric int8 weights in [-127, 127]; `scale` a float or an array broadcasting against `w`."""
    divisor = np.asarray(scale, np.float32)
    return np.clip(np.rint(w.astype(np.float32) / divisor), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)


def quantize_bias(b: np.ndarray, scale) -> np.ndarray:
    """int32 bias at `scale` (a float or one per output channel), rounded in float64, saturated."""
    q = np.rint(np.asarray(b, np.float64) / np.asarray(scale, np.float64))
    return np.clip(q, INT32_MIN, INT32_MAX).astype(np.int32)


def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Two's-complement wrap, as the 32-bit accumulator does."""
    return x.astype(np.int64).astype(np.uint32).view(np.int32) if x.dtype != np.int32 else x


def acc_scale(acc: np.ndarray, scale: float, relu: bool = False) -> np.ndarray:
    """Accumulator read-out: float32(acc) * float32(scale), round half to even, clip int8, then ReLU."""
    y = acc.astype(np.float32)
    y *= np.float32(scale)
    np.rint(y, out=y)
    return np.clip(y, 0 if relu else INT8_MIN, INT8_MAX, out=y).astype(np.int8)


def mvin_scale(x: np.ndarray, scale: float) -> np.ndarray:
    """The DMA's mvin scaling: int8 -> float32 * scale -> round half to even -> saturate int8."""
    if scale == 1.0:
        return x.astype(np.int8)
    return np.clip(np.rint(x.astype(np.float32) * np.float32(scale)), INT8_MIN, INT8_MAX).astype(np.int8)


def resadd_scales(sa: float, sb: float, so: float) -> tuple[float, float, float]:
    """tiled_resadd's (A_scale, B_scale, C_scale) for a quantized Add: both input scales <= 1, so the
    int8 saturation after each mvin scale never clips (spec/gemmini.md §2.8)."""
    m = max(sa, sb)
    return (f32(np.float32(sa) / np.float32(m)), f32(np.float32(sb) / np.float32(m)),
            f32(np.float32(m) / np.float32(so)))


def resadd_tolerance(c_scale: float) -> int:
    """LSB bound of a resadd vs onnxruntime's float Add: the smaller-scale input is rounded to int8 at
    the larger scale (error <= 1/2 of that LSB), which C_scale carries to the output, plus the output's
    own rounding."""
    return 1 + math.floor(0.5 * c_scale)


def resadd_explained(qa: np.ndarray, qb: np.ndarray, sa: float, sb: float, so: float, a_scale: float,
                     b_scale: float, c_scale: float) -> np.ndarray:
    """Where a resadd's int8 output may differ from onnxruntime's QDQ Add of the same int8 inputs (qa, qb at
    scales sa, sb; output scale so), value by value. The float Add rounds v = (qa*sa + qb*sb)/so; Gemmini
    first rounds each input to int8 at the larger scale (rint(q * scale), error e), which moves the value it
    rounds to v + c_scale*(e_A + e_B). The two can round apart only where a rounding boundary (k + 1/2) lies
    between those two values (or within float32 rounding of one), unless both saturate to the same end of
    the int8 range: exactly these positions, derived from the inputs and the scales, not from what any kernel
    computed."""
    a, b = qa.astype(np.float32), qb.astype(np.float32)
    shift = np.float64(c_scale) * ((np.rint(a * np.float32(a_scale)) - a * np.float32(a_scale)).astype(np.float64)
                                   + (np.rint(b * np.float32(b_scale)) - b * np.float32(b_scale)).astype(np.float64))
    v = (qa.astype(np.float64) * np.float64(np.float32(sa)) + qb.astype(np.float64) * np.float64(np.float32(sb))) \
        / np.float64(np.float32(so))
    lo, hi = np.minimum(v, v + shift), np.maximum(v, v + shift)
    boundary = np.floor(lo + 0.5) + 0.5  # the first boundary above lo
    near = 1e-3  # float32 sums and divisions, far below an LSB
    crossing = (boundary <= hi + near) | (np.abs(lo - (boundary - 1.0)) <= near)
    saturated = (lo > INT8_MAX + 0.5 + near) | (hi < INT8_MIN - 0.5 - near)  # both clip to the same end
    return crossing & ~saturated


def resadd_mismatch_rate(a_scale: float, b_scale: float, c_scale: float) -> float:
    """A bound on the share of resadd outputs that differ from the float Add. Each input value q is
    rescaled to int8 (rint(q * scale), an error e(q) of at most 1/2), which moves the output by
    C_scale * |e_A(q) + e_B(q)| < 1 LSB and so crosses a rounding boundary for at most that share of
    values; the largest shift over the int8 range bounds the average whatever the data. (Activations
    clustered on a few values put measured rates between a half and all of this; a uniform-error estimate,
    C_scale/4, was exceeded by real models.) An input at scale 1 is not rounded: both at 1, the add is exact."""
    q = np.arange(-128, 128, dtype=np.float32)
    shift = sum(float(np.max(np.abs(np.rint(q * np.float32(s)) - q * np.float32(s)))) for s in (a_scale, b_scale))
    return min(1.0, c_scale * shift)
