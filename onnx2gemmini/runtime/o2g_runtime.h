/*
 * onnx2gemmini CPU-kernel runtime: the plan steps that run on the host core
 * (Quantize, and the CpuOp ops transpose, im2col, maxpool, avgpool, clip,
 * softmax), bit-exact with onnx2gemmini/kernels.py and the emulator.
 *
 * Static memory only (no malloc), no libc beyond <math.h>'s expf (softmax).
 * Correct under -ffast-math (the rocc-tests bare-metal flags use it): the
 * rounding is fcvt.w.s with the static rounding mode rne on RISC-V with an
 * FPU (inline asm; explicit integer code elsewhere), and no division is
 * rewritten into a multiplication by a reciprocal (fdiv.s in inline asm).
 *
 * Exactness: the int8 kernels, o2g_quantize and the float kernels made of
 * +, -, *, / (binary, affine, concat's requantization, linear resize) are exact: each float
 * operation is rounded separately, as NumPy does (an empty asm on each
 * intermediate keeps the compiler from fusing a*b+c into an FMA or
 * reassociating). Softmax, LRN and LayerNorm
 * call expf/powf/sqrtf and sum in NumPy's order as far as it is known; their
 * int8 results may differ from the emulator by at most 1 LSB.
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
 * to even, saturate. NaN becomes -128 (as onnxruntime's x86 kernel). */
void o2g_quantize(const float *x, int8_t *y, size_t count, float scale);

/* The same, reading NCHW float data and writing NHWC int8. */
void o2g_quantize_nchw_to_nhwc(const float *x, int8_t *y, int batches, int channels,
                               int rows, int cols, float scale);

/* ONNX DequantizeLinear from int8, zero point 0: y = float32(x) * scale, one rounding (the emulator's
 * numerics.dequantize). Not called by the generated code yet: for float model outputs. */
void o2g_dequantize(const int8_t *x, float *y, size_t count, float scale);

/* The same, reading NHWC int8 and writing NCHW float (an image-shaped output in ONNX layout). */
void o2g_dequantize_nhwc_to_nchw(const int8_t *x, float *y, int batches, int channels, int rows, int cols,
                                 float scale);

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

/* o2g_softmax with a constant attention mask: keep[f % keep_size] (f: flat index into x) is 0 where a position
 * is masked (left out of the row's largest value and sum; output 0; a row that keeps nothing is uniform).
 * keep_size is a multiple of axis_len * inner; axis_len <= 4096. */
void o2g_softmax_masked(const int8_t *x, const int8_t *keep, int8_t *y, size_t outer, size_t axis_len,
                        size_t inner, size_t keep_size, float in_scale, float out_scale);

/* Softmax of attention scores [rows][keys] masked by an integer model input [batch][keys] (0: masked; int64_t
 * ids when index_bytes is 8, else int32_t): row r is query r % queries of batch r / batch_rows; the form says
 * what else is masked: nothing, every later key (causal), or a masked query's whole row (query_key, a uniform
 * row, as is any row that keeps nothing). keys <= 4096. */
enum o2g_mask_form { O2G_MASK_PADDING, O2G_MASK_CAUSAL, O2G_MASK_QUERY_KEY };
void o2g_softmax_input_mask(const int8_t *x, const void *mask, int8_t *y, size_t rows, size_t keys, size_t queries,
                            size_t batch_rows, int index_bytes, int form, float in_scale, float out_scale);

/* int8 data movement on x viewed as [outer][axis_len][inner] (exact). */
/* y[o][k][i] = x[o][indices[k]][i], k < count (ONNX Gather with constant indices) */
void o2g_gather(const int8_t *x, int8_t *y, size_t outer, size_t axis_len, size_t inner,
                const int64_t *indices, size_t count);
/* y[o][k][i] = table[o][ids[k]][i], k < count: ONNX Gather of a constant table by integer model input ids (an
 * embedding lookup); ids are int64_t (index_bytes 8) or int32_t (4), a negative id counts from the end and
 * an id outside the table is clamped to it (the compiler's data check refuses such ids). Exact. */
void o2g_embedding(const void *ids, const int8_t *table, int8_t *y, int index_bytes, size_t outer, size_t rows,
                   size_t inner, size_t count);
/* y[r] = x[r] where mask[r] != 0, else zeros, x viewed as [rows][row_len] (int64_t mask values when index_bytes
 * is 8, else int32_t): an attention mask zeroing padded positions' rows. Exact. */
void o2g_mask_rows(const int8_t *x, const void *mask, int8_t *y, int index_bytes, size_t rows, size_t row_len);
/* y[k] = table[position k] for token ids [count / seq][seq]: position = pad at a padding id (id == pad), else
 * pad + the number of non-padding ids of its sequence up to it (RoBERTa's position ids); clamped to the
 * table. Exact. */
void o2g_position_embedding(const void *ids, const int8_t *table, int8_t *y, int index_bytes, size_t rows,
                            size_t inner, size_t seq, size_t count, int64_t pad);
