/*
 * onnx2gemmini MLIR back end: `_mlir_ciface_o2g_rt_*`, the runtime functions model.mlir calls
 * (see o2g_mlir_abi.h and docs/mlir.md). Each unpacks the memref descriptors, checks them, and calls
 * the CPU runtime (o2g_runtime.h) or the gemmini.h API (resadd, global average, conv), so the MLIR
 * module runs the same kernels as the C back end.
 *
 * Build with the gemmini.h of the target (-I <gemmini-rocc-tests>/include for Gemmini, or
 * -I onnx2gemmini/runtime/host for a host build) and link o2g_runtime.c.
 */
#include "o2g_mlir_abi.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "gemmini.h"
#include "o2g_runtime.h"

/* The fields every ranked descriptor starts with; sizes[rank] then strides[rank] follow in dims. */
struct o2g_memref_header {
    void *allocated;
    void *aligned;
    int64_t offset;
    int64_t dims[];
};

/* A checked, dense view of a memref argument. */
struct o2g_view {
    void *data;
    int rank;
    int sizes[O2G_MAX_RANK];
    size_t count;
};

static void o2g_mlir_fail(const char *fn, const char *what)
{
    printf("o2g_mlir: %s: %s\n", fn, what);
    exit(1);
}

void o2g_memref_init(void *descriptor, void *data, int rank, const int64_t *sizes)
{
    struct o2g_memref_header *h = (struct o2g_memref_header *)descriptor;
    int64_t stride = 1;
    int d;
    h->allocated = data;
    h->aligned = data;
    h->offset = 0;
    for (d = rank - 1; d >= 0; d--) {
        h->dims[d] = sizes[d];
        h->dims[rank + d] = stride;
        stride *= sizes[d];
    }
}

/* The data of `m` as a dense row-major array of `rank` dimensions (any rank if rank < 0). */
static struct o2g_view o2g_view_of(const char *fn, const o2g_unranked_memref *m, size_t elem_size, int rank)
{
    const struct o2g_memref_header *h;
    struct o2g_view v;
    int64_t stride = 1;
    int d;
    if (m == NULL || m->descriptor == NULL)
        o2g_mlir_fail(fn, "null memref");
    if (m->rank < 0 || m->rank > O2G_MAX_RANK || (rank >= 0 && m->rank != rank))
        o2g_mlir_fail(fn, "memref of the wrong rank");
    h = (const struct o2g_memref_header *)m->descriptor;
    v.rank = (int)m->rank;
    v.count = 1;
    for (d = v.rank - 1; d >= 0; d--) {
        const int64_t size = h->dims[d];
        if (size < 0 || size > INT32_MAX)
            o2g_mlir_fail(fn, "memref size out of range");
        if (size > 1 && h->dims[v.rank + d] != stride)
            o2g_mlir_fail(fn, "memref is not dense row-major");
        v.sizes[d] = (int)size;
        v.count *= (size_t)size;
        stride *= size;
    }
    v.data = (char *)h->aligned + (size_t)h->offset * elem_size;
    return v;
}

static void o2g_same_count(const char *fn, const struct o2g_view *a, const struct o2g_view *b)
{
    if (a->count != b->count)
        o2g_mlir_fail(fn, "input and output sizes differ");
}

void _mlir_ciface_o2g_rt_quantize(o2g_unranked_memref *x, o2g_unranked_memref *y, float scale,
                                  int64_t to_nhwc)
{
    const char *fn = "o2g_rt_quantize";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(float), to_nhwc ? 4 : -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), to_nhwc ? 4 : -1);
    o2g_same_count(fn, &vx, &vy);
    if (!to_nhwc) {
        o2g_quantize((const float *)vx.data, (int8_t *)vy.data, vx.count, scale);
        return;
    }
    if (vy.sizes[0] != vx.sizes[0] || vy.sizes[1] != vx.sizes[2] || vy.sizes[2] != vx.sizes[3] ||
        vy.sizes[3] != vx.sizes[1])
        o2g_mlir_fail(fn, "y is not x's NHWC shape");
    o2g_quantize_nchw_to_nhwc((const float *)vx.data, (int8_t *)vy.data, vx.sizes[0], vx.sizes[1],
                              vx.sizes[2], vx.sizes[3], scale);
}

