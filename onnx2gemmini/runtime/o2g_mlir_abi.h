/*
 * onnx2gemmini MLIR back end: the C side of model.mlir (docs/mlir.md).
 *
 * model.mlir declares its runtime calls as
 *     func.func private @o2g_rt_<op>(memref<*xT>..., i64 | f32 | memref<*xi64>...)
 *         attributes {llvm.emit_c_interface}
 * and MLIR's C interface lowers each call to `_mlir_ciface_o2g_rt_<op>`, passing every memref as a
 * pointer to its descriptor, every i64 as int64_t and every f32 as float. This file declares those
 * functions (o2g_mlir_abi.c implements them with the CPU runtime o2g_runtime.h and the gemmini.h API)
 * and what a main program needs to call the model:
 *
 *     O2G_MEMREF(float, 4) in;  O2G_MEMREF(int8_t, 2) out;
 *     o2g_memref_init(&in, input, 4, (const int64_t[]){1, 3, 224, 224});
 *     o2g_memref_init(&out, output, 2, (const int64_t[]){1, 1000});
 *     gemmini_flush(0);                         (model.mlir also flushes at the start of @forward)
 *     _mlir_ciface_forward(&in, &out);          (declare it with the ranks of your model)
 *
 * Every function checks ranks and shapes against its parameters and that the data are dense; a
 * mismatch prints "o2g_mlir: <function>: <what>" and exits with status 1.
 */
#ifndef O2G_MLIR_ABI_H
#define O2G_MLIR_ABI_H

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

/* Quantize: float x (ONNX layout) -> int8 y; to_nhwc: x is NCHW [N][C][H][W], y NHWC [N][H][W][C]. */
void _mlir_ciface_o2g_rt_quantize(o2g_unranked_memref *x, o2g_unranked_memref *y, float scale,
                                  int64_t to_nhwc);

/* int8 y = numpy.transpose(x, perm); perm: i64 list of x's rank. */
void _mlir_ciface_o2g_rt_transpose(o2g_unranked_memref *x, o2g_unranked_memref *y,
                                   o2g_unranked_memref *perm);

/* Windows over NHWC x: kernel (rows, cols), strides, pads (top, left, bottom, right), dilations. */
void _mlir_ciface_o2g_rt_im2col(o2g_unranked_memref *x, o2g_unranked_memref *y,
                                int64_t kernel_rows, int64_t kernel_cols, int64_t stride_rows,
                                int64_t stride_cols, int64_t pad_top, int64_t pad_left,
                                int64_t pad_bottom, int64_t pad_right, int64_t dilation_rows,
                                int64_t dilation_cols, int64_t out_rows, int64_t out_cols);
void _mlir_ciface_o2g_rt_maxpool(o2g_unranked_memref *x, o2g_unranked_memref *y,
                                 int64_t kernel_rows, int64_t kernel_cols, int64_t stride_rows,
                                 int64_t stride_cols, int64_t pad_top, int64_t pad_left,
                                 int64_t pad_bottom, int64_t pad_right, int64_t dilation_rows,
                                 int64_t dilation_cols);
void _mlir_ciface_o2g_rt_avgpool(o2g_unranked_memref *x, o2g_unranked_memref *y,
                                 int64_t kernel_rows, int64_t kernel_cols, int64_t stride_rows,
                                 int64_t stride_cols, int64_t pad_top, int64_t pad_left,
                                 int64_t pad_bottom, int64_t pad_right, int64_t dilation_rows,
                                 int64_t dilation_cols, int64_t count_include_pad);

void _mlir_ciface_o2g_rt_clip(o2g_unranked_memref *x, o2g_unranked_memref *y, int64_t lo, int64_t hi);

void _mlir_ciface_o2g_rt_softmax(o2g_unranked_memref *x, o2g_unranked_memref *y, int64_t axis,
                                 float in_scale, float out_scale);

/* Copy x into y[..., offset : offset + x.shape[axis], ...], requantized from in_scale to out_scale. */
void _mlir_ciface_o2g_rt_concat_into(o2g_unranked_memref *x, o2g_unranked_memref *y, int64_t axis,
                                     int64_t offset, float in_scale, float out_scale);

/* Generic-ABI functions (docs/mlir.md): tensors in plan shapes, then the CpuOp's parameters in sorted
 * key order, floats as double. */
void _mlir_ciface_o2g_rt_gather(o2g_unranked_memref *x, o2g_unranked_memref *y, int64_t axis,
                                o2g_unranked_memref *indices, o2g_unranked_memref *indices_shape);