/* y[i0]..[in] = x[index0[i0]]..[indexn[in]], or `value` where any index is -1 (Slice, Pad, nearest
 * Resize, ConvTranspose's zero insertion: per-axis maps). `index` concatenates the maps of every
 * axis, out_shape[d] entries for axis d; rank <= O2G_MAX_RANK. Exact. */
void o2g_remap(const int8_t *x, int8_t *y, int rank, const int *in_shape, const int *out_shape,
               const int64_t *index, int8_t value);
/* One input of a concatenation: x [outer][part_len][inner] goes to y [outer][total_len][inner] at
 * offset `offset` along the axis, requantized (x * in_scale / out_scale, float32, round half to
 * even, saturate) when the scales differ. */
void o2g_concat_part(const int8_t *x, int8_t *y, size_t outer, size_t part_len, size_t inner,
                     size_t total_len, size_t offset, float in_scale, float out_scale);
/* a float32 model output's concatenation: a float32 input copied, an int8 one dequantized (x * scale) */
void o2g_concat_part_f32(const float *x, float *y, size_t outer, size_t part_len, size_t inner, size_t total_len,
                         size_t offset);
void o2g_concat_part_dequantize(const int8_t *x, float *y, size_t outer, size_t part_len, size_t inner,
                                size_t total_len, size_t offset, float scale);

/* ONNX Resize in linear mode, as onnxruntime's bilinear/trilinear kernels compute it in float32:
 * `naxes` interpolated axes of x (axes[], outermost first in ONNX order; every other axis has the
 * same size in x and y). For each, lo/hi (source positions) and w_lo/w_hi (their weights) hold one
 * entry per output position, the tables of axes[0], axes[1], .. concatenated. Each output value is
 * the sum over the 2^naxes corners, the innermost axis varying fastest, of
 * ((w_inner * .. ) * w_outer) * (x * in_scale), added in that order, then quantized with
 * out_scale. Exact (each operation rounded separately); rank <= O2G_MAX_RANK, naxes <= 3. */
void o2g_resize_linear(const int8_t *x, int8_t *y, int rank, const int *in_shape, const int *out_shape,
                       int naxes, const int *axes, const int64_t *lo, const int64_t *hi,
                       const float *w_lo, const float *w_hi, float in_scale, float out_scale);

/* ONNX Resize in cubic mode, as onnxruntime's bicubic kernel computes it in float32: axes[0] and
 * axes[1] (height, then width; axes[0] < axes[1]) of x are interpolated, every other axis has the same
 * size in x and y. pos/weight hold four source positions and weights per output position of the
 * height axis, then of the width axis; divisor one per output position of the height axis. Each
 * output value is the sum over the four rows i, in order, of (row_i * weight_h[i]) / divisor, where
 * row_i is the sum over the four columns j, in order, of weight_w[j] * (x * in_scale); each sum starts
 * from 0. Then quantized with out_scale. Exact (each operation rounded separately); rank <=
 * O2G_MAX_RANK. */
void o2g_resize_cubic(const int8_t *x, int8_t *y, int rank, const int *in_shape, const int *out_shape,
                      const int *axes, const int64_t *pos, const float *weight, const float *divisor,
                      float in_scale, float out_scale);

/* y = table[x + 128]: a quantized activation function (exact). */
void o2g_lut(const int8_t *x, int8_t *y, size_t count, const int8_t *table);
/* y[k] = table[x[k] + 128] in float32: a float32 model output's activation */
void o2g_lut_f32(const int8_t *x, float *y, size_t count, const float *table);

/* Elementwise float32 op with NumPy broadcasting: each operand is int8 (dequantized with its scale)
 * or float32 (a constant); strides are in elements per output dimension (0 = broadcast). The
 * result is quantized with out_scale (then ReLU when relu): infinities saturate, NaN becomes the
 * lower bound (-128, or 0 under ReLU) as in o2g_quantize. Exact. */
/* O2G_PRELU: a < 0 ? a * b : a (b the slope) */
/* O2G_HYPOT: sqrt(a * a + b * b), each product and the sum rounded (a spectrum's magnitude) */
enum o2g_binary_fn { O2G_ADD, O2G_SUB, O2G_MUL, O2G_DIV, O2G_MAX, O2G_MIN, O2G_PRELU, O2G_HYPOT };
struct o2g_operand {
    const void *data;
    int is_float;        /* 1: float32 data; 0: int8 data at `scale` */
    float scale;
    const int *strides;  /* one per output dimension */
};
void o2g_binary(int fn, const struct o2g_operand *a, const struct o2g_operand *b, int8_t *y,
                int rank, const int *shape, float out_scale, int relu);

/* Exact int8 depthwise conv: NHWC x, weights [KH][KW][C*multiplier], int32 bias (or NULL); output
 * channel k reads input channel k / multiplier; the int32 sum is read out like Gemmini's
 * accumulator (float32 * scale, round half to even, saturate, then ReLU). */
void o2g_dwconv(const int8_t *x, const int8_t *weights, const int32_t *bias, int8_t *y,
                int batches, int rows, int cols, int channels, const struct o2g_window *w,
                int multiplier, float scale, int relu);

