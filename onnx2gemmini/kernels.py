"""Gemmini's int8 arithmetic in NumPy, bit for bit (spec/gemmini.md §2), and fast.

Exact int8 GEMM runs through float32 BLAS: every product is at most 2^14 in magnitude, so a K-chunk of
1024 keeps every partial sum at most 2^24, which float32 represents exactly whatever the summation order.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .numerics import acc_scale, mvin_scale, quantize, requantize, wrap_int32

K_CHUNK = 1024


def int8_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact int32 product of int8 matrices [I,K] x [K,J] (either may come as float32 holding int8 values,
    e.g. weights converted once by the emulator).

    Each K-chunk's product is exact in float32 and converts exactly to int32; adding the chunks in int32
    wraps modulo 2^32 as the accumulator does."""
    a32, b32 = a.astype(np.float32, copy=False), b.astype(np.float32, copy=False)
    k = a.shape[1]
    acc = (a32[:, :K_CHUNK] @ b32[:K_CHUNK]).astype(np.int32)
    for k0 in range(K_CHUNK, k, K_CHUNK):
        acc += (a32[:, k0:k0 + K_CHUNK] @ b32[k0:k0 + K_CHUNK]).astype(np.int32)
    return acc


def accumulator_bound(b: np.ndarray, d: np.ndarray | None) -> int:
    """The largest magnitude any partial sum of x @ b + d can reach for int8 x and an int8 matrix b [K, J]:
    128 * (largest column sum of |b|) + max|d|."""
    if b.ndim != 2:
        raise ValueError(f"accumulator_bound: expected a [K, J] matrix, got shape {b.shape}")
    columns = np.zeros(b.shape[1], np.int64)
    for k0 in range(0, b.shape[0], K_CHUNK):  # int16 blocks: |-128| fits, and no int64 copy of a large weight
        block = b[k0:k0 + K_CHUNK].astype(np.int16)
        columns += np.abs(block, out=block).sum(axis=0, dtype=np.int64)
    bound = 128 * int(columns.max(initial=0))
    if d is not None and d.size:
        bound += int(np.abs(d.astype(np.int64)).max())
    return bound


def float32_exact(b: np.ndarray, d: np.ndarray | None) -> bool:
    """Whether x @ b + d stays exact in float32 for every int8 x and int8 matrix b [K, J], whatever K: every
    partial sum is an integer within accumulator_bound, and float32 holds every integer up to 2^24 exactly,
    in any summation order (FMA included)."""
    return accumulator_bound(b, d) <= 2**24


def matmul(a: np.ndarray, b: np.ndarray, d: np.ndarray | None, scale: float, relu: bool,
           repeating_bias: bool = True, exact_f32: bool = False, full_C: bool = False) -> np.ndarray:
    """tiled_matmul_auto in WS mode with int8 output, or with `full_C` the int32 accumulators themselves.
    `exact_f32`: float32_exact(b, d) holds (the caller checked it once per weight), so one float32 product,
    bias add and read-out give the exact result."""
    if exact_f32:
        acc = a.astype(np.float32, copy=False) @ b.astype(np.float32, copy=False)
        if d is not None:
            acc += d.astype(np.float32).reshape(1, -1) if repeating_bias else d.astype(np.float32)
        return acc.astype(np.int32) if full_C else acc_scale(acc, scale, relu)
    acc = int8_matmul(a, b)
    if d is not None:  # int32 + int32 wraps like the accumulator
        acc += d.astype(np.int32, copy=False).reshape(1, -1) if repeating_bias else d.astype(np.int32, copy=False)
    return acc if full_C else acc_scale(acc, scale, relu)


def pad_nhwc(x: np.ndarray, pads: tuple[int, int, int, int], value: int = 0) -> np.ndarray:
    """Pad H and W of an NHWC tensor: pads = (top, left, bottom, right)."""
    t, l, b, r = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=value)


