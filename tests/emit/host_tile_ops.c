/*
 * Test support: the two gemmini tile ops as C functions, with the semantics buddy-mlir's lowering
 * gives them (spec/buddy-mlir.md §1.3), computed by the host gemmini.h. tests/emit/mlir_jit.py
 * rewrites each "gemmini.tile_*" op of an emitted module into a call of these, lowers the module with
 * upstream MLIR passes and runs it with MLIR's ExecutionEngine, so everything but the two tile ops
 * (memref views, descriptors, the runtime ABI, o2g_mlir_abi.c, o2g_runtime.c) runs for real.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "gemmini.h"
#include "o2g_mlir_abi.h"

struct header {
    void *allocated;
    void *aligned;
    int64_t offset;
    int64_t dims[];
};

/* Like the lowering: the aligned base pointer, sizes from the type, offset ignored (must be 0). */
static void *base(const o2g_unranked_memref *m, int rank, int64_t *sizes)
{
    const struct header *h = (const struct header *)m->descriptor;
    int d;
    if (m->rank != rank || h->offset != 0) {
        printf("host_tile_ops: rank %ld (want %d), offset %ld\n", (long)m->rank, rank, (long)h->offset);
        exit(2);
    }
    for (d = 0; d < rank; d++)
        sizes[d] = h->dims[d];
    return h->aligned;
}

/* tile_matmul's lowering: I = A rows, K = A cols, J = B cols; row strides are shape[1] of each operand;
 * with full_C (fullC) C is acc_t and receives the raw accumulators */
static void tile_matmul(o2g_unranked_memref *a, o2g_unranked_memref *b, o2g_unranked_memref *c,
                        o2g_unranked_memref *d, float acc_scale, int64_t act, int64_t repeating_bias, bool full_C,
                        float bert_scale, float a_scale_factor, float b_scale_factor)
{
    int64_t sa[2], sb[2], sc[2], sd[2];
    const elem_t *pa = (const elem_t *)base(a, 2, sa);
    const elem_t *pb = (const elem_t *)base(b, 2, sb);
    void *pc = base(c, 2, sc);
    const acc_t *pd = (const acc_t *)base(d, 2, sd);
    tiled_matmul_auto((size_t)sa[0], (size_t)sb[1], (size_t)sa[1], pa, pb, pd, pc, (size_t)sa[1],
                      (size_t)sb[1], (size_t)sd[1], (size_t)sc[1], a_scale_factor, b_scale_factor, 1, (int)act,
                      acc_scale, bert_scale, repeating_bias != 0, false, false, full_C, false, 0, WS);
}

void _mlir_ciface_o2g_test_tile_matmul(o2g_unranked_memref *a, o2g_unranked_memref *b,
                                       o2g_unranked_memref *c, o2g_unranked_memref *d, float acc_scale,
                                       int64_t act, int64_t repeating_bias, float bert_scale,
                                       float a_scale_factor, float b_scale_factor)
{
    tile_matmul(a, b, c, d, acc_scale, act, repeating_bias, false, bert_scale, a_scale_factor, b_scale_factor);
}

void _mlir_ciface_o2g_test_tile_matmul_full(o2g_unranked_memref *a, o2g_unranked_memref *b,
                                            o2g_unranked_memref *c, o2g_unranked_memref *d, float acc_scale,
                                            int64_t act, int64_t repeating_bias, float bert_scale,
                                            float a_scale_factor, float b_scale_factor)
{
    tile_matmul(a, b, c, d, acc_scale, act, repeating_bias, true, bert_scale, a_scale_factor, b_scale_factor);
}

void _mlir_ciface_o2g_test_tile_conv(o2g_unranked_memref *input, o2g_unranked_memref *weights,
                                     o2g_unranked_memref *bias, o2g_unranked_memref *output,
                                     int64_t out_rows, int64_t out_cols, int64_t kernel_dim, float scale,
                                     int64_t stride, int64_t padding, int64_t act, int64_t pool_size,
                                     int64_t pool_stride, int64_t pool_padding)
{
    int64_t si[4], sw[2], sb[1], so[2];
    const elem_t *pi = (const elem_t *)base(input, 4, si);
    const elem_t *pw = (const elem_t *)base(weights, 2, sw);
    const acc_t *pbias = (const acc_t *)base(bias, 1, sb);
    elem_t *po = (elem_t *)base(output, 2, so);
    if (pool_size && (si[1] != si[2] || out_rows != out_cols)) {
        printf("host_tile_ops: pooling on the rect-conv path, which buddy-mlir drops\n");
        exit(2);
    }
    tiled_conv_auto((int)si[0], (int)si[1], (int)si[2], (int)si[3], (int)sb[0], (int)out_rows,
                    (int)out_cols, (int)stride, 1, 1, (int)padding, (int)kernel_dim, false, false, false,
                    false, false, pi, pw, pbias, po, (int)act, scale, (int)pool_size,
                    pool_size ? (int)pool_stride : 0, (int)pool_padding, WS);
}