void _mlir_ciface_o2g_rt_transpose(o2g_unranked_memref *x, o2g_unranked_memref *y,
                                   o2g_unranked_memref *perm)
{
    const char *fn = "o2g_rt_transpose";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), vx.rank);
    struct o2g_view vp = o2g_view_of(fn, perm, sizeof(int64_t), 1);
    int p[O2G_MAX_RANK], seen = 0, d;
    if ((int)vp.count != vx.rank)
        o2g_mlir_fail(fn, "perm length is not the rank");
    for (d = 0; d < vx.rank; d++) {
        const int64_t axis = ((const int64_t *)vp.data)[d];
        if (axis < 0 || axis >= vx.rank || (seen >> axis) & 1 || vy.sizes[d] != vx.sizes[axis])
            o2g_mlir_fail(fn, "perm is not a permutation matching y's shape");
        seen |= 1 << axis;
        p[d] = (int)axis;
    }
    o2g_transpose((const int8_t *)vx.data, (int8_t *)vy.data, vx.rank, vx.sizes, p);
}

static struct o2g_window o2g_window_of(int64_t kr, int64_t kc, int64_t sr, int64_t sc, int64_t pt,
                                       int64_t pl, int64_t pb, int64_t pr, int64_t dr, int64_t dc,
                                       int64_t out_rows, int64_t out_cols)
{
    struct o2g_window w;
    w.kernel_rows = (int)kr;
    w.kernel_cols = (int)kc;
    w.stride_rows = (int)sr;
    w.stride_cols = (int)sc;
    w.pad_top = (int)pt;
    w.pad_left = (int)pl;
    w.pad_bottom = (int)pb;
    w.pad_right = (int)pr;
    w.dilation_rows = (int)dr;
    w.dilation_cols = (int)dc;
    w.out_rows = (int)out_rows;
    w.out_cols = (int)out_cols;
    return w;
}

void _mlir_ciface_o2g_rt_im2col(o2g_unranked_memref *x, o2g_unranked_memref *y,
                                int64_t kernel_rows, int64_t kernel_cols, int64_t stride_rows,
                                int64_t stride_cols, int64_t pad_top, int64_t pad_left,
                                int64_t pad_bottom, int64_t pad_right, int64_t dilation_rows,
                                int64_t dilation_cols, int64_t out_rows, int64_t out_cols)
{
    const char *fn = "o2g_rt_im2col";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), 4);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), 2);
    const struct o2g_window w = o2g_window_of(kernel_rows, kernel_cols, stride_rows, stride_cols, pad_top,
                                              pad_left, pad_bottom, pad_right, dilation_rows,
                                              dilation_cols, out_rows, out_cols);
    if ((int64_t)vy.sizes[0] != (int64_t)vx.sizes[0] * out_rows * out_cols ||
        (int64_t)vy.sizes[1] != kernel_rows * kernel_cols * vx.sizes[3])
        o2g_mlir_fail(fn, "y is not [N*OH*OW][KH*KW*C]");
    o2g_im2col((const int8_t *)vx.data, (int8_t *)vy.data, vx.sizes[0], vx.sizes[1], vx.sizes[2],
               vx.sizes[3], &w);
}

/* x and y NHWC with the same N and C; the window's output size is y's. */
static struct o2g_window o2g_pool_args(const char *fn, struct o2g_view *vx, struct o2g_view *vy,
                                       o2g_unranked_memref *x, o2g_unranked_memref *y,
                                       const int64_t *k)
{
    *vx = o2g_view_of(fn, x, sizeof(int8_t), 4);
    *vy = o2g_view_of(fn, y, sizeof(int8_t), 4);
    if (vy->sizes[0] != vx->sizes[0] || vy->sizes[3] != vx->sizes[3])
        o2g_mlir_fail(fn, "x and y differ in batch or channels");
    return o2g_window_of(k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], vy->sizes[1],
                         vy->sizes[2]);
}

