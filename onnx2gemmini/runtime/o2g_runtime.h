/*
 * onnx2gemmini CPU-kernel runtime: the plan steps that run on the host core
 * (Quantize, and the CpuOp ops transpose, im2col, maxpool, avgpool, clip,
 * softmax), bit-exact with onnx2gemmini/run/kernels.py and the emulator.
 *
 * Static memory only (no malloc), no libc beyond <math.h>'s expf (softmax).
 * Correct under -ffast-math (the rocc-tests bare-metal flags use it): the
 * rounding is explicit integer code and no division is rewritten into a
 * multiplication by a reciprocal.
 *
 * Exactness: every int8 kernel and o2g_quantize are exact. o2g_softmax is a
 * float32 kernel whose exp and summation order differ from NumPy's, so its
 * int8 result may differ from the emulator by at most 1 LSB.
 *
 * Layouts: 4-D activations are NHWC int8 (Gemmini's layout), the model's
 * float inputs are in ONNX layout (NCHW for images).
 * One copy serves every generated model: link it once.
 */
#ifndef O2G_RUNTIME_H
#define O2G_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

/* A 2-D sliding window over an NHWC map (ONNX Conv/MaxPool/AveragePool
 * attributes, auto_pad already resolved). Positions outside the input are
 * padding; pad_bottom/pad_right only matter to avgpool's count_include_pad. */
struct o2g_window {
    int kernel_rows, kernel_cols;
    int stride_rows, stride_cols;
    int pad_top, pad_left, pad_bottom, pad_right;
    int dilation_rows, dilation_cols;
    int out_rows, out_cols;
};

/* ONNX QuantizeLinear to int8, zero point 0: float32 x / scale, round half
 * to even, saturate. NaN becomes 0. */
void o2g_quantize(const float *x, int8_t *y, size_t count, float scale);

/* The same, reading NCHW float data and writing NHWC int8. */
void o2g_quantize_nchw_to_nhwc(const float *x, int8_t *y, int batches, int channels,
                               int rows, int cols, float scale);

/* y = x transposed by perm (numpy.transpose), rank <= O2G_MAX_RANK;
 * shape is x's shape. */
#define O2G_MAX_RANK 8
void o2g_transpose(const int8_t *x, int8_t *y, int rank, const int *shape, const int *perm);

/* [N*OH*OW][KH*KW*C] patches of an NHWC map, columns ordered (kh, kw, c) like
 * Gemmini's conv weights; padding reads 0. */
void o2g_im2col(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                const struct o2g_window *w);

/* ONNX MaxPool: padded positions read -128 (they never win). */
void o2g_maxpool(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                 const struct o2g_window *w);

/* ONNX AveragePool: int32 sum / count, rounded half to even, saturated.
 * count: positions inside the input, or with count_include_pad inside the
 * explicitly padded input. Exact (as float32 division) for windows of fewer
 * than 2^17 positions; the emitter checks that. */
void o2g_avgpool(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                 const struct o2g_window *w, int count_include_pad);

/* y = min(max(x, lo), hi). */
void o2g_clip(const int8_t *x, int8_t *y, size_t count, int lo, int hi);

/* Softmax over the middle axis of x viewed as [outer][axis_len][inner]:
 * dequantize (x * in_scale, float32), exp(v - max), divide by the sum,
 * quantize with out_scale. Within 1 LSB of the emulator (see above). */
void o2g_softmax(const int8_t *x, int8_t *y, size_t outer, size_t axis_len, size_t inner,
                 float in_scale, float out_scale);

#endif /* O2G_RUNTIME_H */