def windows(x: np.ndarray, kernel, strides, pads, dilations, out, pad_value: int = 0) -> np.ndarray:
    """[N, OH, OW, KH, KW, C] view of the (padded) NHWC input under every output position."""
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    oh, ow = out
    t, l, b, r = pads
    need_h = (oh - 1) * sh + (kh - 1) * dh + 1
    need_w = (ow - 1) * sw + (kw - 1) * dw + 1
    h, w = x.shape[1], x.shape[2]
    xp = pad_nhwc(x, (t, l, max(b, need_h - h - t), max(r, need_w - w - l)), pad_value)
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    win = win[:, : (oh - 1) * sh + 1: sh, : (ow - 1) * sw + 1: sw, :, ::dh, ::dw]
    return win.transpose(0, 1, 2, 4, 5, 3)  # N, OH, OW, KH, KW, C


def im2col(x: np.ndarray, kernel, strides, pads, dilations, out, dtype=np.int8) -> np.ndarray:
    """[N*OH*OW, KH*KW*C] patches, columns ordered (kh, kw, c) like Gemmini's conv weights; `dtype` float32
    gathers and converts in one pass for a float32 GEMM."""
    win = windows(x, kernel, strides, pads, dilations, out)
    n, oh, ow = win.shape[:3]
    return np.ascontiguousarray(win, dtype=dtype).reshape(n * oh * ow, -1)


def maxpool_zero_padded(y: np.ndarray, size: int, stride: int, padding: int) -> np.ndarray:
    """Gemmini's fused pool: window positions outside the map read as 0 (spec §2.9)."""
    n, h, w, c = y.shape
    oh = (h + 2 * padding - size) // stride + 1
    ow = (w + 2 * padding - size) // stride + 1
    win = windows(y, (size, size), (stride, stride), (padding,) * 4, (1, 1), (oh, ow), pad_value=0)
    return win.max(axis=(3, 4))


def conv(x, w, bias, stride, padding, kernel_dim, out_dims, scale, relu, pool, exact_f32: bool = False) -> np.ndarray:
    """tiled_conv_auto: NHWC int8 in, [KH*KW*IC][OC] weights, int32 bias, optional fused max-pool
    (`exact_f32` as in matmul)."""
    n = x.shape[0]
    oh, ow = out_dims
    cols = im2col(x, (kernel_dim, kernel_dim), (stride, stride), (padding,) * 4, (1, 1), (oh, ow), np.float32)
    y = matmul(cols, w, bias, scale, relu, exact_f32=exact_f32).reshape(n, oh, ow, -1)
    if pool and pool[1]:
        y = maxpool_zero_padded(y, *pool)
    return y


def resadd(a, b, a_scale, b_scale, c_scale, relu) -> np.ndarray:
    """tiled_resadd_auto: each input mvin-scaled and saturated to int8, added in int32, then scaled."""
    acc = mvin_scale(a, a_scale).astype(np.int32) + mvin_scale(b, b_scale).astype(np.int32)
    return acc_scale(acc, c_scale, relu)


def global_average(x: np.ndarray) -> np.ndarray:
    """tiled_global_average_auto: sum in the accumulator, times float32(1/(dim*dim)), RNE (spec §2.10)."""
    n, h, w, c = x.shape
    acc = x.astype(np.int32).sum(axis=(1, 2))
    return acc_scale(acc, float(np.float32(1.0 / (h * w)))).reshape(n, 1, 1, c)


# --- CPU kernels (int8 in, int8 out) -------------------------------------------------------------

def remap(x: np.ndarray, index, out_shape, value: int) -> np.ndarray:
    """y[i0, .., in] = x[map0[i0], .., mapn[in]], or `value` where any map entry is -1 (exact int8 move).

    `index` concatenates one map per axis (map d has out_shape[d] entries): Slice, Pad, nearest Resize
    and ConvTranspose's zero insertion are all separable per axis, so one kernel serves them all."""
    maps, at = [], 0
    for n in out_shape:
        maps.append(np.asarray(index[at:at + n], np.int64))
        at += n
    y = x[np.ix_(*[np.maximum(m, 0) for m in maps])] if maps else x.copy()
    pad = np.zeros(y.shape, bool)
    for d, m in enumerate(maps):
        pad |= _along(m < 0, y.ndim, d)
    return np.where(pad, np.int8(value), y).astype(np.int8)