void _mlir_ciface_o2g_rt_maxpool(o2g_unranked_memref *x, o2g_unranked_memref *y,
                                 int64_t kernel_rows, int64_t kernel_cols, int64_t stride_rows,
                                 int64_t stride_cols, int64_t pad_top, int64_t pad_left,
                                 int64_t pad_bottom, int64_t pad_right, int64_t dilation_rows,
                                 int64_t dilation_cols)
{
    const int64_t k[10] = {kernel_rows, kernel_cols, stride_rows, stride_cols, pad_top, pad_left,
                           pad_bottom, pad_right, dilation_rows, dilation_cols};
    struct o2g_view vx, vy;
    const struct o2g_window w = o2g_pool_args("o2g_rt_maxpool", &vx, &vy, x, y, k);
    o2g_maxpool((const int8_t *)vx.data, (int8_t *)vy.data, vx.sizes[0], vx.sizes[1], vx.sizes[2],
                vx.sizes[3], &w);
}

void _mlir_ciface_o2g_rt_avgpool(o2g_unranked_memref *x, o2g_unranked_memref *y,
                                 int64_t kernel_rows, int64_t kernel_cols, int64_t stride_rows,
                                 int64_t stride_cols, int64_t pad_top, int64_t pad_left,
                                 int64_t pad_bottom, int64_t pad_right, int64_t dilation_rows,
                                 int64_t dilation_cols, int64_t count_include_pad)
{
    const int64_t k[10] = {kernel_rows, kernel_cols, stride_rows, stride_cols, pad_top, pad_left,
                           pad_bottom, pad_right, dilation_rows, dilation_cols};
    struct o2g_view vx, vy;
    const struct o2g_window w = o2g_pool_args("o2g_rt_avgpool", &vx, &vy, x, y, k);
    o2g_avgpool((const int8_t *)vx.data, (int8_t *)vy.data, vx.sizes[0], vx.sizes[1], vx.sizes[2],
                vx.sizes[3], &w, (int)count_include_pad);
}

void _mlir_ciface_o2g_rt_clip(o2g_unranked_memref *x, o2g_unranked_memref *y, int64_t lo, int64_t hi)
{
    const char *fn = "o2g_rt_clip";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), -1);
    o2g_same_count(fn, &vx, &vy);
    o2g_clip((const int8_t *)vx.data, (int8_t *)vy.data, vx.count, (int)lo, (int)hi);
}

/* x viewed as [outer][sizes[axis]][inner]. */
static void o2g_split(const struct o2g_view *v, int axis, size_t *outer, size_t *inner)
{
    int d;
    *outer = 1;
    *inner = 1;
    for (d = 0; d < axis; d++)
        *outer *= (size_t)v->sizes[d];
    for (d = axis + 1; d < v->rank; d++)
        *inner *= (size_t)v->sizes[d];
}

void _mlir_ciface_o2g_rt_softmax(o2g_unranked_memref *x, o2g_unranked_memref *y, int64_t axis,
                                 float in_scale, float out_scale)
{
    const char *fn = "o2g_rt_softmax";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), vx.rank);
    size_t outer, inner;
    o2g_same_count(fn, &vx, &vy);
    if (axis < 0 || axis >= vx.rank)
        o2g_mlir_fail(fn, "axis out of range");
    o2g_split(&vx, (int)axis, &outer, &inner);
    o2g_softmax((const int8_t *)vx.data, (int8_t *)vy.data, outer, (size_t)vx.sizes[axis], inner, in_scale,
                out_scale);
}

void _mlir_ciface_o2g_rt_concat_into(o2g_unranked_memref *x, o2g_unranked_memref *y, int64_t axis,
                                     int64_t offset, float in_scale, float out_scale)
{
    const char *fn = "o2g_rt_concat_into";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), vx.rank);
    size_t outer, inner;
    int d;
    if (axis < 0 || axis >= vx.rank || offset < 0 || offset + vx.sizes[axis] > vy.sizes[axis])
        o2g_mlir_fail(fn, "axis or offset out of range");
    for (d = 0; d < vx.rank; d++)
        if (d != axis && vx.sizes[d] != vy.sizes[d])
            o2g_mlir_fail(fn, "x and y differ outside the axis");
    o2g_split(&vx, (int)axis, &outer, &inner);
    o2g_concat_part((const int8_t *)vx.data, (int8_t *)vy.data, outer, (size_t)vx.sizes[axis], inner,
                    (size_t)vy.sizes[axis], (size_t)offset, in_scale, out_scale);
}