/* Per-channel y = (x * in_scale) * mul[c] + add[c] in float32, quantized with out_scale (then ReLU if
 * relu); x viewed as [outer][channels][inner] with x_row elements between its outer rows (channels *
 * inner when dense; more for a channel slice of a wider tensor); y dense. A standalone BatchNormalization.
 * Exact. */
void o2g_affine(const int8_t *x, size_t x_row, const float *mul, const float *add, int8_t *y, size_t outer,
                size_t channels, size_t inner, float in_scale, float out_scale, int relu);

/* ONNX LRN across the channels of x viewed as [outer][channels][inner], in float32: window sums
 * as differences of a running sum (as the emulator computes them), then
 * v / powf(bias + alpha_over_size * sum, beta). Within 1 LSB of the emulator (powf). */
void o2g_lrn(const int8_t *x, int8_t *y, size_t outer, size_t channels, size_t inner, int size,
             float alpha_over_size, float beta, float bias, float in_scale, float out_scale);

/* ONNX LayerNormalization over the last `norm_size` values of each of `outer` rows, in float32
 * (means summed in NumPy's pairwise order): ((v - mean) / sqrtf(var + epsilon)) * gamma + beta.
 * Within 1 LSB of the emulator. */
void o2g_layernorm(const int8_t *x, const float *gamma, const float *beta, int8_t *y, size_t outer,
                   size_t norm_size, float epsilon, float in_scale, float out_scale);

/* ONNX ReduceSum / ReduceMean / ReduceMax / ReduceMin / ReduceL2 of x viewed as [outer][axis_len][inner]
 * over axis_len, between DequantizeLinear and QuantizeLinear: the int8 values (or their squares) are
 * summed as integers (exactly) or the largest / smallest picked, then v = float32(r) * in_scale (divided
 * by axis_len for the mean; sqrtf(float32(r)) * in_scale for L2) and y = QuantizeLinear(v, out_scale).
 * The integer sums must fit int32 (axis_len * 127 or * 16384 for L2). Exact. */
enum o2g_reduce_kind { O2G_REDUCE_SUM, O2G_REDUCE_MEAN, O2G_REDUCE_MAX, O2G_REDUCE_MIN, O2G_REDUCE_L2 };
void o2g_reduce(const int8_t *x, int8_t *y, size_t outer, size_t axis_len, size_t inner, int kind,
                float in_scale, float out_scale);

/* The recurrence of ONNX LSTM / GRU (default activations) between DequantizeLinear and QuantizeLinear, one
 * sequence (direction, batch element) at a time in float32. p holds the input projections X*W^T + Wb
 * [seq][batch][directions * gates * hidden] at p_scale, int8 or (p_int32) a full_C matmul's int32
 * accumulators, each direction's gates (LSTM i, o, f, c; GRU z, r, h) one after the other;
 * r [directions][gates * hidden][hidden], bias (the recurrence bias Rb) [directions][gates * hidden],
 * peephole [directions][3 * hidden] (i, o, f), h0 and c0 [directions][batch][hidden], all float32.
 * Writes y [seq][directions][batch][hidden] and y_h, y_c [directions][batch][hidden], each quantized at
 * its scale. Direction 1 (or the only one, with reverse)
 * runs backward. hidden <= O2G_RNN_MAX_HIDDEN (1024). The dot products are summed in order and
 * sigmoid/tanh call expf/tanhf: within 1 LSB of the emulator in a few values. */
void o2g_lstm(const void *p, int p_int32, const float *r, const float *bias, const float *peephole,
              const float *h0, const float *c0, int8_t *y, int8_t *y_h, int8_t *y_c, size_t seq, size_t batch,
              size_t hidden, int directions, int reverse, float p_scale, float y_scale, float y_h_scale,
              float y_c_scale);
void o2g_gru(const void *p, int p_int32, const float *r, const float *bias, const float *h0, int8_t *y,
             int8_t *y_h, size_t seq, size_t batch, size_t hidden, int directions, int reverse,
             int linear_before_reset, float p_scale, float y_scale, float y_h_scale);

/* ==== layers kept float (--keep-float) ================================================================ */
/* A conv of NHWC int8 x with float32 weights [KH][KW][channels/groups][out_channels] and a float32 bias (or
 * NULL), in float: DequantizeLinear (float32(x) * in_scale), each output the double sum of its exact
 * products in the order (kernel row, kernel column, input channel), plus the bias, rounded to float32 and
 * quantized with out_scale (to [0, 127] when relu). Output channel k belongs to group k / (out_channels /
 * groups). A matmul [I][K] x [K][J] is the 1x1 case with batches = rows = 1, cols = I. Exact. */
void o2g_float_conv(const int8_t *x, const float *weights, const float *bias, int8_t *y,
                    int batches, int rows, int cols, int channels, const struct o2g_window *w,
                    int groups, int out_channels, float in_scale, float out_scale, int relu);

#endif /* O2G_RUNTIME_H */
