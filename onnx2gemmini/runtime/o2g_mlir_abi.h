/*
 * onnx2gemmini MLIR back end: the C side of model.mlir (docs/mlir.md).
 *
 * model.mlir declares its runtime calls as
 *     func.func private @o2g_rt_<op>(memref<*xT>..., i64 | f32 | memref<*xi64>...)
 *         attributes {llvm.emit_c_interface}
 * and MLIR's C interface lowers each call to `_mlir_ciface_o2g_rt_<op>`, passing every memref as a
 * pointer to its descriptor, every i64 as int64_t and every f32 as float. o2g_mlir_abi.c implements
 * them with the CPU runtime o2g_runtime.h and the gemmini.h API; this file declares what a main
 * program needs to call the model:
 *
 *     O2G_MEMREF(float, 4) in;  O2G_MEMREF(int8_t, 2) out;
 *     o2g_memref_init(&in, input, 4, (const int64_t[]){1, 3, 224, 224});
 *     o2g_memref_init(&out, output, 2, (const int64_t[]){1, 1000});
 *     gemmini_flush(0);                         (model.mlir also flushes at the start of @forward)
 *     _mlir_ciface_forward(&in, &out);          (declare it with the ranks of your model)
 *
 * Every function checks that its memrefs are dense (the Gemmini calls also check ranks and shapes); a
 * mismatch prints "o2g_mlir: <function>: <what>" and exits with status 1.
 */
#ifndef O2G_MLIR_ABI_H
#define O2G_MLIR_ABI_H

#include <stddef.h>
#include <stdint.h>

/* A ranked memref descriptor (MLIR's StridedMemRefType<T, N>): sizes and strides in elements. */
#define O2G_MEMREF(T, N)              \
    struct {                          \
        T *allocated;                 \
        T *aligned;                   \
        int64_t offset;               \
        int64_t sizes[N];             \
        int64_t strides[N];           \
    }

/* An unranked memref (MLIR's UnrankedMemRefType): the rank and a pointer to a ranked descriptor. */
typedef struct o2g_unranked_memref {
    int64_t rank;
    void *descriptor;
} o2g_unranked_memref;

/* Fill any O2G_MEMREF(T, rank) for dense row-major data at `data` (offset 0). */
void o2g_memref_init(void *descriptor, void *data, int rank, const int64_t *sizes);

/* The first element of an unranked memref's data, elements of `elem_size` bytes; it must be dense
 * row-major (else "o2g_mlir: o2g_memref_data: ..." and exit 1). */
void *o2g_memref_data(const o2g_unranked_memref *m, size_t elem_size);

/* The CPU kernels' wrappers, _mlir_ciface_o2g_rt_<function>(the o2g_runtime.h function's arguments in
 * order: tensors and lists as memrefs, integers as int64_t, floats as float, structs as their fields),
 * are generated into o2g_mlir_cpu_abi.inc from onnx2gemmini/cpu/ (scripts/gen_mlir_abi.py). Below: the
 * Gemmini calls the dialect has no op for. */

/* tiled_resadd_auto on [I][J] matrices A, B, C. */
void _mlir_ciface_o2g_rt_resadd(o2g_unranked_memref *a, o2g_unranked_memref *b, o2g_unranked_memref *c,
                                float a_scale, float b_scale, float c_scale, int64_t relu);

/* tiled_global_average_auto: [N][D][D][C] -> [N][C]. */
void _mlir_ciface_o2g_rt_global_average(o2g_unranked_memref *input, o2g_unranked_memref *output);

/* tiled_conv (the given tiles; batches == 0: tiled_conv_auto) for convs tile_conv would get wrong:
 * input NHWC, weights [K*K*IC][OC], bias [OC], output [N*pooled OH*pooled OW][OC]; out_rows/out_cols
 * before pooling. */
/* Depthwise conv (multiplier 1) through gemmini.h's tiled_conv_dw_auto: input [N][H][W][C], weights [C][K][K],
 * bias [C] int32, output [N][pooled rows][pooled cols][C]. */
void _mlir_ciface_o2g_rt_conv_dw(o2g_unranked_memref *input, o2g_unranked_memref *weights,
                                 o2g_unranked_memref *bias, o2g_unranked_memref *output,
                                 int64_t out_rows, int64_t out_cols, int64_t stride, int64_t padding,
                                 int64_t kernel_dim, int64_t act, float scale, int64_t pool_size,
                                 int64_t pool_stride, int64_t pool_padding);
void _mlir_ciface_o2g_rt_conv(o2g_unranked_memref *input, o2g_unranked_memref *weights,
                              o2g_unranked_memref *bias, o2g_unranked_memref *output,
                              int64_t out_rows, int64_t out_cols, int64_t stride,
                              int64_t input_dilation, int64_t kernel_dilation, int64_t padding,
                              int64_t kernel_dim, int64_t act, float scale, int64_t pool_size,
                              int64_t pool_stride, int64_t pool_padding, int64_t batches, int64_t porows,
                              int64_t pocols, int64_t pochs, int64_t krows, int64_t kcols, int64_t kchs);

#endif /* O2G_MLIR_ABI_H */