/* Generic-ABI calls (docs/mlir.md): floats arrive as double, holding float32 values exactly. */

void _mlir_ciface_o2g_rt_gather(o2g_unranked_memref *x, o2g_unranked_memref *y, int64_t axis,
                                o2g_unranked_memref *indices, o2g_unranked_memref *indices_shape)
{
    const char *fn = "o2g_rt_gather";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), -1);
    struct o2g_view vi = o2g_view_of(fn, indices, sizeof(int64_t), 1);
    struct o2g_view vs = o2g_view_of(fn, indices_shape, sizeof(int64_t), 1);
    const int64_t *idx = (const int64_t *)vi.data;
    size_t outer, inner, k;
    if (axis < 0 || axis >= vx.rank || vy.rank != vx.rank - 1 + (int)vs.count)
        o2g_mlir_fail(fn, "axis or ranks do not match");
    o2g_split(&vx, (int)axis, &outer, &inner);
    for (k = 0; k < vi.count; k++)
        if (idx[k] < 0 || idx[k] >= vx.sizes[axis])
            o2g_mlir_fail(fn, "index out of range");
    if (vy.count != outer * vi.count * inner)
        o2g_mlir_fail(fn, "y does not hold the gathered values");
    o2g_gather((const int8_t *)vx.data, (int8_t *)vy.data, outer, (size_t)vx.sizes[axis], inner, idx, vi.count);
}

void _mlir_ciface_o2g_rt_remap(o2g_unranked_memref *x, o2g_unranked_memref *y, o2g_unranked_memref *index,
                               int64_t value)
{
    const char *fn = "o2g_rt_remap";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), vx.rank);
    struct o2g_view vi = o2g_view_of(fn, index, sizeof(int64_t), 1);
    const int64_t *idx = (const int64_t *)vi.data;
    size_t total = 0, k;
    int d;
    for (d = 0; d < vy.rank; d++) {
        for (k = 0; k < (size_t)vy.sizes[d] && total + k < vi.count; k++)
            if (idx[total + k] < -1 || idx[total + k] >= vx.sizes[d])
                o2g_mlir_fail(fn, "index out of range");
        total += (size_t)vy.sizes[d];
    }
    if (total != vi.count || value < -128 || value > 127)
        o2g_mlir_fail(fn, "index does not hold one map per axis of y, or value is not int8");
    o2g_remap((const int8_t *)vx.data, (int8_t *)vy.data, vx.rank, vx.sizes, vy.sizes, idx, (int8_t)value);
}

void _mlir_ciface_o2g_rt_resize_linear(o2g_unranked_memref *x, o2g_unranked_memref *y, o2g_unranked_memref *axes,
                                       o2g_unranked_memref *lo, o2g_unranked_memref *hi,
                                       o2g_unranked_memref *w_lo, o2g_unranked_memref *w_hi, float in_scale,
                                       float out_scale)
{
    const char *fn = "o2g_rt_resize_linear";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), vx.rank);
    struct o2g_view va = o2g_view_of(fn, axes, sizeof(int64_t), 1);
    struct o2g_view vlo = o2g_view_of(fn, lo, sizeof(int64_t), 1);
    struct o2g_view vhi = o2g_view_of(fn, hi, sizeof(int64_t), 1);
    struct o2g_view vwl = o2g_view_of(fn, w_lo, sizeof(float), 1);
    struct o2g_view vwh = o2g_view_of(fn, w_hi, sizeof(float), 1);
    const int64_t *a = (const int64_t *)va.data, *l = (const int64_t *)vlo.data, *h = (const int64_t *)vhi.data;
    int ax[3], resized = 0, d;
    size_t taps = 0, k, t;
    if (va.count > 3)
        o2g_mlir_fail(fn, "more than 3 interpolated axes");
    for (k = 0; k < va.count; k++) {
        if (a[k] < 0 || a[k] >= vx.rank || (resized >> a[k]) & 1)
            o2g_mlir_fail(fn, "axes are not distinct axes of x");
        for (t = taps; t < taps + (size_t)vy.sizes[a[k]] && t < vlo.count && t < vhi.count; t++)
            if (l[t] < 0 || l[t] >= vx.sizes[a[k]] || h[t] < 0 || h[t] >= vx.sizes[a[k]])
                o2g_mlir_fail(fn, "source position out of range");
        taps += (size_t)vy.sizes[a[k]];
        resized |= 1 << a[k];
        ax[k] = (int)a[k];
    }
    for (d = 0; d < vx.rank; d++)
        if (!((resized >> d) & 1) && vx.sizes[d] != vy.sizes[d])
            o2g_mlir_fail(fn, "x and y differ outside the interpolated axes");
    if (vlo.count != taps || vhi.count != taps || vwl.count != taps || vwh.count != taps)
        o2g_mlir_fail(fn, "lo, hi, w_lo and w_hi do not hold one entry per output position of each axis");
    o2g_resize_linear((const int8_t *)vx.data, (int8_t *)vy.data, vx.rank, vx.sizes, vy.sizes, (int)va.count, ax,
                      l, h, (const float *)vwl.data, (const float *)vwh.data, in_scale, out_scale);
}

