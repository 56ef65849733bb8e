/*
 * onnx2gemmini CPU-kernel runtime; see o2g_runtime.h for what and why.
 * Written for the project from onnx2gemmini/run/kernels.py (the reference).
 */
#include "o2g_runtime.h"

#include <math.h>

/* Round half to even and saturate to int8, independent of the FP rounding
 * mode and of -ffast-math: y - trunc(y) is exact for |y| < 128. */
static int8_t o2g_rne_sat8(float y)
{
    int32_t t;
    float f;
    if (y >= 127.0f)
        return 127;
    if (y <= -128.0f)
        return -128;
    if (!(y > -128.0f)) /* NaN */
        return 0;
    t = (int32_t)y;
    f = y - (float)t;
    if (f > 0.5f || (f == 0.5f && (t & 1)))
        t += 1;
    else if (f < -0.5f || (f == -0.5f && (t & 1)))
        t -= 1;
    return (int8_t)t;
}

/* QuantizeLinear of one value: a true float32 division (the volatile divisor
 * keeps -freciprocal-math from turning it into x * (1/scale)). */
static int8_t o2g_quantize_one(float x, float scale)
{
    volatile float divisor = scale;
    return o2g_rne_sat8(x / divisor);
}

void o2g_quantize(const float *x, int8_t *y, size_t count, float scale)
{
    size_t i;
    for (i = 0; i < count; i++)
        y[i] = o2g_quantize_one(x[i], scale);
}

void o2g_quantize_nchw_to_nhwc(const float *x, int8_t *y, int batches, int channels,
                               int rows, int cols, float scale)
{
    const size_t plane = (size_t)rows * (size_t)cols;
    int b, c;
    size_t p;
    for (b = 0; b < batches; b++)
        for (p = 0; p < plane; p++)
            for (c = 0; c < channels; c++)
                *y++ = o2g_quantize_one(x[((size_t)b * (size_t)channels + (size_t)c) * plane + p], scale);
}

void o2g_transpose(const int8_t *x, int8_t *y, int rank, const int *shape, const int *perm)
{
    size_t in_stride[O2G_MAX_RANK], step[O2G_MAX_RANK];
    int dims[O2G_MAX_RANK], idx[O2G_MAX_RANK];
    size_t count = 1, offset = 0, n;
    int d;

    if (rank < 1 || rank > O2G_MAX_RANK)
        return;
    for (d = rank - 1; d >= 0; d--) {
        in_stride[d] = count;
        count *= (size_t)shape[d];
    }
    for (d = 0; d < rank; d++) { /* output dim d walks input dim perm[d] */
        dims[d] = shape[perm[d]];
        step[d] = in_stride[perm[d]];
        idx[d] = 0;
    }
    for (n = 0; n < count; n++) {
        y[n] = x[offset];
        for (d = rank - 1; d >= 0; d--) { /* odometer over the output index */
            offset += step[d];
            if (++idx[d] < dims[d])
                break;
            offset -= step[d] * (size_t)dims[d];
            idx[d] = 0;
        }
    }
}

/* Input row/col of a window position, or -1 when it falls in the padding. */
static int o2g_in_pos(int out, int k, int stride, int dilation, int pad, int size)
{
    const int pos = out * stride + k * dilation - pad;
    return pos >= 0 && pos < size ? pos : -1;
}

void o2g_im2col(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                const struct o2g_window *w)
{
    int b, orow, ocol, kr, kc, c;
    for (b = 0; b < batches; b++)
        for (orow = 0; orow < w->out_rows; orow++)
            for (ocol = 0; ocol < w->out_cols; ocol++)
                for (kr = 0; kr < w->kernel_rows; kr++) {
                    const int ir = o2g_in_pos(orow, kr, w->stride_rows, w->dilation_rows, w->pad_top, rows);
                    for (kc = 0; kc < w->kernel_cols; kc++) {
                        const int ic = o2g_in_pos(ocol, kc, w->stride_cols, w->dilation_cols, w->pad_left, cols);
                        if (ir < 0 || ic < 0) {
                            for (c = 0; c < channels; c++)
                                *y++ = 0;
                        } else {
                            const int8_t *px = x + (((size_t)b * (size_t)rows + (size_t)ir) * (size_t)cols +
                                                    (size_t)ic) * (size_t)channels;
                            for (c = 0; c < channels; c++)
                                *y++ = px[c];
                        }
                    }
                }
}