def maxpool(x, kernel, strides, pads, dilations, out, **_) -> np.ndarray:
    """ONNX MaxPool on int8 NHWC: padded positions never win (-128 is the int8 -inf)."""
    win = windows(x, kernel, strides, pads, dilations, out, pad_value=-128)
    return win.max(axis=(3, 4)).astype(np.int8)


def avgpool(x, kernel, strides, pads, dilations, out, count_include_pad=0, **_) -> np.ndarray:
    """ONNX AveragePool on int8 NHWC: int32 sum / count, round half to even."""
    win = windows(x, kernel, strides, pads, dilations, out, pad_value=0).astype(np.int32)
    total = win.sum(axis=(3, 4))
    ones = np.ones((1,) + x.shape[1:3] + (1,), np.int8)
    if count_include_pad:
        # positions inside the explicit pads count; positions beyond them (ceil_mode) do not
        padded = pad_nhwc(ones, tuple(pads), 1)
        count = windows(padded, kernel, strides, (0, 0, 0, 0), dilations, out, pad_value=0).sum(axis=(3, 4))
    else:
        count = windows(ones, kernel, strides, pads, dilations, out, pad_value=0).sum(axis=(3, 4))
    # a window wholly in the padding (count 0) averages nothing: 0, as the C runtime writes it
    mean = total.astype(np.float32) / np.maximum(count, 1).astype(np.float32)
    return quantize(mean, 1.0)


def softmax(x, axis, in_scale, out_scale, keep=None) -> np.ndarray:
    """Float32 softmax of int8 values, then QuantizeLinear. Each exp is exp(-d * in_scale) for d = (the row's
    largest - the value) in 0..255 (one rounding of an exact product, where onnxruntime's float softmax
    subtracts two rounded products): one table of 256 exps serves a call, here and in the C kernel.
    `keep` (0/1 over x's trailing axes, repeated for the leading ones): masked positions take no part in the
    largest value nor the sum, and their exp is 0; a row that keeps nothing is uniform (every exp 1), as a
    float softmax of a row whose every score was replaced by one large negative number is."""
    table = np.exp(np.arange(256, dtype=np.float32) * np.float32(-in_scale))
    if keep is not None:
        kept = np.broadcast_to(np.asarray(keep) != 0, x.shape)
        empty = ~kept.any(axis=axis, keepdims=True)
        top = np.where(kept, x.astype(np.int16), np.int16(-128)).max(axis=axis, keepdims=True)
        e = np.where(kept, table[np.clip(top - x.astype(np.int16), 0, 255)], np.float32(0))
        e = np.where(empty, np.float32(1), e)
        return quantize(e / e.sum(axis=axis, keepdims=True), out_scale)
    d = x.max(axis=axis, keepdims=True).astype(np.int16) - x.astype(np.int16)
    e = table[d]
    p = e / e.sum(axis=axis, keepdims=True)
    return quantize(p, out_scale)


def padding_positions(ids: np.ndarray, pad: int) -> np.ndarray:
    """RoBERTa's position ids: pad + the number of non-padding ids up to and including each one (along the last
    axis), and pad itself at a padding id."""
    keep = np.asarray(ids) != pad
    return np.where(keep, np.cumsum(keep, axis=-1) + pad, pad).astype(np.int64)


MASK_FORMS = ("padding", "causal", "query_key")


def attention_keep(mask: np.ndarray, x_shape: tuple[int, ...], form: str) -> np.ndarray:
    """Which positions of attention scores x ([batch, ..., queries, keys]) an attention mask input ([batch,
    keys], nonzero: attend) keeps: "padding" the keys it keeps; "causal" also only keys up to the query's own
    position (the last queries line up with the last keys); "query_key" only where it keeps both the key and
    the query (DeBERTa: a padded query keeps nothing)."""
    keys, queries = x_shape[-1], x_shape[-2]
    kept = np.asarray(mask) != 0
    keep = kept.reshape((mask.shape[0],) + (1,) * (len(x_shape) - 2) + (keys,))
    if form == "causal":
        keep = keep & (np.arange(keys)[None, :] <= np.arange(queries)[:, None] + (keys - queries))
    elif form == "query_key":
        keep = keep & kept[:, keys - queries:].reshape((mask.shape[0],) + (1,) * (len(x_shape) - 3) + (queries, 1))
    return np.broadcast_to(keep, x_shape)