void _mlir_ciface_o2g_rt_lut(o2g_unranked_memref *x, o2g_unranked_memref *y, o2g_unranked_memref *table)
{
    const char *fn = "o2g_rt_lut";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), -1);
    struct o2g_view vt = o2g_view_of(fn, table, sizeof(int8_t), 1);
    o2g_same_count(fn, &vx, &vy);
    if (vt.count != 256)
        o2g_mlir_fail(fn, "the table needs 256 entries");
    o2g_lut((const int8_t *)vx.data, (int8_t *)vy.data, vx.count, (const int8_t *)vt.data);
}

/* One operand of a broadcasting binary op: strides per output dimension, 0 where it broadcasts. */
static struct o2g_operand o2g_broadcast(const char *fn, const struct o2g_view *v, int is_float, float scale,
                                        const struct o2g_view *out, int *strides)
{
    struct o2g_operand op;
    int d, stride = 1;
    if (v->rank > out->rank)
        o2g_mlir_fail(fn, "operand of higher rank than the output");
    for (d = out->rank - 1; d >= 0; d--) {
        const int k = d - (out->rank - v->rank);
        const int size = k >= 0 ? v->sizes[k] : 1;
        if (size != out->sizes[d] && size != 1)
            o2g_mlir_fail(fn, "operand does not broadcast to the output");
        strides[d] = size == 1 ? 0 : stride;
        stride *= size;
    }
    op.data = v->data;
    op.is_float = is_float;
    op.scale = scale;
    op.strides = strides;
    return op;
}

static void o2g_binary_call(const char *fn, int op, const char *kinds, o2g_unranked_memref *a,
                            o2g_unranked_memref *b, o2g_unranked_memref *y, float a_scale, float b_scale,
                            float out_scale, int64_t relu)
{
    const int fa = kinds[0] == 'f', fb = kinds[1] == 'f';
    struct o2g_view va = o2g_view_of(fn, a, fa ? sizeof(float) : sizeof(int8_t), -1);
    struct o2g_view vb = o2g_view_of(fn, b, fb ? sizeof(float) : sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), -1);
    int sa[O2G_MAX_RANK], sb[O2G_MAX_RANK];
    const struct o2g_operand oa = o2g_broadcast(fn, &va, fa, a_scale, &vy, sa);
    const struct o2g_operand ob = o2g_broadcast(fn, &vb, fb, b_scale, &vy, sb);
    o2g_binary(op, &oa, &ob, (int8_t *)vy.data, vy.rank, vy.sizes, out_scale, relu != 0);
}

#define O2G_BINARY_DEF(name, op, kinds)                                                                   \
    void _mlir_ciface_o2g_rt_binary_##name##_##kinds(o2g_unranked_memref *a, o2g_unranked_memref *b,      \
                                                     o2g_unranked_memref *y, float a_scale, float b_scale, \
                                                     float out_scale, int64_t relu)                      \
    {                                                                                                     \
        o2g_binary_call("o2g_rt_binary_" #name "_" #kinds, op, #kinds, a, b, y, a_scale, b_scale,        \
                        out_scale, relu);                                                                 \
    }
