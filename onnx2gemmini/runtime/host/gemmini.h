/*
 * onnx2gemmini host runtime: a header-only, pure-C implementation of the
 * subset of the gemmini.h API (ucb-bar/gemmini-rocc-tests, branch dev,
 * commit 180c468) that onnx2gemmini's generated code calls.
 *
 * A generated model.c includes "gemmini.h".  Building with the real
 * gemmini-rocc-tests include path runs the model on Gemmini; building with
 * -I<this directory> instead runs the same model.c on any host core
 * (x86-64, or a RISC-V core without the Gemmini extension, e.g. on Spike).
 *
 * Written from the project's own specification notes
 * (shared spec "gemmini.md", sections 2 and 3); no upstream code was copied.
 *
 * Semantics: every entry point computes the result Gemmini's weight-
 * stationary (WS) hardware produces for the default int8 configuration,
 * bit for bit, whatever tiled_matmul_type_t is passed (OS and CPU compute
 * the WS result too; see README.md for where that differs from upstream).
 * Tile arguments of the explicit-tile variants are validated, but do not
 * change the result.
 */
#ifndef ONNX2GEMMINI_HOST_GEMMINI_H
#define ONNX2GEMMINI_HOST_GEMMINI_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <limits.h>

/* Lets code tell this implementation apart from the real gemmini.h. */
#define GEMMINI_HOST 1

/* ------------------------------------------------------------------ */
/* Configuration parameters (spec §1.1).  Each may be set beforehand by */
/* a generated params header or with -D.                               */
/* ------------------------------------------------------------------ */
#ifndef DIM
#define DIM 16
#endif
#ifndef BANK_NUM
#define BANK_NUM 4
#endif
#ifndef BANK_ROWS
#define BANK_ROWS 4096
#endif
#ifndef ACC_ROWS
#define ACC_ROWS 1024
#endif

/* Types (spec §1.1). */
typedef int8_t elem_t;
typedef int32_t acc_t;
typedef int64_t full_t;
typedef float scale_t;
typedef int32_t scale_acc_t;
typedef float acc_scale_t;

#ifndef elem_t_max
#define elem_t_max 127
#endif
#ifndef elem_t_min
#define elem_t_min (-128)
#endif
#ifndef acc_t_max
#define acc_t_max 2147483647
#endif
#ifndef acc_t_min
#define acc_t_min (-acc_t_max - 1)
#endif

/* Activation codes (spec §2.7); only these two exist in the default config. */
#ifndef NO_ACTIVATION
#define NO_ACTIVATION 0
#endif
#ifndef RELU
#define RELU 1
#endif
#ifndef SOFTMAX
#define SOFTMAX 4
#endif

#ifndef MVIN_SCALE_IDENTITY
#define MVIN_SCALE_IDENTITY 1.0
#endif
#ifndef ACC_SCALE_IDENTITY
#define ACC_SCALE_IDENTITY 1.0
#endif

/* Alignment helpers (spec §3.9). */
#ifndef row_align
#define row_align(blocks) __attribute__((aligned((blocks) * DIM * sizeof(elem_t))))
#endif
#ifndef row_align_acc
#define row_align_acc(blocks) __attribute__((aligned((blocks) * DIM * sizeof(acc_t))))
#endif

/* Spec §3: dataflow selector.  OS = 0, WS = 1, CPU = 2. */
enum tiled_matmul_type_t { OS, WS, CPU };

/* Spec §4.8: no TLB and no queue on the host, so both are no-ops. */
#define gemmini_flush(skip) ((void)(skip))
#define gemmini_fence() ((void)0)
/* Configuration alone changes nothing here: every call passes its own. */
#define gemmini_extended_config_st(stride, acc_act, acc_scale) \
    ((void)(stride), (void)(acc_act), (void)(acc_scale))

/* ------------------------------------------------------------------ */
/* read_cycles: rdcycle on RISC-V (as the upstream test utilities do),  */
/* the time-stamp counter on x86, otherwise a portable clock.  Define   */
/* GEMMINI_HOST_PORTABLE_CYCLES to force the portable clock (e.g. under */
/* a Linux kernel that blocks user-mode rdcycle).                       */
/* ------------------------------------------------------------------ */
#if !defined(__riscv) && !((defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__))
#define GMH_PORTABLE_CYCLES_ 1
#endif
#if defined(GEMMINI_HOST_PORTABLE_CYCLES)
#undef GMH_PORTABLE_CYCLES_
#define GMH_PORTABLE_CYCLES_ 1
#endif
#if defined(GMH_PORTABLE_CYCLES_)
#include <time.h>
#endif

static inline uint64_t read_cycles(void)
{
#if defined(GMH_PORTABLE_CYCLES_)
#if defined(TIME_UTC)
    struct timespec ts;
    if (timespec_get(&ts, TIME_UTC) == TIME_UTC)
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
    {
        clock_t c = clock();
        static uint64_t fallback_counter;
        if (c != (clock_t)-1)
            return (uint64_t)c;
        return ++fallback_counter;
    }
#elif defined(__riscv)
#if __riscv_xlen == 32
    uint32_t hi, lo, hi2;
    do {
        __asm__ __volatile__("rdcycleh %0" : "=r"(hi));
        __asm__ __volatile__("rdcycle %0" : "=r"(lo));
        __asm__ __volatile__("rdcycleh %0" : "=r"(hi2));
    } while (hi != hi2);
    return ((uint64_t)hi << 32) | lo;
#else
    uint64_t c;
    __asm__ __volatile__("rdcycle %0" : "=r"(c));
    return c;
#endif
#else
    return (uint64_t)__builtin_ia32_rdtsc();
#endif
}

/* ------------------------------------------------------------------ */
/* Internal helpers (prefix gmh_).                                      */
/* ------------------------------------------------------------------ */

/* Errors go to stdout with printf, then exit(1) (which flushes stdio).  */
/* Only printf and exit are needed: bare-metal runtimes often have just  */
/* those two.                                                           */
#define GMH_FAIL(...)              \
    do {                           \
        printf(__VA_ARGS__);       \
        exit(1);                   \
    } while (0)

/* Output channels computed together per output pixel (stack buffer). */
#define GMH_CHUNK 64