def linear_interpolate(f: np.ndarray, axes, lo, hi, w_lo, w_hi, out_shape) -> np.ndarray:
    """onnxruntime's bilinear/trilinear kernels on float32 data, bit for bit.

    `axes` lists the interpolated axes of `f`, outermost first in ONNX order; for each, `lo`/`hi` (source
    positions) and `w_lo`/`w_hi` (their float32 weights) hold one entry per output position of that axis
    (`out_shape`), tables concatenated in `axes` order. Each output is the sum over the 2^k corners, the
    innermost axis varying fastest, of (w_inner * .. * w_outer) * value, added left to right."""
    out_shape = tuple(out_shape)
    taps, at = [], 0
    for a in axes:
        n = out_shape[a]
        lo_a, hi_a = (np.asarray(t[at:at + n], np.int64) for t in (lo, hi))
        wl, wh = (_along(np.asarray(t[at:at + n], np.float32), f.ndim, a) for t in (w_lo, w_hi))
        taps.append((a, lo_a, hi_a, wl, wh))
        at += n
    total = None
    for corner in range(1 << len(taps)):
        index = [np.arange(n) for n in out_shape]  # the other axes keep their size
        w = np.float32(1)
        for bit, (a, lo_a, hi_a, wl, wh) in enumerate(reversed(taps)):
            high = (corner >> bit) & 1
            index[a] = hi_a if high else lo_a
            w = w * (wh if high else wl)
        term = w * f[np.ix_(*index)]
        total = term if total is None else total + term
    return total.astype(np.float32)


def cubic_interpolate(f: np.ndarray, axes, pos, weight, divisor, out_shape) -> np.ndarray:
    """onnxruntime's bicubic kernel (ResizeBiCubic) on float32 data, bit for bit.

    `axes` = (height, width) axes of `f`; `pos`/`weight` hold four source positions and float32 weights per
    output position of the height axis, then of the width axis (`out_shape`); `divisor` one per output
    position of the height axis. Along the width first, each row's value is 0 + w0*v0 + .. + w3*v3, left to
    right; then the output is 0 + (row0*h0)/d + .. + (row3*h3)/d over the four rows, left to right."""
    f32 = np.float32
    ah, aw = axes
    n_h, n_w = out_shape[ah], out_shape[aw]
    pos, weight = np.asarray(pos, np.int64), np.asarray(weight, f32)
    p_h, p_w = pos[:4 * n_h].reshape(n_h, 4), pos[4 * n_h:].reshape(n_w, 4)
    w_h, w_w = weight[:4 * n_h].reshape(n_h, 4), weight[4 * n_h:].reshape(n_w, 4)
    d = _along(np.asarray(divisor, f32), f.ndim, ah)
    rows = f32(0)
    for j in range(4):
        rows = rows + _along(w_w[:, j], f.ndim, aw) * np.take(f, p_w[:, j], axis=aw)
    total = f32(0)
    for i in range(4):
        total = total + np.take(rows, p_h[:, i], axis=ah) * _along(w_h[:, i], f.ndim, ah) / d
    return np.asarray(total, f32)


def concat(xs: list[np.ndarray], axis: int, in_scales, out_scales) -> np.ndarray:
    """Each input requantized from its scale to the scale it is written at (one per input), then joined."""
    return np.concatenate([requantize(x, s, t) for x, s, t in zip(xs, in_scales, out_scales)], axis=axis)


def _prelu(x, slope):
    return np.where(x < 0, x * slope, x)


def _hypot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sqrt(a*a + b*b) with each product and the sum rounded to float32 (onnxruntime's Mul, Add and Sqrt in
    the golden; C's float operations, no fused multiply-add), sqrt correctly rounded."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.sqrt((a * a).astype(np.float32) + (b * b).astype(np.float32))


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
          "min": np.minimum, "prelu": _prelu, "hypot": _hypot}