#define O2G_BINARY_DEFS(name, op) O2G_BINARY_DEF(name, op, qq) O2G_BINARY_DEF(name, op, qf) O2G_BINARY_DEF(name, op, fq)
O2G_BINARY_DEFS(add, O2G_ADD)
O2G_BINARY_DEFS(sub, O2G_SUB)
O2G_BINARY_DEFS(mul, O2G_MUL)
O2G_BINARY_DEFS(div, O2G_DIV)
O2G_BINARY_DEFS(max, O2G_MAX)
O2G_BINARY_DEFS(min, O2G_MIN)
O2G_BINARY_DEFS(prelu, O2G_PRELU)

void _mlir_ciface_o2g_rt_dwconv(o2g_unranked_memref *x, o2g_unranked_memref *weights, o2g_unranked_memref *bias,
                                o2g_unranked_memref *y, int64_t kernel_rows, int64_t kernel_cols,
                                int64_t stride_rows, int64_t stride_cols, int64_t pad_top, int64_t pad_left,
                                int64_t pad_bottom, int64_t pad_right, int64_t dilation_rows,
                                int64_t dilation_cols, int64_t multiplier, float scale, int64_t relu)
{
    const char *fn = "o2g_rt_dwconv";
    const int64_t k[10] = {kernel_rows, kernel_cols, stride_rows, stride_cols, pad_top, pad_left,
                           pad_bottom, pad_right, dilation_rows, dilation_cols};
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), 4);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), 4);
    struct o2g_view vw = o2g_view_of(fn, weights, sizeof(int8_t), 3);
    struct o2g_view vb = o2g_view_of(fn, bias, sizeof(int32_t), 1);
    const struct o2g_window w = o2g_window_of(k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9],
                                              vy.sizes[1], vy.sizes[2]);
    const int64_t oc = (int64_t)vx.sizes[3] * multiplier;
    if (vy.sizes[0] != vx.sizes[0] || vy.sizes[3] != oc || vw.sizes[0] != kernel_rows ||
        vw.sizes[1] != kernel_cols || vw.sizes[2] != oc || vb.sizes[0] != oc)
        o2g_mlir_fail(fn, "weights, bias or y do not match x and the multiplier");
    o2g_dwconv((const int8_t *)vx.data, (const int8_t *)vw.data, (const int32_t *)vb.data, (int8_t *)vy.data,
               vx.sizes[0], vx.sizes[1], vx.sizes[2], vx.sizes[3], &w, (int)multiplier, scale, relu != 0);
}

void _mlir_ciface_o2g_rt_affine(o2g_unranked_memref *x, o2g_unranked_memref *mul, o2g_unranked_memref *add,
                                o2g_unranked_memref *y, int64_t axis, double in_scale, double out_scale,
                                int64_t relu)
{
    const char *fn = "o2g_rt_affine";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), vx.rank);
    struct o2g_view vm = o2g_view_of(fn, mul, sizeof(float), 1);
    struct o2g_view va = o2g_view_of(fn, add, sizeof(float), 1);
    size_t outer, inner;
    o2g_same_count(fn, &vx, &vy);
    if (axis < 0 || axis >= vx.rank || (int)vm.count != vx.sizes[axis] || va.count != vm.count)
        o2g_mlir_fail(fn, "mul/add do not match the channel axis");
    o2g_split(&vx, (int)axis, &outer, &inner);
    o2g_affine((const int8_t *)vx.data, (size_t)vx.sizes[axis] * inner, (const float *)vm.data,
               (const float *)va.data, (int8_t *)vy.data, outer, (size_t)vx.sizes[axis], inner, (float)in_scale,
               (float)out_scale, (int)relu);
}