/* float32 product, rounded once to float32 even where the compiler would
 * otherwise keep excess precision (x87: FLT_EVAL_METHOD == 2). */
static inline float gmh_fmul(float a, float b)
{
#if defined(FLT_EVAL_METHOD) && (FLT_EVAL_METHOD != 0)
    volatile float va = a;
    volatile float p = va * b;
    return p;
#else
    return a * b;
#endif
}

/* Round half to even and saturate to int8 (spec §2.2, §2.4).  Does not
 * depend on the FP rounding mode; exact for every float32 value. */
static inline elem_t gmh_rne_sat8(float y)
{
    int32_t t;
    float f;
    if (y >= (float)elem_t_max)
        return elem_t_max;
    if (y <= (float)elem_t_min)
        return elem_t_min;
    if (!(y > (float)elem_t_min)) /* NaN: unreachable with finite scales */
        return 0;
    t = (int32_t)y;      /* truncates toward zero; |y| < 128 here */
    f = y - (float)t;    /* exact: the fractional part of y */
    if (f > 0.5f || (f >= 0.5f && (t & 1)))
        t += 1;
    else if (f < -0.5f || (f <= -0.5f && (t & 1)))
        t -= 1;
    return (elem_t)t;
}

/* True when s is exactly 1.0 (the identity scale). */
static inline bool gmh_is_one(float s)
{
    return s >= 1.0f && s <= 1.0f;
}

/* MVIN_SCALE (spec §2.2): sat_int8(rne(float32(x) * float32(s))). */
static inline elem_t gmh_mvin_scale(elem_t x, scale_t s)
{
    return gmh_rne_sat8(gmh_fmul((float)x, (float)s));
}

/* Accumulator read-out (spec §2.4): float32 scale, rne, int8 clip, ReLU. */
static inline elem_t gmh_acc_scale(acc_t acc, acc_scale_t scale, int act)
{
    elem_t q = gmh_rne_sat8(gmh_fmul((float)acc, (float)scale));
    if (act == RELU && q < 0)
        q = 0;
    return q;
}

/* The accumulator adds in 32 bits; unsigned arithmetic gives the
 * two's-complement wrap-around without undefined behaviour. */
static inline acc_t gmh_u2s(uint32_t u)
{
    if (u <= (uint32_t)INT32_MAX)
        return (acc_t)u;
    return (acc_t)(-(int32_t)(~u) - 1);
}

static inline uint32_t gmh_mul(int32_t a, int32_t b)
{
    return (uint32_t)(a * b); /* |a|,|b| <= 128: the product fits int32 */
}

static inline void gmh_check_act(const char *fn, int act)
{
    if (act != NO_ACTIVATION && act != RELU && act != SOFTMAX)
        GMH_FAIL("gemmini: %s: activation %d is not supported (only NO_ACTIVATION, RELU and SOFTMAX)\n",
                 fn, act);
}

/* ------------------------------------------------------------------ */
/* The normalizer's SOFTMAX (configs with normalizations), as Gemmini's */
/* functional model computes it (libgemmini gemmini.cc: apply_iexp,     */
/* apply_norm and loop_ws's MAX, SUM_EXP, write passes over each row of */
/* the whole J), with the constants tiled_matmul_outer derives from     */
/* bert_scale.  int32 arithmetic wraps (through uint32); shift counts   */
/* are taken mod 32, as x86 and RISC-V do.                              */
/* ------------------------------------------------------------------ */

struct gmh_iexp {
    int32_t qb, qc, qln2, qln2_inv;
};

static inline struct gmh_iexp gmh_softmax_constants(acc_scale_t bert_scale)
{
    struct gmh_iexp k;
    const scale_t a = 0.3585f, b = 1.353f, c = 0.344f;
    k.qln2 = (int32_t)(0.693147 / bert_scale);
    k.qln2_inv = 65536 / k.qln2;
    k.qb = (int32_t)(b / bert_scale);
    k.qc = (int32_t)(c / (a * bert_scale * bert_scale));
    return k;
}

static inline int32_t gmh_iexp(int32_t q, struct gmh_iexp k)
{
    const int32_t z = gmh_u2s((0u - (uint32_t)q) * (uint32_t)k.qln2_inv) >> 16;
    const int32_t qp = gmh_u2s((uint32_t)q + (uint32_t)z * (uint32_t)k.qln2);
    const uint32_t t = (uint32_t)qp + (uint32_t)k.qb;
    return gmh_u2s(t * t + (uint32_t)k.qc) >> (z & 31);
}

/* One row of C from its int32 accumulators `acc` (n of them). */
static inline void gmh_softmax_row(const uint32_t *acc, size_t n, struct gmh_iexp k, acc_scale_t scale,
                                   elem_t *out)
{
    int32_t top = INT32_MIN;
    uint32_t sum = 0;
    float inv;
    size_t j;
    for (j = 0; j < n; j++)
        if (gmh_u2s(acc[j]) > top)
            top = gmh_u2s(acc[j]);
    for (j = 0; j < n; j++)
        sum += (uint32_t)gmh_iexp(gmh_u2s(acc[j] - (uint32_t)top), k);
    inv = 127.0f / (float)gmh_u2s(sum);
    for (j = 0; j < n; j++) {
        const elem_t p = gmh_acc_scale(gmh_iexp(gmh_u2s(acc[j] - (uint32_t)top), k), inv, NO_ACTIVATION);
        out[j] = gmh_acc_scale(p, scale, NO_ACTIVATION);
    }
}

static inline void gmh_check_type(const char *fn, int type)
{
    if (type != OS && type != WS && type != CPU)
        GMH_FAIL("gemmini: %s: unknown tiled_matmul_type_t %d\n", fn, type);
}