/* y[i..] = x[index_d[i_d]..] or value where an index is -1; index: the per-axis maps of y's axes. */
void _mlir_ciface_o2g_rt_remap(o2g_unranked_memref *x, o2g_unranked_memref *y, o2g_unranked_memref *index,
                               int64_t value);
void _mlir_ciface_o2g_rt_affine(o2g_unranked_memref *x, o2g_unranked_memref *mul, o2g_unranked_memref *add,
                                o2g_unranked_memref *y, int64_t axis, double in_scale, double out_scale,
                                int64_t relu);
void _mlir_ciface_o2g_rt_lrn(o2g_unranked_memref *x, o2g_unranked_memref *y, double alpha, int64_t axis,
                             double beta, double bias, double in_scale, double out_scale, int64_t size);
void _mlir_ciface_o2g_rt_layernorm(o2g_unranked_memref *x, o2g_unranked_memref *gamma,
                                   o2g_unranked_memref *beta, o2g_unranked_memref *y, int64_t axis,
                                   double epsilon, double in_scale, double out_scale);

/* Linear Resize (o2g_resize_linear): axes i64 (interpolated axes of x, outermost first), lo/hi i64 and
 * w_lo/w_hi f32 with one entry per output position of each listed axis. */
void _mlir_ciface_o2g_rt_resize_linear(o2g_unranked_memref *x, o2g_unranked_memref *y, o2g_unranked_memref *axes,
                                       o2g_unranked_memref *lo, o2g_unranked_memref *hi,
                                       o2g_unranked_memref *w_lo, o2g_unranked_memref *w_hi, float in_scale,
                                       float out_scale);

/* y = table[x + 128], table: 256 int8. */
void _mlir_ciface_o2g_rt_lut(o2g_unranked_memref *x, o2g_unranked_memref *y, o2g_unranked_memref *table);

/* Broadcasting elementwise op: _mlir_ciface_o2g_rt_binary_<fn>_<kinds> for fn in add, sub, mul, div,
 * max, min, prelu and kinds qq, qf, fq (q: int8 at its scale, f: float32 constant, scale 1). */
#define O2G_BINARY_DECL(name, kinds)                                                                 \
    void _mlir_ciface_o2g_rt_binary_##name##_##kinds(o2g_unranked_memref *a, o2g_unranked_memref *b, \
                                                     o2g_unranked_memref *y, float a_scale,          \
                                                     float b_scale, float out_scale, int64_t relu);
#define O2G_BINARY_DECLS(name) O2G_BINARY_DECL(name, qq) O2G_BINARY_DECL(name, qf) O2G_BINARY_DECL(name, fq)
O2G_BINARY_DECLS(add)
O2G_BINARY_DECLS(sub)
O2G_BINARY_DECLS(mul)
O2G_BINARY_DECLS(div)
O2G_BINARY_DECLS(max)
O2G_BINARY_DECLS(min)
O2G_BINARY_DECLS(prelu)

/* Exact int8 depthwise conv: x NHWC, weights [KH][KW][C*multiplier], bias [C*multiplier] int32, y NHWC
 * (its size is the output size). */
void _mlir_ciface_o2g_rt_dwconv(o2g_unranked_memref *x, o2g_unranked_memref *weights,
                                o2g_unranked_memref *bias, o2g_unranked_memref *y, int64_t kernel_rows,
                                int64_t kernel_cols, int64_t stride_rows, int64_t stride_cols,
                                int64_t pad_top, int64_t pad_left, int64_t pad_bottom, int64_t pad_right,
                                int64_t dilation_rows, int64_t dilation_cols, int64_t multiplier,
                                float scale, int64_t relu);

/* tiled_resadd_auto on [I][J] matrices A, B, C. */
void _mlir_ciface_o2g_rt_resadd(o2g_unranked_memref *a, o2g_unranked_memref *b, o2g_unranked_memref *c,
                                float a_scale, float b_scale, float c_scale, int64_t relu);

/* tiled_global_average_auto: [N][D][D][C] -> [N][C]. */
void _mlir_ciface_o2g_rt_global_average(o2g_unranked_memref *input, o2g_unranked_memref *output);

/* tiled_conv_auto for convs tile_conv would get wrong: input NHWC, weights [K*K*IC][OC], bias [OC],
 * output [N*pooled OH*pooled OW][OC]; out_rows/out_cols before pooling. */
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
                              int64_t pool_stride, int64_t pool_padding);

#endif /* O2G_MLIR_ABI_H */