void _mlir_ciface_o2g_rt_lrn(o2g_unranked_memref *x, o2g_unranked_memref *y, double alpha, int64_t axis,
                             double beta, double bias, double in_scale, double out_scale, int64_t size)
{
    const char *fn = "o2g_rt_lrn";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), vx.rank);
    size_t outer, inner;
    o2g_same_count(fn, &vx, &vy);
    if (axis < 0 || axis >= vx.rank || size < 1)
        o2g_mlir_fail(fn, "axis or size out of range");
    o2g_split(&vx, (int)axis, &outer, &inner);
    /* alpha / size in double, then float32: as the emulator computes it */
    o2g_lrn((const int8_t *)vx.data, (int8_t *)vy.data, outer, (size_t)vx.sizes[axis], inner, (int)size,
            (float)(alpha / (double)size), (float)beta, (float)bias, (float)in_scale, (float)out_scale);
}

void _mlir_ciface_o2g_rt_layernorm(o2g_unranked_memref *x, o2g_unranked_memref *gamma, o2g_unranked_memref *beta,
                                   o2g_unranked_memref *y, int64_t axis, double epsilon, double in_scale,
                                   double out_scale)
{
    const char *fn = "o2g_rt_layernorm";
    struct o2g_view vx = o2g_view_of(fn, x, sizeof(int8_t), -1);
    struct o2g_view vy = o2g_view_of(fn, y, sizeof(int8_t), vx.rank);
    struct o2g_view vg = o2g_view_of(fn, gamma, sizeof(float), -1);
    struct o2g_view vb = o2g_view_of(fn, beta, sizeof(float), -1);
    size_t outer = 1, norm;
    int d;
    o2g_same_count(fn, &vx, &vy);
    if (axis < 0 || axis >= vx.rank)
        o2g_mlir_fail(fn, "axis out of range");
    for (d = 0; d < axis; d++) /* rows of x, each normalized over the axes [axis, rank) */
        outer *= (size_t)vx.sizes[d];
    norm = outer ? vx.count / outer : 0;
    if (vg.count != norm || vb.count != norm)
        o2g_mlir_fail(fn, "gamma/beta do not cover the normalized axes");
    o2g_layernorm((const int8_t *)vx.data, (const float *)vg.data, (const float *)vb.data, (int8_t *)vy.data,
                  outer, norm, (float)epsilon, (float)in_scale, (float)out_scale);
}

void _mlir_ciface_o2g_rt_resadd(o2g_unranked_memref *a, o2g_unranked_memref *b, o2g_unranked_memref *c,
                                float a_scale, float b_scale, float c_scale, int64_t relu)
{
    const char *fn = "o2g_rt_resadd";
    struct o2g_view va = o2g_view_of(fn, a, sizeof(elem_t), 2);
    struct o2g_view vb = o2g_view_of(fn, b, sizeof(elem_t), 2);
    struct o2g_view vc = o2g_view_of(fn, c, sizeof(elem_t), 2);
    if (vb.sizes[0] != va.sizes[0] || vb.sizes[1] != va.sizes[1] || vc.sizes[0] != va.sizes[0] ||
        vc.sizes[1] != va.sizes[1])
        o2g_mlir_fail(fn, "A, B and C differ in shape");
    tiled_resadd_auto((size_t)va.sizes[0], (size_t)va.sizes[1], a_scale, b_scale, c_scale,
                      (const elem_t *)va.data, (const elem_t *)vb.data, (elem_t *)vc.data, relu != 0, WS);
    gemmini_fence();
}

void _mlir_ciface_o2g_rt_global_average(o2g_unranked_memref *input, o2g_unranked_memref *output)
{
    const char *fn = "o2g_rt_global_average";
    struct o2g_view vi = o2g_view_of(fn, input, sizeof(elem_t), 4);
    struct o2g_view vo = o2g_view_of(fn, output, sizeof(elem_t), 2);
    if (vi.sizes[1] != vi.sizes[2] || vo.sizes[0] != vi.sizes[0] || vo.sizes[1] != vi.sizes[3])
        o2g_mlir_fail(fn, "not [N][D][D][C] -> [N][C]");
    tiled_global_average_auto((const elem_t *)vi.data, (elem_t *)vo.data, vi.sizes[0], vi.sizes[3],
                              vi.sizes[1], WS);
    gemmini_fence();
}

/* The output size of Gemmini's fused max-pool (pool_stride 0: no pooling). */
static int64_t o2g_pooled_dim(int64_t out, int64_t pool_size, int64_t pool_stride, int64_t pool_padding)
{
    return pool_stride ? (out + 2 * pool_padding - pool_size) / pool_stride + 1 : out;
}