void o2g_maxpool(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                 const struct o2g_window *w)
{
    int b, orow, ocol, kr, kc, c;
    for (b = 0; b < batches; b++)
        for (orow = 0; orow < w->out_rows; orow++)
            for (ocol = 0; ocol < w->out_cols; ocol++, y += channels) {
                for (c = 0; c < channels; c++)
                    y[c] = -128;
                for (kr = 0; kr < w->kernel_rows; kr++) {
                    const int ir = o2g_in_pos(orow, kr, w->stride_rows, w->dilation_rows, w->pad_top, rows);
                    if (ir < 0)
                        continue;
                    for (kc = 0; kc < w->kernel_cols; kc++) {
                        const int ic = o2g_in_pos(ocol, kc, w->stride_cols, w->dilation_cols, w->pad_left, cols);
                        const int8_t *px;
                        if (ic < 0)
                            continue;
                        px = x + (((size_t)b * (size_t)rows + (size_t)ir) * (size_t)cols + (size_t)ic) *
                                 (size_t)channels;
                        for (c = 0; c < channels; c++)
                            if (px[c] > y[c])
                                y[c] = px[c];
                    }
                }
            }
}

/* n / d rounded half to even (d > 0), in integers. */
static int32_t o2g_div_rne(int32_t n, int32_t d)
{
    int32_t q = n / d, r = n % d;
    if (r < 0) { /* make it floor division: n = q*d + r, 0 <= r < d */
        r += d;
        q -= 1;
    }
    if (2 * r > d || (2 * r == d && (q & 1)))
        q += 1;
    return q;
}

/* Window positions (one axis) that count for avgpool. */
static int o2g_avg_count(int out, int kernel, int stride, int dilation, int pad_lo, int pad_hi,
                         int size, int include_pad)
{
    const int lo = include_pad ? -pad_lo : 0, hi = include_pad ? size + pad_hi : size;
    int k, n = 0;
    for (k = 0; k < kernel; k++) {
        const int pos = out * stride + k * dilation - pad_lo;
        n += pos >= lo && pos < hi;
    }
    return n;
}

void o2g_avgpool(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                 const struct o2g_window *w, int count_include_pad)
{
    int b, orow, ocol, kr, kc, c;
    for (b = 0; b < batches; b++)
        for (orow = 0; orow < w->out_rows; orow++) {
            const int nr = o2g_avg_count(orow, w->kernel_rows, w->stride_rows, w->dilation_rows,
                                         w->pad_top, w->pad_bottom, rows, count_include_pad);
            for (ocol = 0; ocol < w->out_cols; ocol++, y += channels) {
                const int nc = o2g_avg_count(ocol, w->kernel_cols, w->stride_cols, w->dilation_cols,
                                             w->pad_left, w->pad_right, cols, count_include_pad);
                const int32_t count = (int32_t)nr * (int32_t)nc;
                for (c = 0; c < channels; c++) {
                    int32_t total = 0, q;
                    for (kr = 0; kr < w->kernel_rows; kr++) {
                        const int ir = o2g_in_pos(orow, kr, w->stride_rows, w->dilation_rows, w->pad_top, rows);
                        if (ir < 0)
                            continue;
                        for (kc = 0; kc < w->kernel_cols; kc++) {
                            const int ic = o2g_in_pos(ocol, kc, w->stride_cols, w->dilation_cols,
                                                      w->pad_left, cols);
                            if (ic >= 0)
                                total += x[(((size_t)b * (size_t)rows + (size_t)ir) * (size_t)cols +
                                            (size_t)ic) * (size_t)channels + (size_t)c];
                        }
                    }
                    q = count > 0 ? o2g_div_rne(total, count) : 0;
                    y[c] = (int8_t)(q > 127 ? 127 : q < -128 ? -128 : q);
                }
            }
        }
}

void o2g_clip(const int8_t *x, int8_t *y, size_t count, int lo, int hi)
{
    size_t i;
    for (i = 0; i < count; i++) {
        const int v = x[i];
        y[i] = (int8_t)(v < lo ? lo : v > hi ? hi : v);
    }
}

void o2g_softmax(const int8_t *x, int8_t *y, size_t outer, size_t axis_len, size_t inner,
                 float in_scale, float out_scale)
{
    size_t o, i, k;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const int8_t *xs = x + o * axis_len * inner + i;
            int8_t *ys = y + o * axis_len * inner + i;
            int8_t top = -128;
            float fmax, sum = 0.0f;
            for (k = 0; k < axis_len; k++)
                if (xs[k * inner] > top)
                    top = xs[k * inner];
            fmax = (float)top * in_scale; /* max of the dequantized values */
            for (k = 0; k < axis_len; k++)
                sum += expf((float)xs[k * inner] * in_scale - fmax);
            for (k = 0; k < axis_len; k++) {
                volatile float total = sum;
                const float p = expf((float)xs[k * inner] * in_scale - fmax) / total;
                ys[k * inner] = o2g_quantize_one(p, out_scale);
            }
        }
}