static inline size_t gmh_ceil_div(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* ------------------------------------------------------------------ */
/* Matmul (spec §2.1-§2.5, §3.1).                                       */
/* ------------------------------------------------------------------ */

/* Argument checks the real API also makes (spec §2.5, §3.1, §3.8a). */
static inline void gmh_matmul_check(const char *fn, size_t dim_I, size_t dim_J, size_t dim_K,
                                    const elem_t *A, const elem_t *B, int act,
                                    bool transpose_A, bool transpose_B, bool full_C, bool low_D,
                                    enum tiled_matmul_type_t type)
{
    gmh_check_type(fn, (int)type);
    gmh_check_act(fn, act);
    if (type == WS && transpose_A && transpose_B)
        GMH_FAIL("gemmini: %s: WS cannot transpose both A and B\n", fn);
    if (type == OS && (transpose_A || transpose_B))
        GMH_FAIL("gemmini: %s: OS does not support transpose_A/transpose_B\n", fn);
    if (type == CPU && (full_C || low_D))
        GMH_FAIL("gemmini: %s: full_C and low_D are not implemented for CPU\n", fn);
    if (dim_I > 0 && dim_J > 0 && dim_K > 0 && (A == NULL || B == NULL))
        GMH_FAIL("gemmini: %s: A and B must not be NULL\n", fn);
}

/* The accumulators of row i, columns j0 .. j0+n-1: bias first (overwrite), products on top. */
static inline void gmh_row_acc(size_t i, size_t j0, size_t n, size_t dim_K,
                               const elem_t *A, const elem_t *B, const void *D,
                               size_t stride_A, size_t stride_B, size_t stride_D,
                               scale_t A_scale_factor, scale_t B_scale_factor, scale_acc_t D_scale_factor,
                               bool repeating_bias, bool transpose_A, bool transpose_B, bool low_D,
                               uint32_t *acc)
{
    const bool scale_a = !gmh_is_one(A_scale_factor);
    const bool scale_b = !gmh_is_one(B_scale_factor);
    /* low_D: int8 D goes through the mvin scaler with D_scale_factor
     * converted to float (spec §2.3); int32 D is never scaled. */
    const scale_t d_scale = (scale_t)D_scale_factor;
    const bool scale_d = !gmh_is_one(d_scale);
    const size_t drow = repeating_bias ? 0 : i;
    size_t jj, k;

    for (jj = 0; jj < n; jj++) {
        acc_t d = 0;
        if (D != NULL) {
            if (low_D) {
                elem_t d8 = ((const elem_t *)D)[drow * stride_D + j0 + jj];
                d = scale_d ? gmh_mvin_scale(d8, d_scale) : d8;
            } else {
                d = ((const acc_t *)D)[drow * stride_D + j0 + jj];
            }
        }
        acc[jj] = (uint32_t)d;
    }
    for (k = 0; k < dim_K; k++) {
        elem_t a = transpose_A ? A[k * stride_A + i] : A[i * stride_A + k];
        if (scale_a)
            a = gmh_mvin_scale(a, A_scale_factor);
        if (a == 0)
            continue;
        for (jj = 0; jj < n; jj++) {
            const size_t j = j0 + jj;
            elem_t b = transpose_B ? B[j * stride_B + k] : B[k * stride_B + j];
            if (scale_b)
                b = gmh_mvin_scale(b, B_scale_factor);
            acc[jj] += gmh_mul(a, b);
        }
    }
}

/* The computation shared by tiled_matmul_auto and tiled_matmul. */
static inline void gmh_matmul(size_t dim_I, size_t dim_J, size_t dim_K,
                              const elem_t *A, const elem_t *B, const void *D, void *C,
                              size_t stride_A, size_t stride_B, size_t stride_D, size_t stride_C,
                              scale_t A_scale_factor, scale_t B_scale_factor,
                              scale_acc_t D_scale_factor, int act, acc_scale_t scale,
                              acc_scale_t bert_scale, bool repeating_bias, bool transpose_A,
                              bool transpose_B, bool full_C, bool low_D)
{
    uint32_t acc[GMH_CHUNK];
    size_t i, j0, jj;

    if (C == NULL) /* loop_ws with C == NULL stores nothing */
        return;
    if (act == SOFTMAX && !full_C) { /* statistics over each whole row */
        const struct gmh_iexp k = gmh_softmax_constants(bert_scale);
        uint32_t *row = (uint32_t *)malloc((dim_J ? dim_J : 1) * sizeof(uint32_t));
        if (row == NULL)
            GMH_FAIL("gemmini: out of memory for a row of %lu accumulators\n", (unsigned long)dim_J);
        for (i = 0; i < dim_I; i++) {
            gmh_row_acc(i, 0, dim_J, dim_K, A, B, D, stride_A, stride_B, stride_D, A_scale_factor,
                        B_scale_factor, D_scale_factor, repeating_bias, transpose_A, transpose_B, low_D, row);
            gmh_softmax_row(row, dim_J, k, scale, (elem_t *)C + i * stride_C);
        }
        free(row);
        return;
    }
    for (i = 0; i < dim_I; i++) {
        for (j0 = 0; j0 < dim_J; j0 += GMH_CHUNK) {
            const size_t n = dim_J - j0 < GMH_CHUNK ? dim_J - j0 : GMH_CHUNK;
            gmh_row_acc(i, j0, n, dim_K, A, B, D, stride_A, stride_B, stride_D, A_scale_factor,
                        B_scale_factor, D_scale_factor, repeating_bias, transpose_A, transpose_B, low_D, acc);
            for (jj = 0; jj < n; jj++) {
                const size_t idx = i * stride_C + j0 + jj;
                if (full_C)
                    ((acc_t *)C)[idx] = gmh_u2s(acc[jj]);
                else
                    ((elem_t *)C)[idx] = gmh_acc_scale(gmh_u2s(acc[jj]), scale, act);
            }
        }
    }
}

/* Spec §3.1: C = act(scale * (A.B + D)) with WS semantics for any type. */
static inline void tiled_matmul_auto(size_t dim_I, size_t dim_J, size_t dim_K,
        const elem_t* A, const elem_t* B, const void* D, void* C,
        size_t stride_A, size_t stride_B, size_t stride_D, size_t stride_C,
        scale_t A_scale_factor, scale_t B_scale_factor, scale_acc_t D_scale_factor,
        int act, acc_scale_t scale, acc_scale_t bert_scale,
        bool repeating_bias, bool transpose_A, bool transpose_B,
        bool full_C, bool low_D, uint8_t weightA,
        enum tiled_matmul_type_t tiled_matmul_type)
{
    (void)weightA;    /* unused upstream as well */
    gmh_matmul_check("tiled_matmul_auto", dim_I, dim_J, dim_K, A, B, act,
                     transpose_A, transpose_B, full_C, low_D, tiled_matmul_type);
    gmh_matmul(dim_I, dim_J, dim_K, A, B, D, C, stride_A, stride_B, stride_D, stride_C,
               A_scale_factor, B_scale_factor, D_scale_factor, act, scale, bert_scale,
               repeating_bias, transpose_A, transpose_B, full_C, low_D);
}

/* Spec §3.8a: tiled_matmul with caller-chosen tiles (in DIM blocks).
 * Tiles are checked against the scratchpad/accumulator budget of §3.1
 * (half of each for WS/CPU, which double-buffer; all of it for OS). */
static inline void tiled_matmul(size_t dim_I, size_t dim_J, size_t dim_K,
        const elem_t* A, const elem_t* B, const void* D, void* C,
        size_t stride_A, size_t stride_B, size_t stride_D, size_t stride_C,
        scale_t A_scale_factor, scale_t B_scale_factor, scale_acc_t D_scale_factor,
        int act, acc_scale_t scale, acc_scale_t bert_scale,
        bool repeating_bias,
        size_t tile_I, size_t tile_J, size_t tile_K,
        bool transpose_A, bool transpose_B,
        bool full_C, bool low_D, uint8_t weightA,
        enum tiled_matmul_type_t tiled_matmul_type)
{
    const char *fn = "tiled_matmul";
    const size_t div = tiled_matmul_type == OS ? 1 : 2;
    const size_t max_spad_rows = (size_t)BANK_NUM * BANK_ROWS / div;
    const size_t max_acc_rows = (size_t)ACC_ROWS / div;
    size_t spad_rows, acc_rows;

    (void)weightA;
    gmh_matmul_check(fn, dim_I, dim_J, dim_K, A, B, act,
                     transpose_A, transpose_B, full_C, low_D, tiled_matmul_type);
    if (tile_I == 0 || tile_J == 0 || tile_K == 0)
        GMH_FAIL("gemmini: %s: tile sizes must be positive (tile_I=%lu, tile_J=%lu, tile_K=%lu)\n",
                 fn, (unsigned long)tile_I, (unsigned long)tile_J, (unsigned long)tile_K);
    spad_rows = (tile_I * tile_K + tile_K * tile_J) * DIM;
    acc_rows = tile_I * tile_J * DIM;
    if (spad_rows > max_spad_rows)
        GMH_FAIL("gemmini: %s: tile (tile_I=%lu, tile_J=%lu, tile_K=%lu) exceeds the scratchpad: "
                 "%lu rows > %lu\n", fn, (unsigned long)tile_I, (unsigned long)tile_J,
                 (unsigned long)tile_K, (unsigned long)spad_rows, (unsigned long)max_spad_rows);
    if (acc_rows > max_acc_rows)
        GMH_FAIL("gemmini: %s: tile (tile_I=%lu, tile_J=%lu, tile_K=%lu) exceeds the accumulator: "
                 "%lu rows > %lu\n", fn, (unsigned long)tile_I, (unsigned long)tile_J,
                 (unsigned long)tile_K, (unsigned long)acc_rows, (unsigned long)max_acc_rows);

    /* Tiling does not change the result: each output element is the same
     * int32 sum whichever K-tile order accumulates it. */
    gmh_matmul(dim_I, dim_J, dim_K, A, B, D, C, stride_A, stride_B, stride_D, stride_C,
               A_scale_factor, B_scale_factor, D_scale_factor, act, scale, bert_scale,
               repeating_bias, transpose_A, transpose_B, full_C, low_D);
}

/* ------------------------------------------------------------------ */
/* Convolution (spec §2.3, §2.4, §2.9, §3.3, §3.4).                     */
/* ------------------------------------------------------------------ */

struct gmh_conv {
    int batch_size, in_row_dim, in_col_dim, in_channels, out_channels;
    int out_row_dim, out_col_dim;
    int stride, input_dilation, kernel_dilation, padding, kernel_dim;
    int in_stride, weight_stride, out_stride;
    bool dw; /* depthwise: weights [C][KH][KW], in_channels == out_channels */
    const elem_t *input, *weights;
    const acc_t *bias;
    elem_t *output;
    int act;
    acc_scale_t scale;
    int pool_size, pool_stride, pool_padding;
};

/* Pooled output size, spec §2.9. */
static inline int gmh_pool_out_dim(int dim, int pool_size, int pool_stride, int pool_padding)
{
    return (dim + 2 * pool_padding - pool_size) / pool_stride + 1;
}

/* Argument checks for every conv entry point (spec §3.3 assertions,
 * §2.1 "convolutions are WS-only", §2.9 pool field widths). */
static inline void gmh_conv_check(const char *fn, const struct gmh_conv *g,
                                  bool wrot180, bool trans_output_1203, bool trans_input_3120,
                                  bool trans_weight_1203, bool trans_weight_0132,
                                  enum tiled_matmul_type_t type)
{
    gmh_check_type(fn, (int)type);
    if (type == OS)
        GMH_FAIL("gemmini: %s: Gemmini convs do not currently support OS\n", fn);
    gmh_check_act(fn, g->act);
    if (g->act == SOFTMAX)
        GMH_FAIL("gemmini: %s: SOFTMAX is a matmul read-out, not a conv's\n", fn);
    if (wrot180 || trans_output_1203 || trans_input_3120 || trans_weight_1203 || trans_weight_0132)
        GMH_FAIL("gemmini: %s: wrot180/trans_* layouts are not supported by the host implementation\n",
                 fn);
    if (g->batch_size <= 0 || g->in_row_dim <= 0 || g->in_col_dim <= 0 || g->in_channels <= 0 ||
        g->out_channels <= 0 || g->out_row_dim <= 0 || g->out_col_dim <= 0 || g->kernel_dim <= 0)
        GMH_FAIL("gemmini: %s: sizes must be positive\n", fn);
    if (g->stride <= 0 || g->input_dilation <= 0 || g->kernel_dilation <= 0 || g->padding < 0)
        GMH_FAIL("gemmini: %s: stride and dilations must be positive, padding non-negative\n", fn);
    if (g->in_stride <= 0 || g->weight_stride <= 0 || g->out_stride <= 0)
        GMH_FAIL("gemmini: %s: strides must be positive\n", fn);
    if (g->kernel_dim <= g->padding)
        GMH_FAIL("gemmini: %s: kernel_dim (%d) must be larger than padding (%d)\n", fn,
                 g->kernel_dim, g->padding);
    if (type == WS && (g->input_dilation > 2 || (g->input_dilation == 2 && g->stride != 1)))
        GMH_FAIL("gemmini: %s: Gemmini supports input_dilation <= 2, and 2 only with stride 1\n",
                 fn);
    if (g->input == NULL || g->weights == NULL || g->output == NULL)
        GMH_FAIL("gemmini: %s: input, weights and output must not be NULL\n", fn);
    if (g->pool_stride != 0) {
        if (g->pool_stride < 0 || g->pool_size <= 0 || g->pool_padding < 0)
            GMH_FAIL("gemmini: %s: invalid pooling parameters (size %d, stride %d, padding %d)\n",
                     fn, g->pool_size, g->pool_stride, g->pool_padding);
        if (type == WS && (g->pool_size > 3 || g->pool_stride > 3 || g->pool_padding > 3))
            GMH_FAIL("gemmini: %s: Gemmini pooling needs pool_size, pool_stride, pool_padding <= 3\n",
                     fn);
        if (g->out_row_dim + 2 * g->pool_padding < g->pool_size ||
            g->out_col_dim + 2 * g->pool_padding < g->pool_size)
            GMH_FAIL("gemmini: %s: pool window larger than the padded conv output\n", fn);
    }
}

/* One output pixel, channels och0 .. och0+n-1: bias + sum of products
 * (zero padding, input and kernel dilation), then the read-out of §2.4. */
static inline void gmh_conv_pixel(const struct gmh_conv *g, int b, int orow, int ocol,
                                  int och0, int n, elem_t *out)
{
    const int K = g->kernel_dim;
    uint32_t acc[GMH_CHUNK];
    int jj, kr, kc, ich;

    for (jj = 0; jj < n; jj++)
        acc[jj] = g->bias != NULL ? (uint32_t)g->bias[och0 + jj] : 0u;

    for (kr = 0; kr < K; kr++) {
        /* coordinate in the (input-dilated) input, before padding */
        const int drow = orow * g->stride + kr * g->kernel_dilation - g->padding;
        int irow;
        if (drow < 0 || drow % g->input_dilation != 0)
            continue;
        irow = drow / g->input_dilation;
        if (irow >= g->in_row_dim)
            continue;
        for (kc = 0; kc < K; kc++) {
            const int dcol = ocol * g->stride + kc * g->kernel_dilation - g->padding;
            int icol;
            const elem_t *px;
            if (dcol < 0 || dcol % g->input_dilation != 0)
                continue;
            icol = dcol / g->input_dilation;
            if (icol >= g->in_col_dim)
                continue;
            px = g->input + (((size_t)b * (size_t)g->in_row_dim + (size_t)irow) *
                             (size_t)g->in_col_dim + (size_t)icol) * (size_t)g->in_stride;
            if (g->dw) {
                for (jj = 0; jj < n; jj++) {
                    const size_t c = (size_t)(och0 + jj);
                    const elem_t w = g->weights[(c * (size_t)K + (size_t)kr) * (size_t)K + (size_t)kc];
                    acc[jj] += gmh_mul(px[c], w);
                }
            } else {
                for (ich = 0; ich < g->in_channels; ich++) {
                    const elem_t x = px[ich];
                    const elem_t *wrow;
                    if (x == 0)
                        continue;
                    wrow = g->weights + ((size_t)(kr * K + kc) * (size_t)g->in_channels +
                                         (size_t)ich) * (size_t)g->weight_stride + (size_t)och0;
                    for (jj = 0; jj < n; jj++)
                        acc[jj] += gmh_mul(x, wrow[jj]);
                }
            }
        }
    }

    for (jj = 0; jj < n; jj++)
        out[jj] = gmh_acc_scale(gmh_u2s(acc[jj]), g->scale, g->act);
}

/* Whole conv: scale/clip/ReLU per pixel, then the optional fused max-pool
 * whose out-of-range window positions count as 0 (spec §2.9). */
static inline void gmh_conv_run(const struct gmh_conv *g)
{
    elem_t px[GMH_CHUNK];
    int b, r, c, och0, jj;

    if (g->pool_stride == 0) {
        for (b = 0; b < g->batch_size; b++)
            for (r = 0; r < g->out_row_dim; r++)
                for (c = 0; c < g->out_col_dim; c++)
                    for (och0 = 0; och0 < g->out_channels; och0 += GMH_CHUNK) {
                        const int n = g->out_channels - och0 < GMH_CHUNK ? g->out_channels - och0
                                                                        : GMH_CHUNK;
                        elem_t *o = g->output + (((size_t)b * (size_t)g->out_row_dim + (size_t)r) *
                                                 (size_t)g->out_col_dim + (size_t)c) *
                                                    (size_t)g->out_stride + (size_t)och0;
                        gmh_conv_pixel(g, b, r, c, och0, n, px);
                        for (jj = 0; jj < n; jj++)
                            o[jj] = px[jj];
                    }
        return;
    } else {
        const int prows = gmh_pool_out_dim(g->out_row_dim, g->pool_size, g->pool_stride, g->pool_padding);
        const int pcols = gmh_pool_out_dim(g->out_col_dim, g->pool_size, g->pool_stride, g->pool_padding);
        elem_t mx[GMH_CHUNK];
        int wr, wc;
        for (b = 0; b < g->batch_size; b++)
            for (r = 0; r < prows; r++)
                for (c = 0; c < pcols; c++)
                    for (och0 = 0; och0 < g->out_channels; och0 += GMH_CHUNK) {
                        const int n = g->out_channels - och0 < GMH_CHUNK ? g->out_channels - och0
                                                                        : GMH_CHUNK;
                        elem_t *o = g->output + (((size_t)b * (size_t)prows + (size_t)r) *
                                                 (size_t)pcols + (size_t)c) *
                                                    (size_t)g->out_stride + (size_t)och0;
                        for (jj = 0; jj < n; jj++)
                            mx[jj] = elem_t_min;
                        for (wr = 0; wr < g->pool_size; wr++)
                            for (wc = 0; wc < g->pool_size; wc++) {
                                const int orow = r * g->pool_stride + wr - g->pool_padding;
                                const int ocol = c * g->pool_stride + wc - g->pool_padding;
                                if (orow < 0 || orow >= g->out_row_dim || ocol < 0 ||
                                    ocol >= g->out_col_dim) {
                                    for (jj = 0; jj < n; jj++) /* padding counts as 0 */
                                        if (mx[jj] < 0)
                                            mx[jj] = 0;
                                    continue;
                                }
                                gmh_conv_pixel(g, b, orow, ocol, och0, n, px);
                                for (jj = 0; jj < n; jj++)
                                    if (px[jj] > mx[jj])
                                        mx[jj] = px[jj];
                            }
                        for (jj = 0; jj < n; jj++)
                            o[jj] = mx[jj];
                    }
    }
}

/* Scratchpad / accumulator rows used by one conv tile, after spec §3.3's
 * tiled_conv_total_spad_rows; fails if the tile does not fit half of each. */
static inline void gmh_conv_check_tile(const char *fn, const struct gmh_conv *g,
                                       int batches, int porows, int pocols, int pochs,
                                       int krows, int kcols, int kchs)
{
    const long max_spad = (long)BANK_NUM * BANK_ROWS / 2;
    const long max_acc = (long)ACC_ROWS / 2;
    const bool pool = g->pool_stride != 0;
    const int pst = pool ? g->pool_stride : 1;
    const int psz = pool ? g->pool_size : 1;
    const bool downsample = g->stride == 2 && g->kernel_dim == 1 && g->padding == 0 && !pool &&
                            g->in_row_dim % 2 == 0 && g->in_col_dim % 2 == 0 &&
                            g->input_dilation == 1;
    long orows, ocols, irows, icols, dkrows, dkcols, a_rows, b_rows, c_rows;

    if (batches <= 0 || porows <= 0 || pocols <= 0 || pochs <= 0 || krows <= 0 || kcols <= 0 ||
        kchs <= 0)
        GMH_FAIL("gemmini: %s: tile sizes must be positive (batches=%d, porows=%d, pocols=%d, "
                 "pochs=%d, krows=%d, kcols=%d, kchs=%d)\n",
                 fn, batches, porows, pocols, pochs, krows, kcols, kchs);

    orows = (long)porows * pst + psz - 1;
    ocols = (long)pocols * pst + psz - 1;
    dkrows = krows + (long)(g->kernel_dilation - 1) * (krows - 1);
    dkcols = kcols + (long)(g->kernel_dilation - 1) * (kcols - 1);
    irows = orows * g->stride + dkrows - 1;
    icols = ocols * g->stride + dkcols - 1;
    irows = (irows + g->input_dilation - 1) / g->input_dilation;
    icols = (icols + g->input_dilation - 1) / g->input_dilation;
    if (downsample) {
        irows >>= 1;
        icols >>= 1;
    }
    a_rows = (long)gmh_ceil_div((size_t)kchs, DIM) * batches * irows * icols;
    b_rows = (long)gmh_ceil_div((size_t)pochs, DIM) * krows * kcols * kchs;
    c_rows = (long)gmh_ceil_div((size_t)pochs, DIM) * batches * orows * ocols;

    if (a_rows + b_rows > max_spad)
        GMH_FAIL("gemmini: %s: tile (batches=%d, porows=%d, pocols=%d, pochs=%d, krows=%d, "
                 "kcols=%d, kchs=%d) exceeds the scratchpad: %ld rows > %ld\n",
                 fn, batches, porows, pocols, pochs, krows, kcols, kchs, a_rows + b_rows, max_spad);
    if (c_rows > max_acc)
        GMH_FAIL("gemmini: %s: tile (batches=%d, porows=%d, pocols=%d, pochs=%d, krows=%d, "
                 "kcols=%d, kchs=%d) exceeds the accumulator: %ld rows > %ld\n",
                 fn, batches, porows, pocols, pochs, krows, kcols, kchs, c_rows, max_acc);
}

static inline struct gmh_conv gmh_conv_make(int batch_size, int in_row_dim, int in_col_dim,
        int in_channels, int out_channels, int out_row_dim, int out_col_dim,
        int stride, int input_dilation, int kernel_dilation, int padding, int kernel_dim,
        int in_stride, int weight_stride, int out_stride, bool dw,
        const elem_t *input, const elem_t *weights, const acc_t *bias, elem_t *output,
        int act, acc_scale_t scale, int pool_size, int pool_stride, int pool_padding)
{
    struct gmh_conv g;
    g.batch_size = batch_size;
    g.in_row_dim = in_row_dim;
    g.in_col_dim = in_col_dim;
    g.in_channels = in_channels;
    g.out_channels = out_channels;
    g.out_row_dim = out_row_dim;
    g.out_col_dim = out_col_dim;
    g.stride = stride;
    g.input_dilation = input_dilation;
    g.kernel_dilation = kernel_dilation;
    g.padding = padding;
    g.kernel_dim = kernel_dim;
    g.in_stride = in_stride;
    g.weight_stride = weight_stride;
    g.out_stride = out_stride;
    g.dw = dw;
    g.input = input;
    g.weights = weights;
    g.bias = bias;
    g.output = output;
    g.act = act;
    g.scale = scale;
    g.pool_size = pool_size;
    g.pool_stride = pool_stride;
    g.pool_padding = pool_padding;
    return g;
}

/* Spec §3.8a: conv with caller-chosen tiles (elements; pooled rows/cols). */
static inline void tiled_conv(
        int batch_size, int in_row_dim, int in_col_dim, int in_channels,
        int out_channels, int out_row_dim, int out_col_dim,
        int stride, int input_dilation, int kernel_dilation, int padding, int kernel_dim,
        int in_stride, int weight_stride, int out_stride,
        bool wrot180, bool trans_output_1203, bool trans_input_3120,
        bool trans_weight_1203, bool trans_weight_0132,
        int batches, int porows, int pocols, int pochs,
        int krows, int kcols, int kchs,
        const elem_t * input,
        const elem_t * weights,
        const acc_t * bias,
        elem_t * output,
        int act, acc_scale_t scale,
        int pool_size, int pool_stride, int pool_padding,
        enum tiled_matmul_type_t tiled_conv_type)
{
    const struct gmh_conv g = gmh_conv_make(batch_size, in_row_dim, in_col_dim, in_channels,
        out_channels, out_row_dim, out_col_dim, stride, input_dilation, kernel_dilation, padding,
        kernel_dim, in_stride, weight_stride, out_stride, false, input, weights, bias, output,
        act, scale, pool_size, pool_stride, pool_padding);
    gmh_conv_check("tiled_conv", &g, wrot180, trans_output_1203, trans_input_3120,
                   trans_weight_1203, trans_weight_0132, tiled_conv_type);
    gmh_conv_check_tile("tiled_conv", &g, batches, porows, pocols, pochs, krows, kcols, kchs);
    gmh_conv_run(&g);
}

/* Spec §3.3: tiled_conv_auto plus channel strides (in, weight, out). */
static inline void tiled_conv_stride_auto(
        int batch_size, int in_row_dim, int in_col_dim, int in_channels,
        int out_channels, int out_row_dim, int out_col_dim,
        int stride, int input_dilation, int kernel_dilation, int padding, int kernel_dim,
        int in_stride, int weight_stride, int out_stride,
        bool wrot180, bool trans_output_1203, bool trans_input_3120,
        bool trans_weight_1203, bool trans_weight_0132,
        const elem_t * input,
        const elem_t * weights,
        const acc_t * bias,
        elem_t * output,
        int act, acc_scale_t scale,
        int pool_size, int pool_stride, int pool_padding,
        enum tiled_matmul_type_t tiled_conv_type)
{
    const struct gmh_conv g = gmh_conv_make(batch_size, in_row_dim, in_col_dim, in_channels,
        out_channels, out_row_dim, out_col_dim, stride, input_dilation, kernel_dilation, padding,
        kernel_dim, in_stride, weight_stride, out_stride, false, input, weights, bias, output,
        act, scale, pool_size, pool_stride, pool_padding);
    gmh_conv_check("tiled_conv_stride_auto", &g, wrot180, trans_output_1203, trans_input_3120,
                   trans_weight_1203, trans_weight_0132, tiled_conv_type);
    gmh_conv_run(&g);
}

/* Spec §3.3: NHWC conv, HWIO weights, dense channel strides. */
static inline void tiled_conv_auto(
        int batch_size, int in_row_dim, int in_col_dim, int in_channels,
        int out_channels, int out_row_dim, int out_col_dim,
        int stride, int input_dilation, int kernel_dilation, int padding, int kernel_dim,
        bool wrot180, bool trans_output_1203, bool trans_input_3120,
        bool trans_weight_1203, bool trans_weight_0132,
        const elem_t * input,
        const elem_t * weights,
        const acc_t * bias,
        elem_t * output,
        int act, acc_scale_t scale,
        int pool_size, int pool_stride, int pool_padding,
        enum tiled_matmul_type_t tiled_conv_type)
{
    const struct gmh_conv g = gmh_conv_make(batch_size, in_row_dim, in_col_dim, in_channels,
        out_channels, out_row_dim, out_col_dim, stride, input_dilation, kernel_dilation, padding,
        kernel_dim, in_channels, out_channels, out_channels, false, input, weights, bias, output,
        act, scale, pool_size, pool_stride, pool_padding);
    gmh_conv_check("tiled_conv_auto", &g, wrot180, trans_output_1203, trans_input_3120,
                   trans_weight_1203, trans_weight_0132, tiled_conv_type);
    gmh_conv_run(&g);
}

/* Spec §3.8a: depthwise conv with caller-chosen tiles (channel tiles are 1). */
static inline void tiled_conv_dw(
        int batch_size, int in_row_dim, int in_col_dim, int channels,
        int out_row_dim, int out_col_dim,
        int stride, int padding, int kernel_dim,
        int batches, int porows, int pocols, int krows, int kcols,
        elem_t * input,
        elem_t * weights,
        acc_t * bias,
        elem_t * output,
        int act, acc_scale_t scale,
        int pool_size, int pool_stride, int pool_padding,
        enum tiled_matmul_type_t tiled_conv_type)
{
    const struct gmh_conv g = gmh_conv_make(batch_size, in_row_dim, in_col_dim, channels,
        channels, out_row_dim, out_col_dim, stride, 1, 1, padding, kernel_dim,
        channels, 1, channels, true, input, weights, bias, output,
        act, scale, pool_size, pool_stride, pool_padding);
    gmh_conv_check("tiled_conv_dw", &g, false, false, false, false, false, tiled_conv_type);
    gmh_conv_check_tile("tiled_conv_dw", &g, batches, porows, pocols, 1, krows, kcols, 1);
    gmh_conv_run(&g);
}

/* Spec §3.4: depthwise conv, NHWC in/out, weights [C][KH][KW]. */
static inline void tiled_conv_dw_auto(int batch_size, int in_row_dim, int in_col_dim,
    int channels, int out_row_dim, int out_col_dim,
    int stride, int padding, int kernel_dim,
    elem_t* input, elem_t* weights, acc_t* bias, elem_t* output,
    int act, acc_scale_t scale, int pool_size, int pool_stride, int pool_padding,
    enum tiled_matmul_type_t tiled_conv_type)
{
    const struct gmh_conv g = gmh_conv_make(batch_size, in_row_dim, in_col_dim, channels,
        channels, out_row_dim, out_col_dim, stride, 1, 1, padding, kernel_dim,
        channels, 1, channels, true, input, weights, bias, output,
        act, scale, pool_size, pool_stride, pool_padding);
    gmh_conv_check("tiled_conv_dw_auto", &g, false, false, false, false, false, tiled_conv_type);
    gmh_conv_run(&g);
}

/* ------------------------------------------------------------------ */
/* Residual add (spec §2.8, §3.6).                                      */
/* ------------------------------------------------------------------ */

static inline void gmh_resadd(const char *fn, size_t I, size_t J, size_t stride,
                              scale_t A_scale, scale_t B_scale, acc_scale_t C_scale,
                              const elem_t *A, const elem_t *B, elem_t *C, bool relu,
                              enum tiled_matmul_type_t type)
{
    const bool scale_a = !gmh_is_one(A_scale);
    const bool scale_b = !gmh_is_one(B_scale);
    size_t i, j;

    gmh_check_type(fn, (int)type);
    if (type == OS)
        GMH_FAIL("gemmini: %s: resadd supports only WS and CPU\n", fn);
    if (I > 0 && J > 0 && (A == NULL || B == NULL || C == NULL))
        GMH_FAIL("gemmini: %s: A, B and C must not be NULL\n", fn);

    /* element-wise, each element read before it is written: C may alias A or B */
    for (i = 0; i < I; i++)
        for (j = 0; j < J; j++) {
            const size_t idx = i * stride + j;
            const elem_t a = scale_a ? gmh_mvin_scale(A[idx], A_scale) : A[idx];
            const elem_t b = scale_b ? gmh_mvin_scale(B[idx], B_scale) : B[idx];
            C[idx] = gmh_acc_scale((acc_t)a + (acc_t)b, C_scale, relu ? RELU : NO_ACTIVATION);
        }
}

/* Spec §3.6: resadd with one stride (elements) shared by A, B and C. */
static inline void tiled_resadd_stride_auto(const size_t I, const size_t J,
        const scale_t A_scale, const scale_t B_scale, const acc_scale_t C_scale,
        const size_t stride,
        const elem_t* A, const elem_t* B, elem_t* C, bool relu,
        enum tiled_matmul_type_t matadd_type)
{
    gmh_resadd("tiled_resadd_stride_auto", I, J, stride, A_scale, B_scale, C_scale, A, B, C,
               relu, matadd_type);
}

/* Spec §3.6: dense I x J resadd. */
static inline void tiled_resadd_auto(const size_t I, const size_t J,
        const scale_t A_scale, const scale_t B_scale, const acc_scale_t C_scale,
        const elem_t* A, const elem_t* B, elem_t* C, bool relu,
        enum tiled_matmul_type_t matadd_type)
{
    gmh_resadd("tiled_resadd_auto", I, J, J, A_scale, B_scale, C_scale, A, B, C, relu,
               matadd_type);
}

/* Spec §3.8a: resadd with caller-chosen tiles (elements); a tile must fit
 * half of the accumulator: ceil(tile_I/DIM)*DIM*ceil(tile_J/DIM) rows. */
static inline void tiled_resadd(const size_t I, const size_t J, const size_t stride,
        const size_t tile_I, const size_t tile_J,
        const scale_t A_scale, const scale_t B_scale, const acc_scale_t C_scale,
        const elem_t* A, const elem_t* B, elem_t* C, bool relu,
        enum tiled_matmul_type_t matadd_type)
{
    const char *fn = "tiled_resadd";
    const size_t max_acc = (size_t)ACC_ROWS / 2;
    size_t acc_rows;
    if (tile_I == 0 || tile_J == 0)
        GMH_FAIL("gemmini: %s: tile sizes must be positive (tile_I=%lu, tile_J=%lu)\n", fn,
                 (unsigned long)tile_I, (unsigned long)tile_J);
    acc_rows = gmh_ceil_div(tile_I, DIM) * DIM * gmh_ceil_div(tile_J, DIM);
    if (acc_rows > max_acc)
        GMH_FAIL("gemmini: %s: tile (tile_I=%lu, tile_J=%lu) exceeds the accumulator: "
                 "%lu rows > %lu\n", fn, (unsigned long)tile_I, (unsigned long)tile_J,
                 (unsigned long)acc_rows, (unsigned long)max_acc);
    gmh_resadd(fn, I, J, stride, A_scale, B_scale, C_scale, A, B, C, relu, matadd_type);
}

/* ------------------------------------------------------------------ */
/* Global average pooling (spec §2.10, §3.7).                           */
/* ------------------------------------------------------------------ */

/* int32 sum over dim*dim pixels, then the read-out with the float32 scale
 * (acc_scale_t)(1.0/(dim*dim)): hardware rounding (half to even). */
static inline void gmh_global_average(const char *fn, const elem_t *input, elem_t *output,
                                      int batches, int channels, int dim)
{
    uint32_t acc[GMH_CHUNK];
    size_t pixels;
    acc_scale_t scale;
    int b, c0, jj;
    size_t p;

    if (batches <= 0 || channels <= 0 || dim <= 0)
        GMH_FAIL("gemmini: %s: batches, channels and dim must be positive\n", fn);
    if (input == NULL || output == NULL)
        GMH_FAIL("gemmini: %s: input and output must not be NULL\n", fn);
    pixels = (size_t)dim * (size_t)dim;
    scale = (acc_scale_t)(1.0 / (double)pixels);

    for (b = 0; b < batches; b++)
        for (c0 = 0; c0 < channels; c0 += GMH_CHUNK) {
            const int n = channels - c0 < GMH_CHUNK ? channels - c0 : GMH_CHUNK;
            for (jj = 0; jj < n; jj++)
                acc[jj] = 0;
            for (p = 0; p < pixels; p++) {
                const elem_t *px = input + ((size_t)b * pixels + p) * (size_t)channels + (size_t)c0;
                for (jj = 0; jj < n; jj++)
                    acc[jj] += gmh_mul(px[jj], 1);
            }
            for (jj = 0; jj < n; jj++)
                output[(size_t)b * (size_t)channels + (size_t)(c0 + jj)] =
                    gmh_acc_scale(gmh_u2s(acc[jj]), scale, NO_ACTIVATION);
        }
}

/* Spec §3.7: input NHWC [batches][dim][dim][channels], output [batches][channels].
 * The type argument does not matter: the hardware result is computed. */
static inline void tiled_global_average_auto(const elem_t* input, elem_t* output,
    int batches, int channels, int dim, enum tiled_matmul_type_t type)
{
    gmh_check_type("tiled_global_average_auto", (int)type);
    gmh_global_average("tiled_global_average_auto", input, output, batches, channels, dim);
}

/* Spec §3.8a: global average with a caller-chosen channel tile. */
static inline void tiled_global_average(const elem_t* input, elem_t* output,
    int batches, int channels, int dim, int channel_tile_size)
{
    if (channel_tile_size <= 0)
        GMH_FAIL("gemmini: tiled_global_average: tile size must be positive (channel_tile_size=%d)\n",
                 channel_tile_size);
    gmh_global_average("tiled_global_average", input, output, batches, channels, dim);
}

#endif /* ONNX2GEMMINI_HOST_GEMMINI_H */
