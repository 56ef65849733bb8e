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

/* The NHWC input pixel (its `channels` values) under window position (kr, kc) of output (orow,
 * ocol) in batch b, or NULL when that position is padding. */
static const int8_t *o2g_pixel(const int8_t *x, int b, int rows, int cols, int channels,
                               const struct o2g_window *w, int orow, int ocol, int kr, int kc)
{
    const int ir = o2g_in_pos(orow, kr, w->stride_rows, w->dilation_rows, w->pad_top, rows);
    const int ic = o2g_in_pos(ocol, kc, w->stride_cols, w->dilation_cols, w->pad_left, cols);
    if (ir < 0 || ic < 0)
        return NULL;
    return x + (((size_t)b * (size_t)rows + (size_t)ir) * (size_t)cols + (size_t)ic) * (size_t)channels;
}

void o2g_im2col(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                const struct o2g_window *w)
{
    int b, orow, ocol, kr, kc, c;
    for (b = 0; b < batches; b++)
        for (orow = 0; orow < w->out_rows; orow++)
            for (ocol = 0; ocol < w->out_cols; ocol++)
                for (kr = 0; kr < w->kernel_rows; kr++)
                    for (kc = 0; kc < w->kernel_cols; kc++) {
                        const int8_t *px = o2g_pixel(x, b, rows, cols, channels, w, orow, ocol, kr, kc);
                        for (c = 0; c < channels; c++)
                            *y++ = px != NULL ? px[c] : 0;
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
                for (kr = 0; kr < w->kernel_rows; kr++)
                    for (kc = 0; kc < w->kernel_cols; kc++) {
                        const int8_t *px = o2g_pixel(x, b, rows, cols, channels, w, orow, ocol, kr, kc);
                        for (c = 0; px != NULL && c < channels; c++)
                            if (px[c] > y[c])
                                y[c] = px[c];
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
                    for (kr = 0; kr < w->kernel_rows; kr++)
                        for (kc = 0; kc < w->kernel_cols; kc++) {
                            const int8_t *px = o2g_pixel(x, b, rows, cols, channels, w, orow, ocol, kr, kc);
                            total += px != NULL ? px[c] : 0;
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

/* float32 values produced on demand, summed in NumPy's order. */
struct o2g_values {
    const int8_t *x;   /* int8 source */
    size_t stride;     /* elements between successive values */
    float scale;       /* value = x * scale ... */
    float shift;       /* ... - shift, */
    int kind;          /* then exp() (O2G_EXP), squared (O2G_SQUARE) or as is (O2G_PLAIN) */
};
enum { O2G_PLAIN, O2G_EXP, O2G_SQUARE };

static float o2g_value(const struct o2g_values *v, size_t i)
{
    volatile float f = (float)v->x[i * v->stride] * v->scale; /* rounded before the subtraction */
    volatile float d = f - v->shift;
    volatile float r; /* rounded before any sum: no fused multiply-add */
    if (v->kind == O2G_EXP)
        r = expf(d);
    else if (v->kind == O2G_SQUARE)
        r = d * d;
    else
        r = d;
    return r;
}

/* NumPy's pairwise summation of n float32 values (its reduction over a contiguous axis): blocks of
 * up to 128 summed with 8 accumulators, larger runs split in two at a multiple of 8. */
static float o2g_pairwise(const struct o2g_values *v, size_t start, size_t n)
{
    size_t i, j;
    if (n < 8) {
        float res = -0.0f;
        for (i = 0; i < n; i++)
            res += o2g_value(v, start + i);
        return res;
    }
    if (n <= 128) {
        float r[8], res;
        for (j = 0; j < 8; j++)
            r[j] = o2g_value(v, start + j);
        for (i = 8; i < n - (n % 8); i += 8)
            for (j = 0; j < 8; j++)
                r[j] += o2g_value(v, start + i + j);
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += o2g_value(v, start + i);
        return res;
    } else {
        size_t n2 = n / 2;
        n2 -= n2 % 8;
        return o2g_pairwise(v, start, n2) + o2g_pairwise(v, start + n2, n - n2);
    }
}

/* The sum NumPy's x.sum(axis) gives: pairwise along a contiguous axis (stride 1), else in order. */
static float o2g_sum(const struct o2g_values *v, size_t n)
{
    float res = 0.0f;
    size_t i;
    if (v->stride == 1)
        return o2g_pairwise(v, 0, n);
    for (i = 0; i < n; i++)
        res += o2g_value(v, i);
    return res;
}

/* a / b, rounded once (no reciprocal, no fusion). */
static float o2g_div(float a, float b)
{
    volatile float divisor = b;
    return a / divisor;
}

void o2g_softmax(const int8_t *x, int8_t *y, size_t outer, size_t axis_len, size_t inner,
                 float in_scale, float out_scale)
{
    size_t o, i, k;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const int8_t *xs = x + o * axis_len * inner + i;
            int8_t *ys = y + o * axis_len * inner + i;
            struct o2g_values v;
            int8_t top = -128;
            float sum;
            for (k = 0; k < axis_len; k++)
                if (xs[k * inner] > top)
                    top = xs[k * inner];
            v.x = xs;
            v.stride = inner;
            v.scale = in_scale;
            v.shift = (float)top * in_scale; /* the largest dequantized value */
            v.kind = O2G_EXP;
            sum = o2g_sum(&v, axis_len);
            for (k = 0; k < axis_len; k++)
                ys[k * inner] = o2g_quantize_one(o2g_div(o2g_value(&v, k), sum), out_scale);
        }
}

void o2g_gather(const int8_t *x, int8_t *y, size_t outer, size_t axis_len, size_t inner,
                const int64_t *indices, size_t count)
{
    size_t o, k, i;
    for (o = 0; o < outer; o++)
        for (k = 0; k < count; k++) {
            const int8_t *src = x + (o * axis_len + (size_t)indices[k]) * inner;
            for (i = 0; i < inner; i++)
                *y++ = src[i];
        }
}

void o2g_remap(const int8_t *x, int8_t *y, int rank, const int *in_shape, const int *out_shape,
               const int64_t *index, int8_t value)
{
    const int64_t *map[O2G_MAX_RANK];
    size_t in_stride[O2G_MAX_RANK], count = 1, stride = 1, k;
    int pos[O2G_MAX_RANK];
    const int64_t *m = index;
    int d;
    for (d = 0; d < rank; d++) {
        map[d] = m;
        m += out_shape[d];
        pos[d] = 0;
        count *= (size_t)out_shape[d];
    }
    for (d = rank - 1; d >= 0; d--) {
        in_stride[d] = stride;
        stride *= (size_t)in_shape[d];
    }
    for (k = 0; k < count; k++) {
        size_t at = 0;
        int pad = 0;
        for (d = 0; d < rank; d++) {
            const int64_t i = map[d][pos[d]];
            if (i < 0)
                pad = 1;
            else
                at += (size_t)i * in_stride[d];
        }
        y[k] = pad ? value : x[at];
        for (d = rank - 1; d >= 0; d--) {
            if (++pos[d] < out_shape[d])
                break;
            pos[d] = 0;
        }
    }
}

/* int8 at in_scale -> int8 at out_scale, as DequantizeLinear then QuantizeLinear. */
static int8_t o2g_requantize(int8_t x, float in_scale, float out_scale)
{
    volatile float f = (float)x * in_scale;
    return o2g_quantize_one(f, out_scale);
}

void o2g_concat_part(const int8_t *x, int8_t *y, size_t outer, size_t part_len, size_t inner,
                     size_t total_len, size_t offset, float in_scale, float out_scale)
{
    const int same = in_scale == out_scale;
    size_t o, i;
    for (o = 0; o < outer; o++) {
        int8_t *dst = y + (o * total_len + offset) * inner;
        const int8_t *src = x + o * part_len * inner;
        for (i = 0; i < part_len * inner; i++)
            dst[i] = same ? src[i] : o2g_requantize(src[i], in_scale, out_scale);
    }
}

#define O2G_RESIZE_MAX_AXES 3

void o2g_resize_linear(const int8_t *x, int8_t *y, int rank, const int *in_shape, const int *out_shape,
                       int naxes, const int *axes, const int64_t *lo, const int64_t *hi,
                       const float *w_lo, const float *w_hi, float in_scale, float out_scale)
{
    size_t in_stride[O2G_MAX_RANK], table[O2G_RESIZE_MAX_AXES], count = 1, stride = 1, at = 0, k;
    int pos[O2G_MAX_RANK], resized[O2G_MAX_RANK];
    int d, j, corner;
    if (rank < 0 || rank > O2G_MAX_RANK || naxes < 0 || naxes > O2G_RESIZE_MAX_AXES)
        return;
    for (d = rank - 1; d >= 0; d--) {
        in_stride[d] = stride;
        stride *= (size_t)in_shape[d];
        count *= (size_t)out_shape[d];
        pos[d] = 0;
        resized[d] = 0;
    }
    for (j = 0; j < naxes; j++) { /* where each axis' table starts */
        table[j] = at;
        at += (size_t)out_shape[axes[j]];
        resized[axes[j]] = 1;
    }
    for (k = 0; k < count; k++) {
        size_t base = 0;
        volatile float sum = 0.0f;
        for (d = 0; d < rank; d++)
            if (!resized[d])
                base += (size_t)pos[d] * in_stride[d];
        for (corner = 0; corner < 1 << naxes; corner++) {
            size_t src = base;
            volatile float w = 1.0f, v, term;
            for (j = 0; j < naxes; j++) { /* innermost axis first: bit j selects its hi tap */
                const int a = axes[naxes - 1 - j];
                const size_t t = table[naxes - 1 - j] + (size_t)pos[a];
                const int high = (corner >> j) & 1;
                src += (size_t)(high ? hi[t] : lo[t]) * in_stride[a];
                w = w * (high ? w_hi[t] : w_lo[t]);
            }
            v = (float)x[src] * in_scale;
            term = w * v;
            sum = sum + term;
        }
        y[k] = o2g_quantize_one(sum, out_scale);
        for (d = rank - 1; d >= 0; d--) { /* odometer over the output index */
            if (++pos[d] < out_shape[d])
                break;
            pos[d] = 0;
        }
    }
}

void o2g_lut(const int8_t *x, int8_t *y, size_t count, const int8_t *table)
{
    size_t i;
    for (i = 0; i < count; i++)
        y[i] = table[x[i] + 128];
}

static float o2g_operand_value(const struct o2g_operand *a, size_t offset)
{
    volatile float f;
    if (a->is_float)
        return ((const float *)a->data)[offset];
    f = (float)((const int8_t *)a->data)[offset] * a->scale;
    return f;
}

void o2g_binary(int fn, const struct o2g_operand *a, const struct o2g_operand *b, int8_t *y,
                int rank, const int *shape, float out_scale, int relu)
{
    int idx[O2G_MAX_RANK];
    size_t count = 1, n, oa = 0, ob = 0;
    int d;

    if (rank < 0 || rank > O2G_MAX_RANK)
        return;
    for (d = 0; d < rank; d++) {
        count *= (size_t)shape[d];
        idx[d] = 0;
    }
    for (n = 0; n < count; n++) {
        const float va = o2g_operand_value(a, oa), vb = o2g_operand_value(b, ob);
        volatile float r;
        int8_t q;
        switch (fn) {
        case O2G_ADD: r = va + vb; break;
        case O2G_SUB: r = va - vb; break;
        case O2G_MUL: r = va * vb; break;
        case O2G_DIV: r = o2g_div(va, vb); break;
        case O2G_MAX: r = va > vb ? va : vb; break;
        case O2G_PRELU: r = va < 0 ? va * vb : va; break;
        default: r = va < vb ? va : vb; break;
        }
        if (r != r) /* NaN (0/0) */
            r = 0.0f;
        else if (r > 3e38f) /* +-inf as NumPy's nan_to_num(posinf=3e38) */
            r = 3e38f;
        else if (r < -3e38f)
            r = -3e38f;
        q = o2g_quantize_one(r, out_scale);
        y[n] = relu && q < 0 ? 0 : q;
        for (d = rank - 1; d >= 0; d--) { /* odometer over the output index */
            oa += (size_t)a->strides[d];
            ob += (size_t)b->strides[d];
            if (++idx[d] < shape[d])
                break;
            oa -= (size_t)a->strides[d] * (size_t)shape[d];
            ob -= (size_t)b->strides[d] * (size_t)shape[d];
            idx[d] = 0;
        }
    }
}

void o2g_dwconv(const int8_t *x, const int8_t *weights, const int32_t *bias, int8_t *y,
                int batches, int rows, int cols, int channels, const struct o2g_window *w,
                int multiplier, float scale, int relu)
{
    const int out_channels = channels * multiplier;
    int b, orow, ocol, kr, kc, k;
    for (b = 0; b < batches; b++)
        for (orow = 0; orow < w->out_rows; orow++)
            for (ocol = 0; ocol < w->out_cols; ocol++)
                for (k = 0; k < out_channels; k++) {
                    uint32_t acc = bias != NULL ? (uint32_t)bias[k] : 0u; /* wraps like the accumulator */
                    volatile float v;
                    int8_t q;
                    for (kr = 0; kr < w->kernel_rows; kr++)
                        for (kc = 0; kc < w->kernel_cols; kc++) {
                            const int8_t *px = o2g_pixel(x, b, rows, cols, channels, w, orow, ocol, kr, kc);
                            if (px != NULL)
                                acc += (uint32_t)((int32_t)px[k / multiplier] *
                                                  (int32_t)weights[((size_t)kr * (size_t)w->kernel_cols + (size_t)kc) *
                                                                   (size_t)out_channels + (size_t)k]);
                        }
                    v = (float)(int32_t)acc * scale;
                    q = o2g_rne_sat8(v);
                    *y++ = relu && q < 0 ? 0 : q;
                }
}

void o2g_affine(const int8_t *x, size_t x_row, const float *mul, const float *add, int8_t *y, size_t outer,
                size_t channels, size_t inner, float in_scale, float out_scale, int relu)
{
    size_t o, c, i;
    for (o = 0; o < outer; o++)
        for (c = 0; c < channels; c++)
            for (i = 0; i < inner; i++) {
                const size_t at = (o * channels + c) * inner + i;
                volatile float f = (float)x[o * x_row + c * inner + i] * in_scale;
                volatile float m = f * mul[c];
                const int8_t q = o2g_quantize_one(m + add[c], out_scale);
                *(y + at) = relu && q < 0 ? 0 : q;
            }
}

void o2g_lrn(const int8_t *x, int8_t *y, size_t outer, size_t channels, size_t inner, int size,
             float alpha_over_size, float beta, float bias, float in_scale, float out_scale)
{
    const size_t lo = (size_t)(size - 1) / 2;
    size_t o, i, c, j;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const int8_t *xs = x + o * channels * inner + i;
            /* the emulator's running sum over [lo zeros, squares, zeros]: csum[0] = 0,
             * csum[j+1] = csum[j] + padded[j]; window(c) = csum[c+size] - csum[c] */
            float lead = 0.0f, lag = 0.0f;
            size_t lead_at = 0;
            for (c = 0; c < channels; c++) {
                volatile float f, sum, t, p;
                while (lead_at < c + (size_t)size) { /* advance csum[lead_at] to csum[c+size] */
                    volatile float sq = 0.0f; /* rounded before the sum: no fused multiply-add */
                    if (lead_at >= lo && lead_at - lo < channels) {
                        volatile float v = (float)xs[(lead_at - lo) * inner] * in_scale;
                        sq = v * v;
                    }
                    lead += sq;
                    lead_at++;
                }
                if (c > 0) { /* csum[c] = csum[c-1] + padded[c-1] */
                    j = c - 1;
                    if (j >= lo && j - lo < channels) {
                        volatile float v = (float)xs[(j - lo) * inner] * in_scale;
                        volatile float sq = v * v;
                        lag += sq;
                    }
                }
                sum = lead - lag;
                t = alpha_over_size * sum;
                p = powf(bias + t, beta);
                f = (float)xs[c * inner] * in_scale;
                y[o * channels * inner + c * inner + i] = o2g_quantize_one(o2g_div(f, p), out_scale);
            }
        }
}

void o2g_layernorm(const int8_t *x, const float *gamma, const float *beta, int8_t *y, size_t outer,
                   size_t norm_size, float epsilon, float in_scale, float out_scale)
{
    size_t o, k;
    for (o = 0; o < outer; o++) {
        struct o2g_values v;
        volatile float mean, var, denom;
        v.x = x + o * norm_size;
        v.stride = 1;
        v.scale = in_scale;
        v.shift = 0.0f;
        v.kind = O2G_PLAIN;
        mean = o2g_div(o2g_pairwise(&v, 0, norm_size), (float)norm_size);
        v.shift = mean;
        v.kind = O2G_SQUARE;
        var = o2g_div(o2g_pairwise(&v, 0, norm_size), (float)norm_size);
        denom = sqrtf(var + epsilon);
        v.kind = O2G_PLAIN;
        for (k = 0; k < norm_size; k++) {
            volatile float t = o2g_div(o2g_value(&v, k), denom);
            volatile float g = t * gamma[k];
            y[o * norm_size + k] = o2g_quantize_one(g + beta[k], out_scale);
        }
    }
}