def binary(fn: str, operands, in_scales, out_scale, relu=False) -> np.ndarray:
    """Dequantize int8 operands (float constants as they are), apply `fn` in float32, quantize."""
    a, b = (x.astype(np.float32) * np.float32(s) if s is not None else x.astype(np.float32)
            for x, s in zip(operands, in_scales))
    with np.errstate(divide="ignore", invalid="ignore"):
        y = BINARY[fn](a, b).astype(np.float32)
    return quantize(y, out_scale, lo=0 if relu else -128)


def depthwise_conv(x, w, bias, kernel, strides, pads, dilations, out, multiplier, scale, relu) -> np.ndarray:
    """Exact int8 depthwise conv (NHWC; weights [KH][KW][C*multiplier]) with Gemmini's requantization.

    One float32 einsum over a strided window view of the input (no KH*KW-fold copy; two to four times faster
    than a numpy pass per tap): every partial sum is an integer of magnitude at most KH*KW*2^14, exact in
    float32 in any order up to 1024 taps (beyond, int32 einsum)."""
    kh, kw = kernel
    if kh * kw > 1024:
        win = windows(x, kernel, strides, pads, dilations, out).astype(np.int32)  # N, OH, OW, KH, KW, C
        if multiplier > 1:
            win = np.repeat(win, multiplier, axis=-1)
        acc = np.einsum("nhwijc,ijc->nhwc", win, w.astype(np.int32), optimize=True)
    else:
        xf = x.astype(np.float32)
        if multiplier > 1:
            xf = np.repeat(xf, multiplier, axis=-1)
        win = windows(xf, kernel, strides, pads, dilations, out)  # a view: N, OH, OW, KH, KW, C
        acc = np.einsum("nhwijc,ijc->nhwc", win, np.ascontiguousarray(w, np.float32)).astype(np.int32)
    if bias is not None:
        acc = acc + bias
    return acc_scale(wrap_int32(acc), scale, relu)


def _along(vec: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return vec.reshape(shape)


def affine(x, mul, add, axis, in_scale, out_scale, relu=False) -> np.ndarray:
    """Per-channel y = x*mul + add in float32 (a standalone BatchNormalization), then ReLU if asked:
    max(q, 0) after quantizing equals quantizing max(f, 0), the zero point being 0."""
    f = x.astype(np.float32) * np.float32(in_scale)
    q = quantize(f * _along(mul, x.ndim, axis) + _along(add, x.ndim, axis), out_scale)
    return np.maximum(q, 0).astype(np.int8) if relu else q


def lrn(x, axis, size, alpha, beta, bias, in_scale, out_scale) -> np.ndarray:
    """ONNX LRN across channels, in float32."""
    f = np.moveaxis(x.astype(np.float32) * np.float32(in_scale), axis, -1)
    sq = f * f
    c = f.shape[-1]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.concatenate([np.zeros(f.shape[:-1] + (lo,), np.float32), sq,
                             np.zeros(f.shape[:-1] + (hi,), np.float32)], axis=-1)
    csum = np.cumsum(np.concatenate([np.zeros(f.shape[:-1] + (1,), np.float32), padded], axis=-1), axis=-1)
    window = csum[..., size:size + c] - csum[..., :c]
    y = f / np.power(np.float32(bias) + np.float32(alpha / size) * window, np.float32(beta))
    return quantize(np.moveaxis(y, -1, axis), out_scale)


def layernorm(x, gamma, beta, axis, epsilon, in_scale, out_scale) -> np.ndarray:
    """ONNX LayerNormalization over axes [axis, ...] in float32."""
    f = x.astype(np.float32) * np.float32(in_scale)
    axes = tuple(range(axis, x.ndim))
    mean = f.mean(axis=axes, keepdims=True, dtype=np.float32)
    var = ((f - mean) ** 2).mean(axis=axes, keepdims=True, dtype=np.float32)
    y = (f - mean) / np.sqrt(var + np.float32(epsilon)) * gamma + beta
    return quantize(y, out_scale)
