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

/* The data of `m`, a dense row-major memref of any rank with elements of `elem_size` bytes (the CPU
 * kernels' ABI, o2g_mlir_cpu_abi.inc). */
static void *o2g_rt_data(const char *fn, const o2g_unranked_memref *m, size_t elem_size)
{
    const struct o2g_memref_header *h;
    int64_t stride = 1;
    int d;
    if (m == NULL || m->descriptor == NULL)
        o2g_mlir_fail(fn, "null memref");
    if (m->rank < 0 || m->rank > O2G_MAX_RANK)
        o2g_mlir_fail(fn, "memref of the wrong rank");
    h = (const struct o2g_memref_header *)m->descriptor;
    for (d = (int)m->rank - 1; d >= 0; d--) {
        if (h->dims[d] > 1 && h->dims[m->rank + d] != stride)
            o2g_mlir_fail(fn, "memref is not dense row-major");
        stride *= h->dims[d];
    }
    return (char *)h->aligned + (size_t)h->offset * elem_size;
}

void *o2g_memref_data(const o2g_unranked_memref *m, size_t elem_size)
{
    return o2g_rt_data("o2g_memref_data", m, elem_size);
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
                              int64_t pool_stride, int64_t pool_padding, int64_t batches, int64_t porows,
                              int64_t pocols, int64_t pochs, int64_t krows, int64_t kcols, int64_t kchs)
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
    if (batches == 0) /* no tiles chosen: gemmini.h's heuristic */
        tiled_conv_auto(vi.sizes[0], vi.sizes[1], vi.sizes[2], vi.sizes[3], oc, (int)out_rows, (int)out_cols,
                        (int)stride, (int)input_dilation, (int)kernel_dilation, (int)padding, (int)kernel_dim,
                        false, false, false, false, false, (const elem_t *)vi.data, (const elem_t *)vw.data,
                        (const acc_t *)vb.data, (elem_t *)vo.data, (int)act, scale, (int)pool_size,
                        (int)pool_stride, (int)pool_padding, WS);
    else
        tiled_conv(vi.sizes[0], vi.sizes[1], vi.sizes[2], vi.sizes[3], oc, (int)out_rows, (int)out_cols,
                   (int)stride, (int)input_dilation, (int)kernel_dilation, (int)padding, (int)kernel_dim,
                   vi.sizes[3], oc, oc, false, false, false, false, false, (int)batches, (int)porows,
                   (int)pocols, (int)pochs, (int)krows, (int)kcols, (int)kchs, (const elem_t *)vi.data,
                   (const elem_t *)vw.data, (const acc_t *)vb.data, (elem_t *)vo.data, (int)act, scale,
                   (int)pool_size, (int)pool_stride, (int)pool_padding, WS);
    gemmini_fence();
}

#include "o2g_mlir_cpu_abi.inc"