void _mlir_ciface_o2g_rt_conv_dw(o2g_unranked_memref *input, o2g_unranked_memref *weights,
                                 o2g_unranked_memref *bias, o2g_unranked_memref *output,
                                 int64_t out_rows, int64_t out_cols, int64_t stride, int64_t padding,
                                 int64_t kernel_dim, int64_t act, float scale, int64_t pool_size,
                                 int64_t pool_stride, int64_t pool_padding)
{
    const char *fn = "o2g_rt_conv_dw";
    struct o2g_view vi = o2g_view_of(fn, input, sizeof(elem_t), 4);
    struct o2g_view vw = o2g_view_of(fn, weights, sizeof(elem_t), 3);
    struct o2g_view vb = o2g_view_of(fn, bias, sizeof(acc_t), 1);
    struct o2g_view vo = o2g_view_of(fn, output, sizeof(elem_t), 4);
    const int64_t prow = o2g_pooled_dim(out_rows, pool_size, pool_stride, pool_padding);
    const int64_t pcol = o2g_pooled_dim(out_cols, pool_size, pool_stride, pool_padding);
    const int c = vi.sizes[3];
    if (vw.sizes[0] != c || vw.sizes[1] != kernel_dim || vw.sizes[2] != kernel_dim || vb.sizes[0] != c ||
        vo.sizes[0] != vi.sizes[0] || vo.sizes[1] != prow || vo.sizes[2] != pcol || vo.sizes[3] != c)
        o2g_mlir_fail(fn, "weights, bias or output do not match the geometry");
    tiled_conv_dw_auto(vi.sizes[0], vi.sizes[1], vi.sizes[2], c, (int)out_rows, (int)out_cols, (int)stride,
                       (int)padding, (int)kernel_dim, (elem_t *)vi.data, (elem_t *)vw.data, (acc_t *)vb.data,
                       (elem_t *)vo.data, (int)act, scale, (int)pool_size, (int)pool_stride, (int)pool_padding, WS);
    gemmini_fence();
}

void _mlir_ciface_o2g_rt_conv(o2g_unranked_memref *input, o2g_unranked_memref *weights,
                              o2g_unranked_memref *bias, o2g_unranked_memref *output,
                              int64_t out_rows, int64_t out_cols, int64_t stride,
                              int64_t input_dilation, int64_t kernel_dilation, int64_t padding,
                              int64_t kernel_dim, int64_t act, float scale, int64_t pool_size,
                              int64_t pool_stride, int64_t pool_padding)
{
    const char *fn = "o2g_rt_conv";
    struct o2g_view vi = o2g_view_of(fn, input, sizeof(elem_t), 4);
    struct o2g_view vw = o2g_view_of(fn, weights, sizeof(elem_t), 2);
    struct o2g_view vb = o2g_view_of(fn, bias, sizeof(acc_t), 1);
    struct o2g_view vo = o2g_view_of(fn, output, sizeof(elem_t), 2);
    const int64_t prow = o2g_pooled_dim(out_rows, pool_size, pool_stride, pool_padding);
    const int64_t pcol = o2g_pooled_dim(out_cols, pool_size, pool_stride, pool_padding);
    const int oc = vb.sizes[0];
    if (vw.sizes[0] != kernel_dim * kernel_dim * vi.sizes[3] || vw.sizes[1] != oc ||
        vo.sizes[0] != vi.sizes[0] * prow * pcol || vo.sizes[1] != oc)
        o2g_mlir_fail(fn, "weights, bias or output do not match the geometry");
    tiled_conv_auto(vi.sizes[0], vi.sizes[1], vi.sizes[2], vi.sizes[3], oc, (int)out_rows, (int)out_cols,
                    (int)stride, (int)input_dilation, (int)kernel_dilation, (int)padding, (int)kernel_dim,
                    false, false, false, false, false, (const elem_t *)vi.data, (const elem_t *)vw.data,
                    (const acc_t *)vb.data, (elem_t *)vo.data, (int)act, scale, (int)pool_size,
                    (int)pool_stride, (int)pool_padding, WS);
    gemmini_fence();
}
