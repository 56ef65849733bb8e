/*
 * onnx2gemmini CPU-kernel runtime; see o2g_runtime.h for what and why.
 * Written for the project from onnx2gemmini/kernels.py (the reference).
 *
 * Fast and still exact (instructions per element measured by scripts/bench_spike.py on Spike, before
 * and after, in docs/cost_model.md):
 *  - QuantizeLinear is one fdiv.s and one fcvt.w.s with the static rounding mode rne on RISC-V (inline
 *    asm: -ffast-math can neither turn the division into a multiplication by a reciprocal nor call a
 *    library rounding function); the int8 range test is one add and one branch, and saturation and NaN
 *    go out of line. Other targets run the same loops with portable C for those two operations.
 *  - Every float product or sum that NumPy rounds separately passes through O2G_KEEP, an empty asm that
 *    pins the value in a register: no FMA contraction, no reassociation, no volatile round trip.
 *  - Data movement (copy, fill, transpose, remap, gather, im2col, concat, clip) moves 64-bit words
 *    where the buffers allow, with a shift-merge path for mutually misaligned buffers.
 *  - Elementwise kernels walk the innermost contiguous run of merged dimensions. A function of one int8
 *    value over a long run (lut, clip, requantization, a binary op or an affine map with a constant
 *    operand) becomes a 256-entry table: one load per element.
 */
#include "o2g_runtime.h"

#include <math.h>

/* ---- compiler and target ------------------------------------------------------------------------ */

#if defined(__GNUC__) || defined(__clang__)
#define O2G_INLINE static inline __attribute__((always_inline))
#define O2G_COLD __attribute__((noinline, cold))
#define O2G_NOINLINE __attribute__((noinline))
#define O2G_UNLIKELY(c) __builtin_expect(!!(c), 0)
#else
#define O2G_INLINE static inline
#define O2G_COLD
#define O2G_NOINLINE
#define O2G_UNLIKELY(c) (c)
#endif

/* 64-bit word moves (may_alias: the buffers are int8_t arrays), little-endian byte lanes. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define O2G_WORDS 1
typedef uint64_t __attribute__((may_alias)) o2g_word;
#define O2G_ALIGNED8(p) ((((uintptr_t)(p)) & 7u) == 0)
#else
#define O2G_WORDS 0
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__riscv) && defined(__riscv_flen) && __riscv_flen >= 32
#define O2G_RV_FLOAT 1
#else
#define O2G_RV_FLOAT 0
#endif

/* O2G_KEEP(v): v is used as rounded here, never fused into an FMA or reassociated (costs nothing). */
#if O2G_RV_FLOAT
#define O2G_KEEP(v) __asm__("" : "+f"(v))
#elif (defined(__GNUC__) || defined(__clang__)) && \
    (defined(__x86_64__) || (defined(__i386__) && defined(__SSE2_MATH__)))
#define O2G_KEEP(v) __asm__("" : "+x"(v))
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
#define O2G_KEEP(v) __asm__("" : "+w"(v))
#else
static float o2g_keep(float v)
{
    volatile float t = v; /* also drops x87 excess precision */
    return t;
}
#define O2G_KEEP(v) ((v) = o2g_keep(v))
#endif

/* Functions of one int8 value over at least this many elements are applied as a 256-entry table. */
#define O2G_TABLE_MIN 512

/* ---- float primitives ---------------------------------------------------------------------------- */

O2G_INLINE uint32_t o2g_bits(float v)
{
    union {
        float f;
        uint32_t u;
    } c;
    c.f = v;
    return c.u;
}

/* NaN and infinity tests on the bits: -ffinite-math-only cannot fold them away. */
#define O2G_ISNAN(v) ((o2g_bits(v) & 0x7fffffffu) > 0x7f800000u)
#define O2G_ISINF(v) ((o2g_bits(v) & 0x7fffffffu) == 0x7f800000u)

/* a / b correctly rounded (round to nearest even): never a multiplication by a reciprocal. */
O2G_INLINE float o2g_fdiv(float a, float b)
{
#if O2G_RV_FLOAT
    float r;
    __asm__("fdiv.s %0, %1, %2, rne" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    volatile float divisor = b;
    float r = a / divisor;
    O2G_KEEP(r);
    return r;
#endif
}

#if !O2G_RV_FLOAT
/* fcvt.w.s with rm=rne in C, independent of the FP rounding mode and of -ffast-math:
 * y - trunc(y) is exact for |y| < 2^31. */
static long o2g_cvt_portable(float y)
{
    long t;
    float f;
    if (O2G_ISNAN(y) || y >= 2147483648.0f)
        return 2147483647L;
    if (y <= -2147483648.0f)
        return -2147483647L - 1;
    t = (long)y;
    f = y - (float)t;
    if (f > 0.5f || (f == 0.5f && (t & 1)))
        t += 1;
    else if (f < -0.5f || (f == -0.5f && (t & 1)))
        t -= 1;
    return t;
}
#endif

/* y rounded half to even to an integer, saturated to the int32 range, NaN -> INT32_MAX (fcvt.w.s). */
O2G_INLINE long o2g_cvt(float y)
{
#if O2G_RV_FLOAT
    long q;
    __asm__("fcvt.w.s %0, %1, rne" : "=r"(q) : "f"(y));
    return q;
#else
    return o2g_cvt_portable(y);
#endif
}

O2G_COLD static long o2g_sat_slow(long q, float y, long lo)
{
    if (O2G_ISNAN(y))
        return lo;
    if (q > 127)
        q = 127;
    if (q < lo)
        q = lo;
    return q;
}

/* y rounded half to even and saturated to [lo, 127] (lo = -128, or 0 for a fused ReLU); NaN -> lo
 * (onnxruntime's x86 QuantizeLinear: max(NaN, lo) = lo). */
O2G_INLINE int8_t o2g_sat(float y, long lo)
{
    long q = o2g_cvt(y);
    if (O2G_UNLIKELY((unsigned long)(q - lo) > (unsigned long)(127 - lo)))
        q = o2g_sat_slow(q, y, lo);
    return (int8_t)q;
}

/* max(y rounded half to even, 0), as fcvt.wu.s with rm=rne gives it: negative -> 0, and above the
 * uint32 range or NaN -> all ones (sign-extended); only the rare q > 127 goes out of line. */
O2G_INLINE long o2g_cvt_u(float y)
{
#if O2G_RV_FLOAT
    long q;
    __asm__("fcvt.wu.s %0, %1, rne" : "=r"(q) : "f"(y));
    return q;
#else
    const long q = o2g_cvt_portable(y);
    return q < 0 ? 0 : q;
#endif
}

O2G_COLD static long o2g_sat_relu_slow(float y)
{
    return O2G_ISNAN(y) ? 0 : 127; /* q > 127 unsigned: y >= 127.5 or NaN */
}

/* y rounded half to even and saturated to [0, 127] (a fused ReLU); NaN -> 0. */
O2G_INLINE int8_t o2g_sat_relu(float y)
{
    long q = o2g_cvt_u(y);
    if (O2G_UNLIKELY((unsigned long)q > 127u))
        q = o2g_sat_relu_slow(y);
    return (int8_t)q;
}

/* o2g_sat(y, relu ? 0 : -128), each at its own cost. */
O2G_INLINE int8_t o2g_sat_act(float y, int relu)
{
    return relu ? o2g_sat_relu(y) : o2g_sat(y, -128);
}

/* ONNX QuantizeLinear of one value: float32 x / scale, round half to even, saturate; NaN -> -128. */
O2G_INLINE int8_t o2g_q(float x, float scale)
{
    return o2g_sat(o2g_fdiv(x, scale), -128);
}

/* DequantizeLinear: float32(x) * scale, rounded. */
O2G_INLINE float o2g_deq(int x, float scale)
{
    float f = (float)x * scale;
    O2G_KEEP(f);
    return f;
}

/* ---- data movement ------------------------------------------------------------------------------- */

static void o2g_copy(int8_t *d, const int8_t *s, size_t n)
{
#if O2G_WORDS
    if (n >= 32) {
        size_t k;
        while (!O2G_ALIGNED8(s)) {
            *d++ = *s++;
            n--;
        }
        k = (uintptr_t)d & 7u;
        if (k == 0) {
            const o2g_word *ws = (const o2g_word *)(const void *)s;
            o2g_word *wd = (o2g_word *)(void *)d;
            size_t w = n >> 3;
            for (; w >= 4; w -= 4, ws += 4, wd += 4) {
                const uint64_t a = ws[0], b = ws[1], c = ws[2], e = ws[3];
                wd[0] = a;
                wd[1] = b;
                wd[2] = c;
                wd[3] = e;
            }
            for (; w > 0; w--)
                *wd++ = *ws++;
            s = (const int8_t *)(const void *)ws;
            d = (int8_t *)(void *)wd;
            n &= 7;
        } else { /* s aligned, d k bytes past a word: store 8-k bytes, then merge pairs of source words */
            const o2g_word *ws = (const o2g_word *)(const void *)s;
            const size_t m = 8 - k, sr = 8 * m, sl = 8 * k;
            uint64_t prev = ws[0];
            o2g_word *wd;
            size_t j, done;
            for (j = 0; j < m; j++)
                d[j] = s[j];
            wd = (o2g_word *)(void *)(d + m);
            for (j = 1; 8 * j + 8 <= n; j++) {
                const uint64_t next = ws[j];
                *wd++ = (prev >> sr) | (next << sl);
                prev = next;
            }
            done = m + 8 * (j - 1);
            s += done;
            d += done;
            n -= done;
        }
    }
#endif
    for (; n >= 8; n -= 8, d += 8, s += 8) {
        const int8_t a = s[0], b = s[1], c = s[2], e = s[3], f = s[4], g = s[5], h = s[6], i = s[7];
        d[0] = a;
        d[1] = b;
        d[2] = c;
        d[3] = e;
        d[4] = f;
        d[5] = g;
        d[6] = h;
        d[7] = i;
    }
    for (; n > 0; n--)
        *d++ = *s++;
}

static void o2g_fill(int8_t *d, int8_t v, size_t n)
{
#if O2G_WORDS
    if (n >= 16) {
        const uint64_t w = (uint64_t)(uint8_t)v * 0x0101010101010101ull;
        o2g_word *wd;
        while (!O2G_ALIGNED8(d)) {
            *d++ = v;
            n--;
        }
        wd = (o2g_word *)(void *)d;
        for (; n >= 32; n -= 32, wd += 4) {
            wd[0] = w;
            wd[1] = w;
            wd[2] = w;
            wd[3] = w;
        }
        for (; n >= 8; n -= 8)
            *wd++ = w;
        d = (int8_t *)(void *)wd;
    }
#endif
    for (; n > 0; n--)
        *d++ = v;
}

/* y[i] = t[x[i]], t = table + 128: one table load per element. */
static void o2g_lut_run(const int8_t *x, int8_t *y, size_t n, const int8_t *t)
{
    int8_t *const end = y + (n & ~(size_t)15);
    while (y < end) {
        y[0] = t[x[0]];
        y[1] = t[x[1]];
        y[2] = t[x[2]];
        y[3] = t[x[3]];
        y[4] = t[x[4]];
        y[5] = t[x[5]];
        y[6] = t[x[6]];
        y[7] = t[x[7]];
        y[8] = t[x[8]];
        y[9] = t[x[9]];
        y[10] = t[x[10]];
        y[11] = t[x[11]];
        y[12] = t[x[12]];
        y[13] = t[x[13]];
        y[14] = t[x[14]];
        y[15] = t[x[15]];
        x += 16;
        y += 16;
    }
    for (n &= 15; n > 0; n--)
        *y++ = t[*x++];
}

/* -128, -127, .., 127: table + 128 maps every int8 onto itself */
static const int8_t o2g_identity[256] = {
    -128, -127, -126, -125, -124, -123, -122, -121, -120, -119, -118, -117, -116, -115, -114, -113,
    -112, -111, -110, -109, -108, -107, -106, -105, -104, -103, -102, -101, -100, -99, -98, -97,
    -96, -95, -94, -93, -92, -91, -90, -89, -88, -87, -86, -85, -84, -83, -82, -81,
    -80, -79, -78, -77, -76, -75, -74, -73, -72, -71, -70, -69, -68, -67, -66, -65,
    -64, -63, -62, -61, -60, -59, -58, -57, -56, -55, -54, -53, -52, -51, -50, -49,
    -48, -47, -46, -45, -44, -43, -42, -41, -40, -39, -38, -37, -36, -35, -34, -33,
    -32, -31, -30, -29, -28, -27, -26, -25, -24, -23, -22, -21, -20, -19, -18, -17,
    -16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
    32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
    80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
    96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127,
};

#if O2G_WORDS
/* Lane masks: 0xff in every lane whose top bit is set in `top` (top & 0x80.. only). */
O2G_INLINE uint64_t o2g_lanes(uint64_t top)
{
    return (top - (top >> 7)) | top;
}

/* clip of 8 int8 lanes to [lo, hi] with 0 <= lo <= hi <= 127: a ReLU, then (after it every lane is in
 * [0, 127], so adding at most 128 never carries into the next lane) the bounds that are not no-ops. */
O2G_INLINE uint64_t o2g_clip8(uint64_t w, int with_hi, int with_lo, uint64_t to_hi, uint64_t hi_w,
                              uint64_t to_lo, uint64_t lo_w)
{
    const uint64_t high = 0x8080808080808080ull;
    w &= ~o2g_lanes(w & high);
    if (with_hi) /* lanes above hi */
        w ^= (w ^ hi_w) & o2g_lanes((w + to_hi) & high);
    if (with_lo) /* lanes below lo */
        w ^= (w ^ lo_w) & o2g_lanes(((w + to_lo) & high) ^ high);
    return w;
}

O2G_INLINE void o2g_clip_words(const o2g_word *x, o2g_word *y, size_t words, int with_hi, int with_lo,
                               int hi, int lo)
{
    const uint64_t ones = 0x0101010101010101ull;
    const uint64_t to_hi = (uint64_t)(127 - hi) * ones, hi_w = (uint64_t)hi * ones;
    const uint64_t to_lo = (uint64_t)(128 - lo) * ones, lo_w = (uint64_t)lo * ones;
    for (; words >= 2; words -= 2, x += 2, y += 2) {
        const uint64_t a = x[0], b = x[1];
        y[0] = o2g_clip8(a, with_hi, with_lo, to_hi, hi_w, to_lo, lo_w);
        y[1] = o2g_clip8(b, with_hi, with_lo, to_hi, hi_w, to_lo, lo_w);
    }
    if (words)
        y[0] = o2g_clip8(x[0], with_hi, with_lo, to_hi, hi_w, to_lo, lo_w);
}
#endif

/* y = min(max(x, lo), hi), -128 <= lo <= hi <= 127 */
static void o2g_clip_run(const int8_t *x, int8_t *y, size_t count, int lo, int hi)
{
    int8_t table[256];
    int v;
    if (lo == -128 && hi == 127) {
        o2g_copy(y, x, count);
        return;
    }
#if O2G_WORDS
    if (lo >= 0 && (((uintptr_t)x ^ (uintptr_t)y) & 7u) == 0) {
        size_t words;
        for (; count > 0 && !O2G_ALIGNED8(y); count--) {
            v = *x++;
            *y++ = (int8_t)(v < lo ? lo : v > hi ? hi : v);
        }
        words = count >> 3;
        if (hi < 127 && lo > 0)
            o2g_clip_words((const o2g_word *)(const void *)x, (o2g_word *)(void *)y, words, 1, 1, hi, lo);
        else if (hi < 127)
            o2g_clip_words((const o2g_word *)(const void *)x, (o2g_word *)(void *)y, words, 1, 0, hi, lo);
        else if (lo > 0)
            o2g_clip_words((const o2g_word *)(const void *)x, (o2g_word *)(void *)y, words, 0, 1, hi, lo);
        else
            o2g_clip_words((const o2g_word *)(const void *)x, (o2g_word *)(void *)y, words, 0, 0, hi, lo);
        x += words * 8;
        y += words * 8;
        count &= 7;
    }
#endif
    if (count >= 64) { /* [lo .. lo, lo .. hi, hi .. hi] */
        o2g_fill(table, (int8_t)lo, (size_t)(lo + 128));
        o2g_copy(table + lo + 128, o2g_identity + lo + 128, (size_t)(hi - lo + 1));
        o2g_fill(table + hi + 129, (int8_t)hi, (size_t)(127 - hi));
        o2g_lut_run(x, y, count, table + 128);
        return;
    }
    for (; count > 0; count--) {
        v = *x++;
        *y++ = (int8_t)(v < lo ? lo : v > hi ? hi : v);
    }
}

/* ---- quantize ------------------------------------------------------------------------------------ */

void o2g_quantize(const float *x, int8_t *y, size_t count, float scale)
{
    int8_t *const end = y + (count & ~(size_t)7);
    while (y < end) {
        y[0] = o2g_q(x[0], scale);
        y[1] = o2g_q(x[1], scale);
        y[2] = o2g_q(x[2], scale);
        y[3] = o2g_q(x[3], scale);
        y[4] = o2g_q(x[4], scale);
        y[5] = o2g_q(x[5], scale);
        y[6] = o2g_q(x[6], scale);
        y[7] = o2g_q(x[7], scale);
        x += 8;
        y += 8;
    }
    for (count &= 7; count > 0; count--)
        *y++ = o2g_q(*x++, scale);
}

void o2g_quantize_nchw_to_nhwc(const float *x, int8_t *y, int batches, int channels,
                               int rows, int cols, float scale)
{
    const size_t plane = (size_t)rows * (size_t)cols, c_n = (size_t)channels;
    int b;
    if (batches <= 0 || channels <= 0 || rows <= 0 || cols <= 0)
        return;
    if (channels == 1) {
        o2g_quantize(x, y, (size_t)batches * plane, scale);
        return;
    }
    for (b = 0; b < batches; b++, x += c_n * plane, y += c_n * plane) {
        size_t p = 0, c;
        if (channels == 3) { /* images: three planes walked together */
            const float *p0 = x, *p1 = x + plane, *p2 = x + 2 * plane;
            int8_t *q = y, *const end = y + 3 * (plane & ~(size_t)3);
            while (q < end) {
                q[0] = o2g_q(p0[0], scale);
                q[1] = o2g_q(p1[0], scale);
                q[2] = o2g_q(p2[0], scale);
                q[3] = o2g_q(p0[1], scale);
                q[4] = o2g_q(p1[1], scale);
                q[5] = o2g_q(p2[1], scale);
                q[6] = o2g_q(p0[2], scale);
                q[7] = o2g_q(p1[2], scale);
                q[8] = o2g_q(p2[2], scale);
                q[9] = o2g_q(p0[3], scale);
                q[10] = o2g_q(p1[3], scale);
                q[11] = o2g_q(p2[3], scale);
                p0 += 4;
                p1 += 4;
                p2 += 4;
                q += 12;
            }
            p = plane & ~(size_t)3;
        } else { /* four pixels at a time, one channel plane after the other */
            for (; p + 4 <= plane; p += 4) {
                const float *xc = x + p;
                int8_t *yc = y + p * c_n;
                for (c = 0; c < c_n; c++, xc += plane, yc++) {
                    const float v0 = xc[0], v1 = xc[1], v2 = xc[2], v3 = xc[3];
                    yc[0] = o2g_q(v0, scale);
                    yc[c_n] = o2g_q(v1, scale);
                    yc[2 * c_n] = o2g_q(v2, scale);
                    yc[3 * c_n] = o2g_q(v3, scale);
                }
            }
        }
        for (; p < plane; p++)
            for (c = 0; c < c_n; c++)
                y[p * c_n + c] = o2g_q(x[c * plane + p], scale);
    }
}

void o2g_dequantize(const int8_t *x, float *y, size_t count, float scale)
{
    float *const end = y + (count & ~(size_t)7);
    while (y < end) {
        const int x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3], x4 = x[4], x5 = x[5], x6 = x[6], x7 = x[7];
        y[0] = (float)x0 * scale;
        y[1] = (float)x1 * scale;
        y[2] = (float)x2 * scale;
        y[3] = (float)x3 * scale;
        y[4] = (float)x4 * scale;
        y[5] = (float)x5 * scale;
        y[6] = (float)x6 * scale;
        y[7] = (float)x7 * scale;
        x += 8;
        y += 8;
    }
    for (count &= 7; count > 0; count--)
        *y++ = (float)*x++ * scale;
}

void o2g_dequantize_nhwc_to_nchw(const int8_t *x, float *y, int batches, int channels, int rows, int cols,
                                 float scale)
{
    const size_t plane = (size_t)rows * (size_t)cols, c_n = (size_t)channels;
    size_t p, c;
    int b;
    if (batches <= 0 || channels <= 0 || rows <= 0 || cols <= 0)
        return;
    if (channels == 1) {
        o2g_dequantize(x, y, (size_t)batches * plane, scale);
        return;
    }
    for (b = 0; b < batches; b++, x += c_n * plane, y += c_n * plane) {
        if (channels == 3) { /* images: three planes written together */
            float *p0 = y, *p1 = y + plane, *p2 = y + 2 * plane;
            const int8_t *q = x;
            for (p = 0; p < plane; p++, q += 3) {
                const int v0 = q[0], v1 = q[1], v2 = q[2];
                p0[p] = (float)v0 * scale;
                p1[p] = (float)v1 * scale;
                p2[p] = (float)v2 * scale;
            }
            continue;
        }
        for (p = 0; p < plane; p++) {
            const int8_t *q = x + p * c_n;
            float *yc = y + p;
            for (c = 0; c < c_n; c++, yc += plane)
                *yc = (float)q[c] * scale;
        }
    }
}

/* ---- transpose ----------------------------------------------------------------------------------- */

#if O2G_WORDS
/* An 8x8 block of bytes transposed in registers: rows of x (stride sx) become columns of y
 * (rows of stride sy); x, y, sx and sy multiples of 8. */
static void o2g_transpose8x8(const int8_t *x, size_t sx, int8_t *y, size_t sy)
{
    uint64_t w0, w1, w2, w3, w4, w5, w6, w7, t;
    w0 = *(const o2g_word *)(const void *)x;
    w1 = *(const o2g_word *)(const void *)(x + sx);
    w2 = *(const o2g_word *)(const void *)(x + 2 * sx);
    w3 = *(const o2g_word *)(const void *)(x + 3 * sx);
    x += 4 * sx;
    w4 = *(const o2g_word *)(const void *)x;
    w5 = *(const o2g_word *)(const void *)(x + sx);
    w6 = *(const o2g_word *)(const void *)(x + 2 * sx);
    w7 = *(const o2g_word *)(const void *)(x + 3 * sx);
#define O2G_SWAP(a, b, s, m) (t = (((a) >> (s)) ^ (b)) & (m), (b) ^= t, (a) ^= t << (s))
    O2G_SWAP(w0, w1, 8, 0x00FF00FF00FF00FFull);
    O2G_SWAP(w2, w3, 8, 0x00FF00FF00FF00FFull);
    O2G_SWAP(w4, w5, 8, 0x00FF00FF00FF00FFull);
    O2G_SWAP(w6, w7, 8, 0x00FF00FF00FF00FFull);
    O2G_SWAP(w0, w2, 16, 0x0000FFFF0000FFFFull);
    O2G_SWAP(w1, w3, 16, 0x0000FFFF0000FFFFull);
    O2G_SWAP(w4, w6, 16, 0x0000FFFF0000FFFFull);
    O2G_SWAP(w5, w7, 16, 0x0000FFFF0000FFFFull);
    O2G_SWAP(w0, w4, 32, 0x00000000FFFFFFFFull);
    O2G_SWAP(w1, w5, 32, 0x00000000FFFFFFFFull);
    O2G_SWAP(w2, w6, 32, 0x00000000FFFFFFFFull);
    O2G_SWAP(w3, w7, 32, 0x00000000FFFFFFFFull);
#undef O2G_SWAP
    *(o2g_word *)(void *)y = w0;
    *(o2g_word *)(void *)(y + sy) = w1;
    *(o2g_word *)(void *)(y + 2 * sy) = w2;
    *(o2g_word *)(void *)(y + 3 * sy) = w3;
    y += 4 * sy;
    *(o2g_word *)(void *)y = w4;
    *(o2g_word *)(void *)(y + sy) = w5;
    *(o2g_word *)(void *)(y + 2 * sy) = w6;
    *(o2g_word *)(void *)(y + 3 * sy) = w7;
}
#endif

/* y[a * ty + b] = x[b * sx + a] for a < na, b < nb: a 2-D transpose (x's rows of length na are
 * contiguous, so are y's rows of length nb). */
static void o2g_transpose2d(const int8_t *x, size_t sx, size_t na, int8_t *y, size_t ty, size_t nb)
{
    size_t a0 = 0, a, b;
#if O2G_WORDS
    if (na >= 8 && nb >= 8 && O2G_ALIGNED8(x) && O2G_ALIGNED8(y) && sx % 8 == 0 && ty % 8 == 0) {
        for (; a0 + 8 <= na; a0 += 8) {
            for (b = 0; b + 8 <= nb; b += 8)
                o2g_transpose8x8(x + b * sx + a0, sx, y + a0 * ty + b, ty);
            for (; b < nb; b++) /* the last rows of x, fewer than 8 */
                for (a = a0; a < a0 + 8; a++)
                    y[a * ty + b] = x[b * sx + a];
        }
    }
#endif
    if (ty == nb && nb <= 4 && nb >= 2) { /* y is contiguous: interleave nb rows of x */
        const int8_t *x0 = x + a0, *x1 = x0 + sx, *x2 = x1 + sx, *x3 = x2 + sx;
        int8_t *q = y + a0 * ty;
        size_t left = na - a0;
        if (nb == 2) {
            for (; left >= 4; left -= 4, x0 += 4, x1 += 4, q += 8) {
                const int8_t v0 = x0[0], v1 = x1[0], v2 = x0[1], v3 = x1[1];
                const int8_t v4 = x0[2], v5 = x1[2], v6 = x0[3], v7 = x1[3];
                q[0] = v0;
                q[1] = v1;
                q[2] = v2;
                q[3] = v3;
                q[4] = v4;
                q[5] = v5;
                q[6] = v6;
                q[7] = v7;
            }
            for (; left > 0; left--, q += 2) {
                const int8_t v0 = *x0++, v1 = *x1++;
                q[0] = v0;
                q[1] = v1;
            }
        } else if (nb == 3) {
            for (; left >= 2; left -= 2, x0 += 2, x1 += 2, x2 += 2, q += 6) {
                const int8_t v0 = x0[0], v1 = x1[0], v2 = x2[0], v3 = x0[1], v4 = x1[1], v5 = x2[1];
                q[0] = v0;
                q[1] = v1;
                q[2] = v2;
                q[3] = v3;
                q[4] = v4;
                q[5] = v5;
            }
            if (left) {
                q[0] = *x0;
                q[1] = *x1;
                q[2] = *x2;
            }
        } else {
            for (; left >= 2; left -= 2, x0 += 2, x1 += 2, x2 += 2, x3 += 2, q += 8) {
                const int8_t v0 = x0[0], v1 = x1[0], v2 = x2[0], v3 = x3[0];
                const int8_t v4 = x0[1], v5 = x1[1], v6 = x2[1], v7 = x3[1];
                q[0] = v0;
                q[1] = v1;
                q[2] = v2;
                q[3] = v3;
                q[4] = v4;
                q[5] = v5;
                q[6] = v6;
                q[7] = v7;
            }
            if (left) {
                q[0] = *x0;
                q[1] = *x1;
                q[2] = *x2;
                q[3] = *x3;
            }
        }
        return;
    }
    if (na - a0 >= nb) { /* scatter: contiguous reads along a, stride-ty writes */
        for (b = 0; b < nb; b++) {
            const int8_t *xr = x + b * sx + a0;
            int8_t *yc = y + a0 * ty + b;
            size_t left = na - a0;
            for (; left >= 4; left -= 4, xr += 4, yc += 4 * ty) {
                const int8_t v0 = xr[0], v1 = xr[1], v2 = xr[2], v3 = xr[3];
                yc[0] = v0;
                yc[ty] = v1;
                yc[2 * ty] = v2;
                yc[3 * ty] = v3;
            }
            for (; left > 0; left--, xr++, yc += ty)
                *yc = *xr;
        }
    } else { /* gather: stride-sx reads, contiguous writes along b */
        for (a = a0; a < na; a++) {
            const int8_t *xc = x + a;
            int8_t *yr = y + a * ty;
            size_t left = nb;
            for (; left >= 4; left -= 4, xc += 4 * sx, yr += 4) {
                const int8_t v0 = xc[0], v1 = xc[sx], v2 = xc[2 * sx], v3 = xc[3 * sx];
                yr[0] = v0;
                yr[1] = v1;
                yr[2] = v2;
                yr[3] = v3;
            }
            for (; left > 0; left--, xc += sx)
                *yr++ = *xc;
        }
    }
}

void o2g_transpose(const int8_t *x, int8_t *y, int rank, const int *shape, const int *perm)
{
    /* output dims after dropping size-1 dims and merging dims that stay adjacent: n[d] elements,
     * input stride st[d], output stride ost[d] */
    size_t in_stride[O2G_MAX_RANK], n[O2G_MAX_RANK], st[O2G_MAX_RANK], ost[O2G_MAX_RANK];
    size_t idx[O2G_MAX_RANK], count = 1, ox = 0, oy = 0, block;
    int r = 0, d, j = -1;

    if (rank < 1 || rank > O2G_MAX_RANK)
        return;
    for (d = rank - 1; d >= 0; d--) {
        in_stride[d] = count;
        count *= (size_t)shape[d];
    }
    if (count == 0)
        return;
    for (d = 0; d < rank; d++) {
        const size_t size = (size_t)shape[perm[d]], s = in_stride[perm[d]];
        if (size == 1)
            continue;
        if (r > 0 && st[r - 1] == s * size) {
            n[r - 1] *= size;
            st[r - 1] = s;
        } else {
            n[r] = size;
            st[r] = s;
            r++;
        }
    }
    if (r == 0) {
        y[0] = x[0];
        return;
    }
    ost[r - 1] = 1;
    for (d = r - 2; d >= 0; d--)
        ost[d] = ost[d + 1] * n[d + 1];
    for (d = 0; d < r; d++) {
        idx[d] = 0;
        if (st[d] == 1)
            j = d;
    }
    if (j < 0) /* cannot happen: the innermost input dim keeps stride 1 */
        return;
    if (j == r - 1) { /* the output's rows are contiguous in x: copies */
        block = n[r - 1];
        for (;;) {
            o2g_copy(y + oy, x + ox, block);
            for (d = r - 2; d >= 0; d--) {
                ox += st[d];
                oy += ost[d];
                if (++idx[d] < n[d])
                    break;
                ox -= st[d] * n[d];
                oy -= ost[d] * n[d];
                idx[d] = 0;
            }
            if (d < 0)
                return;
        }
    }
    for (;;) { /* 2-D transposes of dims j (contiguous in x) and r-1 (contiguous in y) */
        o2g_transpose2d(x + ox, st[r - 1], n[j], y + oy, ost[j], n[r - 1]);
        for (d = r - 2; d >= 0; d--) {
            if (d == j)
                continue;
            ox += st[d];
            oy += ost[d];
            if (++idx[d] < n[d])
                break;
            ox -= st[d] * n[d];
            oy -= ost[d] * n[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* ---- windows --------------------------------------------------------------------------------------- */

/* The window positions k < kernel whose input position start + k * dilation lies in [0, size):
 * [*lo, *hi), empty when *lo == *hi. */
static void o2g_tap_range(int start, int kernel, int dilation, int size, int *lo, int *hi)
{
    int a = 0, b = kernel;
    if (dilation < 1)
        dilation = 1;
    if (start < 0)
        a = (-start + dilation - 1) / dilation;
    if (start + (kernel - 1) * dilation >= size)
        b = size - 1 - start < 0 ? 0 : (size - 1 - start) / dilation + 1;
    if (a > kernel)
        a = kernel;
    *lo = a;
    *hi = b < a ? a : b;
}

void o2g_im2col(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                const struct o2g_window *w)
{
    const struct o2g_window win = *w; /* in registers: y's stores could alias *w */
    const size_t c_n = (size_t)channels, row_bytes = (size_t)cols * c_n;
    const size_t patch_row = (size_t)win.kernel_cols * c_n; /* bytes of one kernel row of a patch */
    int b, orow, ocol, kr, kc;
    for (b = 0; b < batches; b++) {
        const int8_t *xb = x + (size_t)b * (size_t)rows * row_bytes;
        for (orow = 0; orow < win.out_rows; orow++) {
            const int ir0 = orow * win.stride_rows - win.pad_top;
            for (ocol = 0; ocol < win.out_cols; ocol++) {
                const int ic0 = ocol * win.stride_cols - win.pad_left;
                int c0, c1;
                o2g_tap_range(ic0, win.kernel_cols, win.dilation_cols, cols, &c0, &c1);
                for (kr = 0; kr < win.kernel_rows; kr++, y += patch_row) {
                    const int ir = ir0 + kr * win.dilation_rows;
                    const int8_t *xr;
                    if (ir < 0 || ir >= rows || c0 == c1) {
                        o2g_fill(y, 0, patch_row);
                        continue;
                    }
                    xr = xb + (size_t)ir * row_bytes;
                    if (win.dilation_cols == 1) { /* the valid taps of a kernel row are one run */
                        o2g_fill(y, 0, (size_t)c0 * c_n);
                        o2g_copy(y + (size_t)c0 * c_n, xr + (size_t)(ic0 + c0) * c_n, (size_t)(c1 - c0) * c_n);
                        o2g_fill(y + (size_t)c1 * c_n, 0, (size_t)(win.kernel_cols - c1) * c_n);
                    } else {
                        for (kc = 0; kc < win.kernel_cols; kc++) {
                            if (kc < c0 || kc >= c1)
                                o2g_fill(y + (size_t)kc * c_n, 0, c_n);
                            else
                                o2g_copy(y + (size_t)kc * c_n, xr + (size_t)(ic0 + kc * win.dilation_cols) * c_n, c_n);
                        }
                    }
                }
            }
        }
    }
}

#if O2G_WORDS
/* Lane-wise signed max of 8 int8 in a word (SWAR, 14 operations). */
O2G_INLINE uint64_t o2g_max8(uint64_t a, uint64_t b)
{
    const uint64_t high = 0x8080808080808080ull, low = 0x7f7f7f7f7f7f7f7full;
    const uint64_t x = a ^ b;
    const uint64_t d = (a | high) - (b & low);          /* lane top bit: a & 0x7f >= b & 0x7f */
    const uint64_t ge = ((x & b) | (d & ~x)) & high;    /* lane top bit: a >= b (signed) */
    const uint64_t full = (ge - (ge >> 7)) | ge;
    return b ^ (x & full);
}
#endif

/* y[c] = max over nr x nc taps (tap (i, j) at base + i * rs + j * cs) of the tap's channel c.
 * Not inlined: on its own its loop keeps every constant in a register. */
O2G_NOINLINE static void o2g_max_taps(const int8_t *base, int8_t *y, size_t c_n, int nr, int nc, size_t rs, size_t cs)
{
    size_t c = 0;
    int i, j;
#if O2G_WORDS
    if (O2G_ALIGNED8(base) && O2G_ALIGNED8(y) && rs % 8 == 0 && cs % 8 == 0)
        for (; c + 8 <= c_n; c += 8) {
            const int8_t *pr = base + c;
            uint64_t m = *(const o2g_word *)(const void *)pr;
            for (i = 0; i < nr; i++, pr += rs) {
                const int8_t *p = pr;
                for (j = 0; j < nc; j++, p += cs)
                    m = o2g_max8(m, *(const o2g_word *)(const void *)p);
            }
            *(o2g_word *)(void *)(y + c) = m;
        }
#endif
    for (; c < c_n; c++) {
        const int8_t *pr = base + c;
        int m = *pr;
        for (i = 0; i < nr; i++, pr += rs) {
            const int8_t *p = pr;
            for (j = 0; j < nc; j++, p += cs)
                if (*p > m)
                    m = *p;
        }
        y[c] = (int8_t)m;
    }
}

void o2g_maxpool(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                 const struct o2g_window *w)
{
    const struct o2g_window win = *w; /* in registers: y's stores could alias *w */
    const size_t c_n = (size_t)channels, row_bytes = (size_t)cols * c_n;
    const size_t rs = (size_t)win.dilation_rows * row_bytes, cs = (size_t)win.dilation_cols * c_n;
    int b, orow, ocol;
    for (b = 0; b < batches; b++) {
        const int8_t *xb = x + (size_t)b * (size_t)rows * row_bytes;
        for (orow = 0; orow < win.out_rows; orow++) {
            const int ir0 = orow * win.stride_rows - win.pad_top;
            int r0, r1;
            o2g_tap_range(ir0, win.kernel_rows, win.dilation_rows, rows, &r0, &r1);
            for (ocol = 0; ocol < win.out_cols; ocol++, y += c_n) {
                const int ic0 = ocol * win.stride_cols - win.pad_left;
                int c0, c1;
                o2g_tap_range(ic0, win.kernel_cols, win.dilation_cols, cols, &c0, &c1);
                if (r0 == r1 || c0 == c1) { /* only padding: -128 */
                    o2g_fill(y, -128, c_n);
                    continue;
                }
                o2g_max_taps(xb + (size_t)(ir0 + r0 * win.dilation_rows) * row_bytes +
                             (size_t)(ic0 + c0 * win.dilation_cols) * c_n, y, c_n, r1 - r0, c1 - c0, rs, cs);
            }
        }
    }
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

/* int32 sum / count as float32 division (the emulator's), rounded half to even; count 0 -> 0.
 * |sum| <= 128 * count < 2^24 for the windows the emitter allows, so float32(sum) is exact. */
O2G_INLINE int8_t o2g_avg(int32_t sum, float count)
{
    return count > 0.0f ? o2g_sat(o2g_fdiv((float)sum, count), -128) : 0;
}

void o2g_avgpool(const int8_t *x, int8_t *y, int batches, int rows, int cols, int channels,
                 const struct o2g_window *w, int count_include_pad)
{
    const struct o2g_window win = *w; /* in registers: y's stores could alias *w */
    const size_t c_n = (size_t)channels, row_bytes = (size_t)cols * c_n;
    const size_t rs = (size_t)win.dilation_rows * row_bytes, cs = (size_t)win.dilation_cols * c_n;
    int b, orow, ocol, i, j;
    for (b = 0; b < batches; b++) {
        const int8_t *xb = x + (size_t)b * (size_t)rows * row_bytes;
        for (orow = 0; orow < win.out_rows; orow++) {
            const int ir0 = orow * win.stride_rows - win.pad_top;
            const int nr = o2g_avg_count(orow, win.kernel_rows, win.stride_rows, win.dilation_rows,
                                         win.pad_top, win.pad_bottom, rows, count_include_pad);
            int r0, r1;
            o2g_tap_range(ir0, win.kernel_rows, win.dilation_rows, rows, &r0, &r1);
            for (ocol = 0; ocol < win.out_cols; ocol++, y += c_n) {
                const int ic0 = ocol * win.stride_cols - win.pad_left;
                const int nc = o2g_avg_count(ocol, win.kernel_cols, win.stride_cols, win.dilation_cols,
                                             win.pad_left, win.pad_right, cols, count_include_pad);
                const float count = (float)(nr * nc);
                const int8_t *base;
                int c0, c1;
                size_t c = 0;
                o2g_tap_range(ic0, win.kernel_cols, win.dilation_cols, cols, &c0, &c1);
                if (r0 == r1 || c0 == c1) { /* only padding: the sum is 0 */
                    for (c = 0; c < c_n; c++)
                        y[c] = o2g_avg(0, count);
                    continue;
                }
                base = xb + (size_t)(ir0 + r0 * win.dilation_rows) * row_bytes + (size_t)(ic0 + c0 * win.dilation_cols) * c_n;
                for (; c + 8 <= c_n; c += 8) { /* eight channels summed in registers */
                    const int8_t *pr = base + c;
                    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
                    for (i = r0; i < r1; i++, pr += rs) {
                        const int8_t *p = pr;
                        for (j = c0; j < c1; j++, p += cs) {
                            s0 += p[0];
                            s1 += p[1];
                            s2 += p[2];
                            s3 += p[3];
                            s4 += p[4];
                            s5 += p[5];
                            s6 += p[6];
                            s7 += p[7];
                        }
                    }
                    y[c] = o2g_avg(s0, count);
                    y[c + 1] = o2g_avg(s1, count);
                    y[c + 2] = o2g_avg(s2, count);
                    y[c + 3] = o2g_avg(s3, count);
                    y[c + 4] = o2g_avg(s4, count);
                    y[c + 5] = o2g_avg(s5, count);
                    y[c + 6] = o2g_avg(s6, count);
                    y[c + 7] = o2g_avg(s7, count);
                }
                for (; c < c_n; c++) {
                    const int8_t *pr = base + c;
                    int32_t s = 0;
                    for (i = r0; i < r1; i++, pr += rs) {
                        const int8_t *p = pr;
                        for (j = c0; j < c1; j++, p += cs)
                            s += *p;
                    }
                    y[c] = o2g_avg(s, count);
                }
            }
        }
    }
}

/* ---- clip and lookup tables ------------------------------------------------------------------------- */

void o2g_clip(const int8_t *x, int8_t *y, size_t count, int lo, int hi)
{
    if (lo > hi) /* min(max(v, lo), hi) = hi */
        lo = hi;
    lo = lo < -128 ? -128 : lo > 127 ? 127 : lo;
    hi = hi < -128 ? -128 : hi > 127 ? 127 : hi;
    o2g_clip_run(x, y, count, lo, hi);
}

void o2g_lut(const int8_t *x, int8_t *y, size_t count, const int8_t *table)
{
    o2g_lut_run(x, y, count, table + 128);
}

/* one model output per call, not a hot path: a plain loop */
void o2g_lut_f32(const int8_t *x, float *y, size_t count, const float *table)
{
    size_t k;
    for (k = 0; k < count; k++)
        y[k] = table[x[k] + 128];
}

/* ---- sums in NumPy's order ------------------------------------------------------------------------- */

/* float32 values produced on demand: ARRAY f[k]; TABLE t[x[k]] (t = table + 128); DEQ x[k] * scale;
 * SQDEV (x[k] * scale - shift)^2, each operation rounded. */
enum { O2G_ARRAY, O2G_TABLE, O2G_DEQ, O2G_SQDEV };
struct o2g_values {
    const int8_t *x;
    const float *f;
    float scale, shift;
    int kind;
};

O2G_INLINE float o2g_value(const struct o2g_values *v, int kind, size_t k)
{
    float r, d;
    switch (kind) {
    case O2G_ARRAY:
        return v->f[k];
    case O2G_TABLE:
        return v->f[v->x[k]];
    case O2G_DEQ:
        return o2g_deq(v->x[k], v->scale);
    default:
        d = o2g_deq(v->x[k], v->scale) - v->shift;
        O2G_KEEP(d);
        r = d * d;
        O2G_KEEP(r);
        return r;
    }
}

/* NumPy's pairwise block of n <= 128 values: 8 accumulators, combined pairwise, then the rest. */
O2G_INLINE float o2g_block_sum(const struct o2g_values *v, int kind, size_t start, size_t n)
{
    float r0, r1, r2, r3, r4, r5, r6, r7, res;
    size_t i;
    if (n < 8) {
        res = -0.0f;
        for (i = 0; i < n; i++) {
            res += o2g_value(v, kind, start + i);
            O2G_KEEP(res);
        }
        return res;
    }
    r0 = o2g_value(v, kind, start);
    r1 = o2g_value(v, kind, start + 1);
    r2 = o2g_value(v, kind, start + 2);
    r3 = o2g_value(v, kind, start + 3);
    r4 = o2g_value(v, kind, start + 4);
    r5 = o2g_value(v, kind, start + 5);
    r6 = o2g_value(v, kind, start + 6);
    r7 = o2g_value(v, kind, start + 7);
    for (i = 8; i < n - (n % 8); i += 8) {
        r0 += o2g_value(v, kind, start + i);
        r1 += o2g_value(v, kind, start + i + 1);
        r2 += o2g_value(v, kind, start + i + 2);
        r3 += o2g_value(v, kind, start + i + 3);
        r4 += o2g_value(v, kind, start + i + 4);
        r5 += o2g_value(v, kind, start + i + 5);
        r6 += o2g_value(v, kind, start + i + 6);
        r7 += o2g_value(v, kind, start + i + 7);
        O2G_KEEP(r0);
        O2G_KEEP(r1);
        O2G_KEEP(r2);
        O2G_KEEP(r3);
        O2G_KEEP(r4);
        O2G_KEEP(r5);
        O2G_KEEP(r6);
        O2G_KEEP(r7);
    }
    r0 += r1;
    r2 += r3;
    r4 += r5;
    r6 += r7;
    O2G_KEEP(r0);
    O2G_KEEP(r2);
    O2G_KEEP(r4);
    O2G_KEEP(r6);
    r0 += r2;
    r4 += r6;
    O2G_KEEP(r0);
    O2G_KEEP(r4);
    res = r0 + r4;
    O2G_KEEP(res);
    for (; i < n; i++) {
        res += o2g_value(v, kind, start + i);
        O2G_KEEP(res);
    }
    return res;
}

/* NumPy's pairwise summation of n float32 values (its reduction over a contiguous axis): blocks of
 * up to 128, larger runs split in two at a multiple of 8. */
static float o2g_pairwise(const struct o2g_values *v, size_t start, size_t n)
{
    if (n <= 128) {
        switch (v->kind) {
        case O2G_ARRAY:
            return o2g_block_sum(v, O2G_ARRAY, start, n);
        case O2G_TABLE:
            return o2g_block_sum(v, O2G_TABLE, start, n);
        case O2G_DEQ:
            return o2g_block_sum(v, O2G_DEQ, start, n);
        default:
            return o2g_block_sum(v, O2G_SQDEV, start, n);
        }
    } else {
        size_t n2 = n / 2;
        float a, b, s;
        n2 -= n2 % 8;
        a = o2g_pairwise(v, start, n2);
        b = o2g_pairwise(v, start + n2, n - n2);
        s = a + b;
        O2G_KEEP(s);
        return s;
    }
}

/* ---- softmax ---------------------------------------------------------------------------------------- */

#define O2G_SOFTMAX_BUF 256

/* exp(-d * in_scale): the exp of a value d steps below its row's largest (one rounding of an exact product),
 * as the emulator computes it. */
O2G_INLINE float o2g_softmax_exp(int d, float in_scale)
{
    float a = (float)-d * in_scale;
    O2G_KEEP(a);
    return expf(a);
}

/* Softmax of int8 rows. Every exp is exp(-d * in_scale) for d = (row's largest - value) in 0..255, so a call
 * of at least 256 values uses one table, filled up to the widest row seen so far (at most 256 exps in all); a
 * smaller call computes each value's exp (the same values either way). */
void o2g_softmax(const int8_t *x, int8_t *y, size_t outer, size_t axis_len, size_t inner,
                 float in_scale, float out_scale)
{
    float e[O2G_SOFTMAX_BUF], reversed[256]; /* reversed[255 - d] = exp(-d * in_scale) */
    int filled = 0;                          /* entries d < filled are in the table */
    const int table = outer * inner * axis_len >= 256 || axis_len > O2G_SOFTMAX_BUF;
    size_t o, i, k;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const int8_t *xs = x + o * axis_len * inner + i;
            int8_t *ys = y + o * axis_len * inner + i;
            struct o2g_values v;
            int top = -128, bottom = 127, t;
            float sum = 0.0f;
            for (k = 0; k < axis_len; k++) {
                t = xs[k * inner];
                top = t > top ? t : top;
                bottom = t < bottom ? t : bottom;
            }
            if (!table) {
                for (k = 0; k < axis_len; k++)
                    e[k] = o2g_softmax_exp(top - xs[k * inner], in_scale);
                v.f = e;
                v.kind = O2G_ARRAY;
            } else {
                for (; filled <= top - bottom; filled++)
                    reversed[255 - filled] = o2g_softmax_exp(filled, in_scale);
                v.f = reversed + 255 - top; /* v.f[x] = exp(-(top - x) * in_scale) */
                v.x = xs;
                v.kind = O2G_TABLE;
            }
            if (inner == 1) { /* NumPy's pairwise sum along a contiguous axis */
                sum = o2g_pairwise(&v, 0, axis_len);
            } else { /* in order along a strided one */
                for (k = 0; k < axis_len; k++) {
                    sum += v.kind == O2G_ARRAY ? e[k] : v.f[xs[k * inner]];
                    O2G_KEEP(sum);
                }
            }
            for (k = 0; k < axis_len; k++) {
                const float ek = v.kind == O2G_ARRAY ? e[k] : v.f[xs[k * inner]];
                ys[k * inner] = o2g_q(o2g_fdiv(ek, sum), out_scale);
            }
        }
}

/* One row of a masked softmax: values xs[k * stride] and keep[k * stride], k < n (0: masked, left out of the
 * largest value and the sum, output 0). exps[d] = exp(-d * in_scale) for d < *filled, filled as needed and
 * kept across rows (exps NULL: each exp computed alone, for calls of fewer than 256 values); e holds the row's exps (n <= O2G_MASKED_SOFTMAX_MAX). The sum follows o2g_softmax's
 * (NumPy's pairwise sum over a contiguous row, in order along a strided one; masked exps are 0). */
static void o2g_softmax_kept_row(const int8_t *xs, const int8_t *keep, int8_t *ys, size_t n, size_t stride,
                                 float *e, float *exps, int *filled, float in_scale, float out_scale)
{
    struct o2g_values v;
    int top = -128, d;
    float sum = 0.0f;
    size_t k;
    int any = 0;
    for (k = 0; k < n; k++)
        if (keep[k * stride]) {
            any = 1;
            if (xs[k * stride] > top)
                top = xs[k * stride];
        }
    for (k = 0; k < n; k++) {
        if (!any) { /* a row that keeps nothing is uniform */
            e[k] = 1.0f;
            continue;
        }
        if (!keep[k * stride]) {
            e[k] = 0.0f;
            continue;
        }
        d = top - xs[k * stride];
        if (exps == 0) {
            e[k] = o2g_softmax_exp(d, in_scale);
            continue;
        }
        for (; *filled <= d; ++*filled)
            exps[*filled] = o2g_softmax_exp(*filled, in_scale);
        e[k] = exps[d];
    }
    v.f = e;
    v.kind = O2G_ARRAY;
    if (stride == 1) {
        sum = o2g_pairwise(&v, 0, n);
    } else {
        for (k = 0; k < n; k++) {
            sum += e[k];
            O2G_KEEP(sum);
        }
    }
    for (k = 0; k < n; k++)
        ys[k * stride] = o2g_q(o2g_fdiv(e[k], sum), out_scale);
}

#define O2G_MASKED_SOFTMAX_MAX 4096

/* Softmax of int8 rows with a constant mask: keep[f % keep_size] (f: the flat index of a value of x) says
 * whether a position takes part. keep_size is a multiple of axis_len * inner (the mask covers the softmax
 * axis and every axis after it), so each row's keep values are one strided run. */
void o2g_softmax_masked(const int8_t *x, const int8_t *keep, int8_t *y, size_t outer, size_t axis_len,
                        size_t inner, size_t keep_size, float in_scale, float out_scale)
{
    float e[O2G_MASKED_SOFTMAX_MAX], exps[256];
    int filled = 0;
    size_t o, i;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const size_t base = o * axis_len * inner + i;
            o2g_softmax_kept_row(x + base, keep + base % keep_size, y + base, axis_len, inner, e,
                                 outer * axis_len * inner < 256 ? 0 : exps, &filled, in_scale, out_scale);
        }
}

/* Value i of an integer model input (token ids, an attention mask): int64_t when index_bytes is 8, else
 * int32_t. */
O2G_INLINE int64_t o2g_id_at(const void *ids, int index_bytes, size_t i)
{
    return index_bytes == 8 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
}

/* Softmax of attention scores [rows][keys] masked by an integer model input [batch][keys] (int64_t or int32_t
 * ids of index_bytes; 0: masked), row r being query r % queries of batch r / batch_rows (the last queries line
 * up with the last keys). O2G_MASK_CAUSAL also masks every key after the query's own position;
 * O2G_MASK_QUERY_KEY masks the whole row of a masked query (a uniform row, see o2g_softmax_kept_row). */
void o2g_softmax_input_mask(const int8_t *x, const void *mask, int8_t *y, size_t rows, size_t keys, size_t queries,
                            size_t batch_rows, int index_bytes, int form, float in_scale, float out_scale)
{
    float e[O2G_MASKED_SOFTMAX_MAX], exps[256];
    int8_t keep[O2G_MASKED_SOFTMAX_MAX];
    int filled = 0;
    size_t r, k;
    for (r = 0; r < rows; r++) {
        const size_t b = r / batch_rows, last = r % queries + (keys - queries);
        const int query = form != O2G_MASK_QUERY_KEY || o2g_id_at(mask, index_bytes, b * keys + last) != 0;
        for (k = 0; k < keys; k++)
            keep[k] = query && o2g_id_at(mask, index_bytes, b * keys + k) != 0 && (form != O2G_MASK_CAUSAL || k <= last);
        o2g_softmax_kept_row(x + r * keys, keep, y + r * keys, keys, 1, e, rows * keys < 256 ? 0 : exps, &filled,
                             in_scale, out_scale);
    }
}

/* ---- gather, remap, concat ---------------------------------------------------------------------- */

void o2g_embedding(const void *ids, const int8_t *table, int8_t *y, int index_bytes, size_t outer, size_t rows,
                   size_t inner, size_t count)
{
    size_t o, k;
    for (o = 0; o < outer; o++, table += rows * inner)
        for (k = 0; k < count; k++, y += inner) {
            int64_t id = o2g_id_at(ids, index_bytes, k);
            if (id < 0)
                id += (int64_t)rows;
            if (id < 0)
                id = 0;
            else if ((uint64_t)id >= rows)
                id = (int64_t)rows - 1;
            o2g_copy(y, table + (size_t)id * inner, inner);
        }
}

void o2g_mask_rows(const int8_t *x, const void *mask, int8_t *y, int index_bytes, size_t rows, size_t row_len)
{
    size_t r;
    for (r = 0; r < rows; r++, x += row_len, y += row_len) {
        const int keep = o2g_id_at(mask, index_bytes, r) != 0;
        if (keep)
            o2g_copy(y, x, row_len);
        else
            o2g_fill(y, 0, row_len);
    }
}

void o2g_position_embedding(const void *ids, const int8_t *table, int8_t *y, int index_bytes, size_t rows,
                            size_t inner, size_t seq, size_t count, int64_t pad)
{
    int64_t seen = 0, position;
    size_t k;
    for (k = 0; k < count; k++, y += inner) {
        const int64_t id = o2g_id_at(ids, index_bytes, k);
        if (k % seq == 0)
            seen = 0;
        position = id == pad ? pad : pad + ++seen;
        if (position < 0)
            position = 0;
        else if ((uint64_t)position >= rows)
            position = (int64_t)rows - 1;
        o2g_copy(y, table + (size_t)position * inner, inner);
    }
}

void o2g_gather(const int8_t *x, int8_t *y, size_t outer, size_t axis_len, size_t inner,
                const int64_t *indices, size_t count)
{
    size_t o, k;
    for (o = 0; o < outer; o++) {
        const int8_t *src = x + o * axis_len * inner;
        if (inner == 1) {
            const int64_t *idx = indices, *const end = indices + (count & ~(size_t)3);
            for (; idx != end; idx += 4, y += 4) {
                const int8_t a = src[idx[0]], b = src[idx[1]], c = src[idx[2]], d = src[idx[3]];
                y[0] = a;
                y[1] = b;
                y[2] = c;
                y[3] = d;
            }
            for (k = count & ~(size_t)3; k < count; k++)
                *y++ = src[indices[k]];
        } else {
            for (k = 0; k < count; k++, y += inner)
                o2g_copy(y, src + (size_t)indices[k] * inner, inner);
        }
    }
}

#define O2G_REMAP_RUNS 64
#define O2G_REMAP_PAD ((size_t)-1)

void o2g_remap(const int8_t *x, int8_t *y, int rank, const int *in_shape, const int *out_shape,
               const int64_t *index, int8_t value)
{
    const int64_t *map[O2G_MAX_RANK], *m = index;
    size_t in_stride[O2G_MAX_RANK], count = 1, stride = 1, block = 1, n, j, k, nruns = 0;
    size_t run_len[O2G_REMAP_RUNS], offset[O2G_MAX_RANK + 1];
    int64_t run_src[O2G_REMAP_RUNS];
    int pos[O2G_MAX_RANK];
    int d, last, use_runs;
    if (rank < 0 || rank > O2G_MAX_RANK)
        return;
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
    if (count == 0)
        return;
    /* trailing axes mapped onto themselves form blocks moved whole */
    for (last = rank - 1; last >= 0; last--) {
        if (out_shape[last] != in_shape[last])
            break;
        for (j = 0; j < (size_t)out_shape[last] && map[last][j] == (int64_t)j; j++)
            ;
        if (j < (size_t)out_shape[last])
            break;
        block *= (size_t)out_shape[last];
    }
    if (last < 0) {
        o2g_copy(y, x, block);
        return;
    }
    n = (size_t)out_shape[last];
    m = map[last];
    /* axis `last` as runs of consecutive sources (or of padding), found once for every row */
    for (j = 0; j < n && nruns < O2G_REMAP_RUNS; j = k, nruns++) {
        const int64_t i = m[j];
        k = j + 1;
        if (i < 0)
            while (k < n && m[k] < 0)
                k++;
        else
            while (k < n && m[k] == i + (int64_t)(k - j))
                k++;
        run_len[nruns] = (k - j) * block;
        run_src[nruns] = i;
    }
    use_runs = j == n && (block > 1 || nruns * 8 <= n);
    /* offset[d + 1] = the source offset of the outer positions pos[0..d] (or PAD), updated from the
     * dimension the odometer moved */
    offset[0] = 0;
    d = 0;
    for (;;) { /* one row: every position of axis `last` for fixed outer positions */
        size_t at;
        for (; d < last; d++) {
            const int64_t i = map[d][pos[d]];
            offset[d + 1] = i < 0 || offset[d] == O2G_REMAP_PAD ? O2G_REMAP_PAD : offset[d] + (size_t)i * in_stride[d];
        }
        at = offset[last];
        if (at == O2G_REMAP_PAD) {
            o2g_fill(y, value, n * block);
            y += n * block;
        } else if (use_runs) {
            for (k = 0; k < nruns; k++) {
                if (run_src[k] < 0)
                    o2g_fill(y, value, run_len[k]);
                else
                    o2g_copy(y, x + at + (size_t)run_src[k] * block, run_len[k]);
                y += run_len[k];
            }
        } else if (block == 1) { /* short runs: element by element */
            const int8_t *xr = x + at;
            for (j = 0; j < n; j++) {
                const int64_t i = m[j];
                y[j] = i < 0 ? value : xr[i];
            }
            y += n;
        } else { /* more runs than fit the table: find them again on every row */
            for (j = 0; j < n; j = k) {
                const int64_t i = m[j];
                k = j + 1;
                if (i < 0) {
                    while (k < n && m[k] < 0)
                        k++;
                    o2g_fill(y, value, (k - j) * block);
                } else {
                    while (k < n && m[k] == i + (int64_t)(k - j))
                        k++;
                    o2g_copy(y, x + at + (size_t)i * block, (k - j) * block);
                }
                y += (k - j) * block;
            }
        }
        for (d = last - 1; d >= 0; d--) {
            if (++pos[d] < out_shape[d])
                break;
            pos[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* int8 at in_scale -> int8 at out_scale, as DequantizeLinear then QuantizeLinear. */
O2G_INLINE int8_t o2g_requantize(int x, float in_scale, float out_scale)
{
    return o2g_q(o2g_deq(x, in_scale), out_scale);
}

void o2g_concat_part(const int8_t *x, int8_t *y, size_t outer, size_t part_len, size_t inner,
                     size_t total_len, size_t offset, float in_scale, float out_scale)
{
    const size_t run = part_len * inner;
    int8_t table[256];
    size_t o, i;
    int v;
    y += offset * inner;
    if (in_scale == out_scale) {
        if (part_len == total_len)
            o2g_copy(y, x, outer * run);
        else
            for (o = 0; o < outer; o++, x += run, y += total_len * inner)
                o2g_copy(y, x, run);
        return;
    }
    if (outer * run >= O2G_TABLE_MIN) {
        for (v = -128; v < 128; v++)
            table[v + 128] = o2g_requantize(v, in_scale, out_scale);
        for (o = 0; o < outer; o++, x += run, y += total_len * inner)
            o2g_lut_run(x, y, run, table + 128);
        return;
    }
    for (o = 0; o < outer; o++, x += run, y += total_len * inner)
        for (i = 0; i < run; i++)
            y[i] = o2g_requantize(x[i], in_scale, out_scale);
}

void o2g_concat_part_f32(const float *x, float *y, size_t outer, size_t part_len, size_t inner, size_t total_len,
                         size_t offset)
{
    const size_t run = part_len * inner;
    size_t o, i;
    y += offset * inner;
    for (o = 0; o < outer; o++, x += run, y += total_len * inner)
        for (i = 0; i < run; i++)
            y[i] = x[i];
}

/* (float)x * scale, one rounding: onnxruntime's DequantizeLinear */
void o2g_concat_part_dequantize(const int8_t *x, float *y, size_t outer, size_t part_len, size_t inner,
                                size_t total_len, size_t offset, float scale)
{
    const size_t run = part_len * inner;
    size_t o, i;
    y += offset * inner;
    for (o = 0; o < outer; o++, x += run, y += total_len * inner)
        for (i = 0; i < run; i++)
            y[i] = (float)x[i] * scale;
}

/* ---- linear resize ------------------------------------------------------------------------------- */

#define O2G_RESIZE_MAX_AXES 3

void o2g_resize_linear(const int8_t *x, int8_t *y, int rank, const int *in_shape, const int *out_shape,
                       int naxes, const int *axes, const int64_t *lo, const int64_t *hi,
                       const float *w_lo, const float *w_hi, float in_scale, float out_scale)
{
    size_t in_stride[O2G_MAX_RANK], table[O2G_RESIZE_MAX_AXES], count = 1, stride = 1, at = 0, run, k;
    size_t src[1 << O2G_RESIZE_MAX_AXES];
    float weight[1 << O2G_RESIZE_MAX_AXES], factor[1 << O2G_RESIZE_MAX_AXES][O2G_RESIZE_MAX_AXES];
    int pos[O2G_MAX_RANK], resized[O2G_MAX_RANK];
    int d, j, corner, corners, outer_rank, inner_resized, first;
    if (rank < 0 || rank > O2G_MAX_RANK || naxes < 0 || naxes > O2G_RESIZE_MAX_AXES)
        return;
    for (d = rank - 1; d >= 0; d--) {
        in_stride[d] = stride;
        stride *= (size_t)in_shape[d];
        count *= (size_t)out_shape[d];
        pos[d] = 0;
        resized[d] = 0;
    }
    if (count == 0)
        return;
    for (j = 0; j < naxes; j++) { /* where each axis' table starts */
        table[j] = at;
        at += (size_t)out_shape[axes[j]];
        resized[axes[j]] = 1;
    }
    /* The innermost axis is walked in the inner loop: as a contiguous run every corner reads when it is
     * not resized, or with its own two taps per position when it is (then it is axes[naxes - 1]). The
     * corners of the other axes are set up once per outer position. */
    inner_resized = rank > 0 && resized[rank - 1];
    outer_rank = rank > 0 ? rank - 1 : 0;
    run = rank > 0 ? (size_t)out_shape[rank - 1] : 1;
    first = inner_resized ? 1 : 0; /* resized axes handled per corner: j = first .. naxes-1, innermost first */
    corners = 1 << (naxes - first);
    for (;;) {
        size_t base = 0;
        for (d = 0; d < outer_rank; d++)
            if (!resized[d])
                base += (size_t)pos[d] * in_stride[d];
        for (corner = 0; corner < corners; corner++) {
            size_t s = base;
            float w = 1.0f;
            for (j = first; j < naxes; j++) { /* innermost axis first: bit j - first selects its hi tap */
                const int a = axes[naxes - 1 - j];
                const size_t t = table[naxes - 1 - j] + (size_t)pos[a];
                const int high = (corner >> (j - first)) & 1;
                s += (size_t)(high ? hi[t] : lo[t]) * in_stride[a];
                factor[corner][j] = high ? w_hi[t] : w_lo[t];
                w = w * factor[corner][j];
                O2G_KEEP(w);
            }
            src[corner] = s;
            weight[corner] = w;
        }
        if (!inner_resized && corners == 4) { /* two resized axes (an NHWC image): four corners unrolled */
            const int8_t *x0 = x + src[0], *x1 = x + src[1], *x2 = x + src[2], *x3 = x + src[3];
            const float w0 = weight[0], w1 = weight[1], w2 = weight[2], w3 = weight[3];
            for (k = 0; k < run; k++) {
                float t0 = w0 * o2g_deq(x0[k], in_scale), t1, t2, t3, sum;
                O2G_KEEP(t0);
                t1 = w1 * o2g_deq(x1[k], in_scale);
                O2G_KEEP(t1);
                t2 = w2 * o2g_deq(x2[k], in_scale);
                O2G_KEEP(t2);
                t3 = w3 * o2g_deq(x3[k], in_scale);
                O2G_KEEP(t3);
                sum = 0.0f + t0;
                O2G_KEEP(sum);
                sum = sum + t1;
                O2G_KEEP(sum);
                sum = sum + t2;
                O2G_KEEP(sum);
                sum = sum + t3;
                O2G_KEEP(sum);
                y[k] = o2g_q(sum, out_scale);
            }
        } else if (inner_resized && naxes == 2) { /* an NCHW image: two taps per position, two outer corners */
            const size_t t0 = table[1];
            const int8_t *x0 = x + src[0], *x1 = x + src[1];
            const float f0 = factor[0][1], f1 = factor[1][1];
            for (k = 0; k < run; k++) {
                const size_t a = (size_t)lo[t0 + k], b = (size_t)hi[t0 + k];
                const float wl = w_lo[t0 + k], wh = w_hi[t0 + k];
                float w, t, sum;
                w = wl * f0;
                O2G_KEEP(w);
                t = w * o2g_deq(x0[a], in_scale);
                O2G_KEEP(t);
                sum = 0.0f + t;
                O2G_KEEP(sum);
                w = wh * f0;
                O2G_KEEP(w);
                t = w * o2g_deq(x0[b], in_scale);
                O2G_KEEP(t);
                sum = sum + t;
                O2G_KEEP(sum);
                w = wl * f1;
                O2G_KEEP(w);
                t = w * o2g_deq(x1[a], in_scale);
                O2G_KEEP(t);
                sum = sum + t;
                O2G_KEEP(sum);
                w = wh * f1;
                O2G_KEEP(w);
                t = w * o2g_deq(x1[b], in_scale);
                O2G_KEEP(t);
                sum = sum + t;
                O2G_KEEP(sum);
                y[k] = o2g_q(sum, out_scale);
            }
        } else if (!inner_resized) {
            for (k = 0; k < run; k++) {
                float sum = 0.0f;
                for (corner = 0; corner < corners; corner++) {
                    float term = weight[corner] * o2g_deq(x[src[corner] + k], in_scale);
                    O2G_KEEP(term);
                    sum = sum + term;
                    O2G_KEEP(sum);
                }
                y[k] = o2g_q(sum, out_scale);
            }
        } else {
            const size_t t0 = table[naxes - 1];
            for (k = 0; k < run; k++) {
                const size_t taps[2] = {(size_t)lo[t0 + k], (size_t)hi[t0 + k]};
                const float wk[2] = {w_lo[t0 + k], w_hi[t0 + k]};
                float sum = 0.0f;
                for (corner = 0; corner < 2 * corners; corner++) { /* bit 0: the innermost axis' tap */
                    const int outer_corner = corner >> 1, high = corner & 1;
                    float w = wk[high], term; /* ((1 * w_inner) * w_next) * .. in the reference's order */
                    for (j = 1; j < naxes; j++) {
                        w = w * factor[outer_corner][j];
                        O2G_KEEP(w);
                    }
                    term = w * o2g_deq(x[src[outer_corner] + taps[high]], in_scale);
                    O2G_KEEP(term);
                    sum = sum + term;
                    O2G_KEEP(sum);
                }
                y[k] = o2g_q(sum, out_scale);
            }
        }
        y += run;
        for (d = outer_rank - 1; d >= 0; d--) { /* odometer over the outer output index */
            if (++pos[d] < out_shape[d])
                break;
            pos[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* ---- cubic resize -------------------------------------------------------------------------------- */

/* One output value from the 4 x 4 taps x[rows[i] + cols[j]], in onnxruntime's order: each row summed
 * along the width first, then the rows, each product divided by the height divisor (skipped when it
 * is 1: x / 1 == x). */
O2G_INLINE float o2g_cubic_value(const int8_t *x, const size_t rows[4], const size_t cols[4],
                                 const float *w_height, float divisor, const float *w_width, float in_scale)
{
    float sum = 0.0f;
    int i, j;
    for (i = 0; i < 4; i++) {
        float row = 0.0f, t;
        for (j = 0; j < 4; j++) {
            t = w_width[j] * o2g_deq(x[rows[i] + cols[j]], in_scale);
            O2G_KEEP(t);
            row = row + t;
            O2G_KEEP(row);
        }
        t = row * w_height[i];
        O2G_KEEP(t);
        if (divisor != 1.0f)
            t = o2g_fdiv(t, divisor);
        sum = sum + t;
        O2G_KEEP(sum);
    }
    return sum;
}

void o2g_resize_cubic(const int8_t *x, int8_t *y, int rank, const int *in_shape, const int *out_shape,
                      const int *axes, const int64_t *pos, const float *weight, const float *divisor,
                      float in_scale, float out_scale)
{
    size_t in_stride[O2G_MAX_RANK], rows[4], cols[4], count = 1, stride = 1, run, k;
    int at[O2G_MAX_RANK];
    const int ah = axes[0], aw = axes[1];
    const int64_t *pos_w;
    const float *weight_w;
    int d, i;
    if (rank < 2 || rank > O2G_MAX_RANK || ah < 0 || ah >= aw || aw >= rank)
        return;
    for (d = rank - 1; d >= 0; d--) {
        in_stride[d] = stride;
        stride *= (size_t)in_shape[d];
        count *= (size_t)out_shape[d];
        at[d] = 0;
    }
    if (count == 0)
        return;
    pos_w = pos + 4 * (size_t)out_shape[ah]; /* the width axis' table follows the height axis' */
    weight_w = weight + 4 * (size_t)out_shape[ah];
    run = (size_t)out_shape[rank - 1];
    /* The innermost axis is walked in the inner loop: when it is the width axis (NCHW, 2-D) each output
     * position has its own width taps; otherwise (NHWC) all 16 taps are fixed along the run. */
    for (;;) {
        size_t base = 0;
        const size_t th = 4 * (size_t)at[ah];
        for (d = 0; d < rank - 1; d++)
            if (d != ah && d != aw)
                base += (size_t)at[d] * in_stride[d];
        for (i = 0; i < 4; i++)
            rows[i] = base + (size_t)pos[th + i] * in_stride[ah];
        if (aw == rank - 1) {
            for (k = 0; k < run; k++) {
                for (i = 0; i < 4; i++)
                    cols[i] = (size_t)pos_w[4 * k + i];
                y[k] = o2g_q(o2g_cubic_value(x, rows, cols, weight + th, divisor[at[ah]], weight_w + 4 * k,
                                             in_scale), out_scale);
            }
        } else {
            const size_t tw = 4 * (size_t)at[aw];
            for (i = 0; i < 4; i++)
                cols[i] = (size_t)pos_w[tw + i] * in_stride[aw];
            for (k = 0; k < run; k++)
                y[k] = o2g_q(o2g_cubic_value(x + k, rows, cols, weight + th, divisor[at[ah]], weight_w + tw,
                                             in_scale), out_scale);
        }
        y += run;
        for (d = rank - 2; d >= 0; d--) { /* odometer over the outer output index */
            if (++at[d] < out_shape[d])
                break;
            at[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* ---- elementwise binary ---------------------------------------------------------------------------- */

/* Quantized to [lo, 127], NaN -> lo and infinities saturating, as o2g_sat: the fast path's q is out
 * of range whenever r is not finite, so the correction runs out of line. */
O2G_COLD static long o2g_binary_slow(float r, float out_scale, long lo)
{
    const float y = o2g_fdiv(r, out_scale);
    return o2g_sat_slow(o2g_cvt(y), y, lo);
}

O2G_INLINE int8_t o2g_binary_q(float r, float out_scale, long lo)
{
    long q = o2g_cvt(o2g_fdiv(r, out_scale));
    if (O2G_UNLIKELY((unsigned long)(q - lo) > (unsigned long)(127 - lo)))
        q = o2g_binary_slow(r, out_scale, lo);
    return (int8_t)q;
}

O2G_INLINE float o2g_binary_fn(int fn, float a, float b)
{
    float r;
    switch (fn) {
    case O2G_ADD:
        r = a + b;
        break;
    case O2G_SUB:
        r = a - b;
        break;
    case O2G_MUL:
        r = a * b;
        break;
    case O2G_DIV:
        return o2g_fdiv(a, b);
    case O2G_MAX:
        return a > b ? a : b;
    case O2G_PRELU:
        if (!(a < 0.0f))
            return a;
        r = a * b;
        break;
    case O2G_HYPOT: {
        float aa = a * a, bb = b * b;
        O2G_KEEP(aa);
        O2G_KEEP(bb);
        r = aa + bb;
        O2G_KEEP(r);
        return sqrtf(r);
    }
    default:
        return a < b ? a : b;
    }
    O2G_KEEP(r);
    return r;
}

static float o2g_operand_value(const struct o2g_operand *a, size_t offset)
{
    if (a->is_float)
        return ((const float *)a->data)[offset];
    return o2g_deq(((const int8_t *)a->data)[offset], a->scale);
}

/* How an operand is read along the innermost dimension: int8 (Q) or float (F) values with stride 1, or
 * one value (S, stride 0). */
enum { O2G_RUN_Q, O2G_RUN_F, O2G_RUN_S };

O2G_INLINE int o2g_run_kind(const struct o2g_operand *op, long stride)
{
    return stride == 0 ? O2G_RUN_S : op->is_float ? O2G_RUN_F : O2G_RUN_Q;
}

#define O2G_RUN_VALUE(kind, q, f, scale, value, i) \
    ((kind) == O2G_RUN_Q ? o2g_deq((q)[i], scale) : (kind) == O2G_RUN_F ? (f)[i] : (value))

/* `rows` rows of n outputs (y contiguous); row r reads a at oa + r * ra and b at ob + r * rb. Every
 * operand field is copied to a local: y's stores (int8, a character type) could alias the operands,
 * and reloading the fields after each store would cost more than the arithmetic. */
O2G_INLINE void o2g_binary_rows(int fn, int ka, int kb, const struct o2g_operand *a, const struct o2g_operand *b,
                                size_t oa, size_t ob, long ra, long rb, size_t rows, int8_t *y, size_t n,
                                float out_scale)
{
    const int8_t *const qa0 = (const int8_t *)a->data, *const qb0 = (const int8_t *)b->data;
    const float *const fa0 = (const float *)a->data, *const fb0 = (const float *)b->data;
    const float sa = a->scale, sb = b->scale;
    for (; rows > 0; rows--, oa += (size_t)ra, ob += (size_t)rb) {
        const int8_t *qa = qa0 + oa, *qb = qb0 + ob;
        const float *fa = fa0 + oa, *fb = fb0 + ob;
        const float va = ka == O2G_RUN_S ? o2g_operand_value(a, oa) : 0.0f;
        const float vb = kb == O2G_RUN_S ? o2g_operand_value(b, ob) : 0.0f;
        int8_t *const end = y + (n & ~(size_t)1);
        while (y < end) {
            const float a0 = O2G_RUN_VALUE(ka, qa, fa, sa, va, 0), b0 = O2G_RUN_VALUE(kb, qb, fb, sb, vb, 0);
            const float a1 = O2G_RUN_VALUE(ka, qa, fa, sa, va, 1), b1 = O2G_RUN_VALUE(kb, qb, fb, sb, vb, 1);
            y[0] = o2g_binary_q(o2g_binary_fn(fn, a0, b0), out_scale, -128);
            y[1] = o2g_binary_q(o2g_binary_fn(fn, a1, b1), out_scale, -128);
            y += 2;
            qa += ka == O2G_RUN_Q ? 2 : 0;
            qb += kb == O2G_RUN_Q ? 2 : 0;
            fa += ka == O2G_RUN_F ? 2 : 0;
            fb += kb == O2G_RUN_F ? 2 : 0;
        }
        if (n & 1)
            *y++ = o2g_binary_q(o2g_binary_fn(fn, O2G_RUN_VALUE(ka, qa, fa, sa, va, 0),
                                              O2G_RUN_VALUE(kb, qb, fb, sb, vb, 0)), out_scale, -128);
    }
}

#define O2G_BINARY_KINDS(FN)                                                                              \
    switch (ka * 3 + kb) {                                                                                \
    case 0: o2g_binary_rows(FN, O2G_RUN_Q, O2G_RUN_Q, a, b, oa, ob, ra, rb, rows, y, n, out_scale); break; \
    case 1: o2g_binary_rows(FN, O2G_RUN_Q, O2G_RUN_F, a, b, oa, ob, ra, rb, rows, y, n, out_scale); break; \
    case 2: o2g_binary_rows(FN, O2G_RUN_Q, O2G_RUN_S, a, b, oa, ob, ra, rb, rows, y, n, out_scale); break; \
    case 3: o2g_binary_rows(FN, O2G_RUN_F, O2G_RUN_Q, a, b, oa, ob, ra, rb, rows, y, n, out_scale); break; \
    case 4: o2g_binary_rows(FN, O2G_RUN_F, O2G_RUN_F, a, b, oa, ob, ra, rb, rows, y, n, out_scale); break; \
    case 5: o2g_binary_rows(FN, O2G_RUN_F, O2G_RUN_S, a, b, oa, ob, ra, rb, rows, y, n, out_scale); break; \
    case 6: o2g_binary_rows(FN, O2G_RUN_S, O2G_RUN_Q, a, b, oa, ob, ra, rb, rows, y, n, out_scale); break; \
    case 7: o2g_binary_rows(FN, O2G_RUN_S, O2G_RUN_F, a, b, oa, ob, ra, rb, rows, y, n, out_scale); break; \
    default: o2g_binary_rows(FN, O2G_RUN_S, O2G_RUN_S, a, b, oa, ob, ra, rb, rows, y, n, out_scale); break; \
    }

/* `rows` rows of n outputs (see o2g_binary_rows); innermost strides sa, sb are 0 or 1. */
static void o2g_binary_block(int fn, const struct o2g_operand *a, const struct o2g_operand *b, size_t oa,
                             size_t ob, long sa, long sb, long ra, long rb, size_t rows, int8_t *y, size_t n,
                             float out_scale, int relu)
{
    const int ka = o2g_run_kind(a, sa), kb = o2g_run_kind(b, sb);
    if (n >= O2G_TABLE_MIN && ((ka == O2G_RUN_Q && kb == O2G_RUN_S) || (ka == O2G_RUN_S && kb == O2G_RUN_Q))) {
        /* int8 against a constant along long rows: a table per row */
        const long lo = relu ? 0 : -128;
        int8_t table[256];
        size_t r;
        int v;
        for (r = 0; r < rows; r++, oa += (size_t)ra, ob += (size_t)rb, y += n) {
            const struct o2g_operand *q = ka == O2G_RUN_Q ? a : b;
            const float value = ka == O2G_RUN_S ? o2g_operand_value(a, oa) : o2g_operand_value(b, ob);
            for (v = -128; v < 128; v++) {
                const float fv = o2g_deq(v, q->scale);
                table[v + 128] = o2g_binary_q(o2g_binary_fn(fn, q == a ? fv : value, q == b ? fv : value),
                                              out_scale, lo);
            }
            o2g_lut_run((const int8_t *)q->data + (q == a ? oa : ob), y, n, table + 128);
        }
        return;
    }
    switch (fn) { /* the common functions get loops of their own; the others share one (fn switched inside) */
    case O2G_ADD: O2G_BINARY_KINDS(O2G_ADD) break;
    case O2G_SUB: O2G_BINARY_KINDS(O2G_SUB) break;
    case O2G_MUL: O2G_BINARY_KINDS(O2G_MUL) break;
    case O2G_DIV: O2G_BINARY_KINDS(O2G_DIV) break;
    case O2G_PRELU: O2G_BINARY_KINDS(O2G_PRELU) break;
    default: O2G_BINARY_KINDS(fn) break; /* max, min */
    }
    if (relu) /* the ReLU as a second pass: no per-element cost otherwise */
        o2g_clip_run(y, y, rows * n, 0, 127);
}

void o2g_binary(int fn, const struct o2g_operand *a, const struct o2g_operand *b, int8_t *y,
                int rank, const int *shape, float out_scale, int relu)
{
    /* dims after dropping size-1 ones and merging those both operands walk contiguously; the two
     * innermost are one block of rows, an odometer walks the others */
    size_t n[O2G_MAX_RANK + 1], idx[O2G_MAX_RANK + 1], oa = 0, ob = 0, run, rows, k;
    long sa[O2G_MAX_RANK + 1], sb[O2G_MAX_RANK + 1];
    int r = 0, d;

    if (rank < 0 || rank > O2G_MAX_RANK)
        return;
    for (d = 0; d < rank; d++) {
        const long da = a->strides[d], db = b->strides[d], size = shape[d];
        if (size == 0)
            return;
        if (size == 1)
            continue;
        if (r > 0 && sa[r - 1] == da * size && sb[r - 1] == db * size) {
            n[r - 1] *= (size_t)size;
            sa[r - 1] = da;
            sb[r - 1] = db;
        } else {
            n[r] = (size_t)size;
            sa[r] = da;
            sb[r] = db;
            r++;
        }
    }
    while (r < 2) { /* at least a block of one row of one element */
        for (d = r; d > 0; d--) {
            n[d] = n[d - 1];
            sa[d] = sa[d - 1];
            sb[d] = sb[d - 1];
        }
        n[0] = 1;
        sa[0] = sb[0] = 0;
        r++;
    }
    for (d = 0; d < r; d++)
        idx[d] = 0;
    run = n[r - 1];
    rows = n[r - 2];
    for (;;) {
        const long ia = sa[r - 1], ib = sb[r - 1];
        if ((ia == 0 || ia == 1) && (ib == 0 || ib == 1)) {
            o2g_binary_block(fn, a, b, oa, ob, ia, ib, sa[r - 2], sb[r - 2], rows, y, run, out_scale, relu);
            y += rows * run;
        } else { /* other strides (not emitted today): element by element */
            size_t row;
            for (row = 0; row < rows; row++, y += run)
                for (k = 0; k < run; k++)
                    y[k] = o2g_binary_q(o2g_binary_fn(fn, o2g_operand_value(a, oa + (size_t)((long)row * sa[r - 2] + (long)k * ia)),
                                                      o2g_operand_value(b, ob + (size_t)((long)row * sb[r - 2] + (long)k * ib))),
                                        out_scale, relu ? 0 : -128);
        }
        for (d = r - 3; d >= 0; d--) { /* odometer over the outer dims */
            oa += (size_t)sa[d];
            ob += (size_t)sb[d];
            if (++idx[d] < n[d])
                break;
            oa -= (size_t)sa[d] * n[d];
            ob -= (size_t)sb[d] * n[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* ---- depthwise conv -------------------------------------------------------------------------------- */

/* Gemmini's accumulator read-out: float32(acc) * scale, round half to even, saturate, then ReLU. */
O2G_INLINE int8_t o2g_acc_out(uint32_t acc, float scale, int relu)
{
    float v = (float)(int32_t)acc * scale;
    O2G_KEEP(v);
    return o2g_sat_act(v, relu);
}

/* Scheduling fence: keeps the compiler from hoisting every load of an unrolled loop body ahead of the
 * arithmetic, which would need more registers than there are and spill in the inner loop. */
#if defined(__GNUC__) || defined(__clang__)
#define O2G_FENCE() __asm__ __volatile__("" ::: "memory")
#else
#define O2G_FENCE() ((void)0)
#endif

/* The output channels of one depthwise output pixel, eight at a time accumulated in registers over
 * nr x nc taps: input tap (i, j) at x + i * rs + j * cs, its weights at w + i * wrs + j * wcs.
 * Not inlined: on its own the loop keeps its pointers and accumulators in registers. */
O2G_NOINLINE static void o2g_dw_pixel(const int8_t *x, const int8_t *w, size_t groups, int nr, int nc,
                                      size_t rs, size_t cs, size_t wrs, size_t wcs, const int32_t *bias,
                                      int8_t *y, float scale, int relu)
{
    for (; groups > 0; groups--, x += 8, w += 8, y += 8) {
        uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0; /* wrap like the accumulator */
        const int8_t *xr = x, *wr = w;
        int i;
        if (bias != NULL) {
            a0 = (uint32_t)bias[0];
            a1 = (uint32_t)bias[1];
            a2 = (uint32_t)bias[2];
            a3 = (uint32_t)bias[3];
            a4 = (uint32_t)bias[4];
            a5 = (uint32_t)bias[5];
            a6 = (uint32_t)bias[6];
            a7 = (uint32_t)bias[7];
            bias += 8;
        }
        for (i = 0; i < nr; i++, xr += rs, wr += wrs) {
            const int8_t *p = xr, *q = wr, *const end = xr + (size_t)nc * cs;
            for (; p != end; p += cs, q += wcs) {
                a0 += (uint32_t)(p[0] * q[0]);
                a1 += (uint32_t)(p[1] * q[1]);
                a2 += (uint32_t)(p[2] * q[2]);
                a3 += (uint32_t)(p[3] * q[3]);
                O2G_FENCE();
                a4 += (uint32_t)(p[4] * q[4]);
                a5 += (uint32_t)(p[5] * q[5]);
                a6 += (uint32_t)(p[6] * q[6]);
                a7 += (uint32_t)(p[7] * q[7]);
                O2G_FENCE();
            }
        }
        y[0] = o2g_acc_out(a0, scale, relu);
        y[1] = o2g_acc_out(a1, scale, relu);
        y[2] = o2g_acc_out(a2, scale, relu);
        y[3] = o2g_acc_out(a3, scale, relu);
        y[4] = o2g_acc_out(a4, scale, relu);
        y[5] = o2g_acc_out(a5, scale, relu);
        y[6] = o2g_acc_out(a6, scale, relu);
        y[7] = o2g_acc_out(a7, scale, relu);
    }
}

void o2g_dwconv(const int8_t *x, const int8_t *weights, const int32_t *bias, int8_t *y,
                int batches, int rows, int cols, int channels, const struct o2g_window *w,
                int multiplier, float scale, int relu)
{
    const struct o2g_window win = *w; /* in registers: y's stores could alias *w */
    const size_t c_n = (size_t)channels, oc_n = c_n * (size_t)multiplier, row_bytes = (size_t)cols * c_n;
    const size_t rs = (size_t)win.dilation_rows * row_bytes, cs = (size_t)win.dilation_cols * c_n;
    const size_t wrs = (size_t)win.kernel_cols * oc_n; /* weights of one kernel row */
    int b, orow, ocol, i, j;
    for (b = 0; b < batches; b++) {
        const int8_t *xb = x + (size_t)b * (size_t)rows * row_bytes;
        for (orow = 0; orow < win.out_rows; orow++) {
            const int ir0 = orow * win.stride_rows - win.pad_top;
            int r0, r1;
            o2g_tap_range(ir0, win.kernel_rows, win.dilation_rows, rows, &r0, &r1);
            for (ocol = 0; ocol < win.out_cols; ocol++, y += oc_n) {
                const int ic0 = ocol * win.stride_cols - win.pad_left;
                const int8_t *xbase, *wbase;
                size_t k = 0;
                int c0, c1;
                o2g_tap_range(ic0, win.kernel_cols, win.dilation_cols, cols, &c0, &c1);
                if (r1 == r0 || c1 == c0) { /* only padding: the bias */
                    for (k = 0; k < oc_n; k++)
                        y[k] = o2g_acc_out(bias != NULL ? (uint32_t)bias[k] : 0u, scale, relu);
                    continue;
                }
                xbase = xb + (size_t)(ir0 + r0 * win.dilation_rows) * row_bytes + (size_t)(ic0 + c0 * win.dilation_cols) * c_n;
                wbase = weights + (size_t)r0 * wrs + (size_t)c0 * oc_n;
                if (multiplier == 1 && oc_n >= 8) {
                    k = oc_n & ~(size_t)7;
                    o2g_dw_pixel(xbase, wbase, k / 8, r1 - r0, c1 - c0, rs, cs, wrs, oc_n, bias, y, scale, relu);
                }
                for (; k < oc_n; k++) { /* output channel k reads input channel k / multiplier */
                    const int8_t *xr = xbase + k / (size_t)multiplier, *wr = wbase + k;
                    uint32_t acc = bias != NULL ? (uint32_t)bias[k] : 0u; /* wraps like the accumulator */
                    for (i = r0; i < r1; i++, xr += rs, wr += wrs) {
                        const int8_t *p = xr, *q = wr;
                        for (j = c0; j < c1; j++, p += cs, q += oc_n)
                            acc += (uint32_t)(*p * *q);
                    }
                    y[k] = o2g_acc_out(acc, scale, relu);
                }
            }
        }
    }
}

/* ---- affine (standalone BatchNormalization) ----------------------------------------------------- */

O2G_INLINE int8_t o2g_affine_one(int x, float in_scale, float mul, float add, float out_scale, int relu)
{
    float m = o2g_deq(x, in_scale) * mul, s;
    O2G_KEEP(m);
    s = m + add;
    O2G_KEEP(s);
    return o2g_sat_act(o2g_fdiv(s, out_scale), relu);
}

static void o2g_affine_table(int8_t *t, float in_scale, float mul, float add, float out_scale, int relu)
{
    int v;
    for (v = -128; v < 128; v++)
        t[v + 128] = o2g_affine_one(v, in_scale, mul, add, out_scale, relu);
}

O2G_INLINE void o2g_affine_loop(const int8_t *x, int8_t *y, size_t n, float in_scale, float mul, float add,
                                float out_scale, int relu)
{
    size_t i;
    for (i = 0; i < n; i++)
        y[i] = o2g_affine_one(x[i], in_scale, mul, add, out_scale, relu);
}

O2G_INLINE void o2g_affine_row(const int8_t *x, int8_t *y, size_t n, float in_scale, const float *mul,
                               const float *add, float out_scale, int relu)
{
    size_t i;
    for (i = 0; i < n; i++)
        y[i] = o2g_affine_one(x[i], in_scale, mul[i], add[i], out_scale, relu);
}

#define O2G_AFFINE_CHUNK 32       /* channels whose tables (256 bytes each) are built at once */
#define O2G_AFFINE_TABLE_ROWS 384 /* rows from which tables pay for their 256 evaluations */

void o2g_affine(const int8_t *x, size_t x_row, const float *mul, const float *add, int8_t *y, size_t outer,
                size_t channels, size_t inner, float in_scale, float out_scale, int relu)
{
    size_t o, c;
    if (inner == 1 && outer >= O2G_AFFINE_TABLE_ROWS) { /* channels last, many rows: a table per channel */
        static int8_t tables[O2G_AFFINE_CHUNK * 256];
        size_t c0;
        for (c0 = 0; c0 < channels; c0 += O2G_AFFINE_CHUNK) {
            const size_t nc = channels - c0 < O2G_AFFINE_CHUNK ? channels - c0 : O2G_AFFINE_CHUNK;
            for (c = 0; c < nc; c++)
                o2g_affine_table(tables + c * 256, in_scale, mul[c0 + c], add[c0 + c], out_scale, relu);
            for (o = 0; o < outer; o++) {
                const int8_t *xr = x + o * x_row + c0, *t = tables + 128;
                int8_t *yr = y + o * channels + c0;
                for (c = 0; c + 8 <= nc; c += 8, t += 8 * 256) { /* table k of 8 at t + 256 k: immediate offsets */
                    const int8_t v0 = (t + xr[c])[0], v1 = (t + xr[c + 1])[256], v2 = (t + xr[c + 2])[512],
                                 v3 = (t + xr[c + 3])[768], v4 = (t + xr[c + 4])[1024], v5 = (t + xr[c + 5])[1280],
                                 v6 = (t + xr[c + 6])[1536], v7 = (t + xr[c + 7])[1792];
                    yr[c] = v0;
                    yr[c + 1] = v1;
                    yr[c + 2] = v2;
                    yr[c + 3] = v3;
                    yr[c + 4] = v4;
                    yr[c + 5] = v5;
                    yr[c + 6] = v6;
                    yr[c + 7] = v7;
                }
                for (; c < nc; c++, t += 256)
                    yr[c] = t[xr[c]];
            }
        }
        return;
    }
    for (o = 0; o < outer; o++, x += x_row) {
        if (inner == 1) { /* channels last, few rows */
            if (relu)
                o2g_affine_row(x, y, channels, in_scale, mul, add, out_scale, 1);
            else
                o2g_affine_row(x, y, channels, in_scale, mul, add, out_scale, 0);
            y += channels;
            continue;
        }
        for (c = 0; c < channels; c++, y += inner) {
            const int8_t *xr = x + c * inner;
            if (inner >= O2G_TABLE_MIN) {
                int8_t t[256];
                o2g_affine_table(t, in_scale, mul[c], add[c], out_scale, relu);
                o2g_lut_run(xr, y, inner, t + 128);
            } else if (relu) {
                o2g_affine_loop(xr, y, inner, in_scale, mul[c], add[c], out_scale, 1);
            } else {
                o2g_affine_loop(xr, y, inner, in_scale, mul[c], add[c], out_scale, 0);
            }
        }
    }
}

/* ---- LRN and LayerNorm ----------------------------------------------------------------------------- */

/* fl(fl(x * scale)^2) */
O2G_INLINE float o2g_square(int x, float scale)
{
    float v = o2g_deq(x, scale), s = v * v;
    O2G_KEEP(s);
    return s;
}

void o2g_lrn(const int8_t *x, int8_t *y, size_t outer, size_t channels, size_t inner, int size,
             float alpha_over_size, float beta, float bias, float in_scale, float out_scale)
{
    const size_t lo = (size_t)(size - 1) / 2;
    size_t o, i, c;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const int8_t *xs = x + o * channels * inner + i;
            int8_t *ys = y + o * channels * inner + i;
            /* the emulator's running sum over [lo zeros, squares, zeros]: csum[0] = 0,
             * csum[j+1] = csum[j] + padded[j]; window(c) = csum[c+size] - csum[c] */
            float lead = 0.0f, lag = 0.0f;
            size_t lead_at = 0;
            for (c = 0; c < channels; c++) {
                float sum, t, base, p;
                for (; lead_at < c + (size_t)size; lead_at++) { /* advance csum[lead_at] to csum[c+size] */
                    const float sq = lead_at >= lo && lead_at - lo < channels ?
                                     o2g_square(xs[(lead_at - lo) * inner], in_scale) : 0.0f;
                    lead += sq;
                    O2G_KEEP(lead);
                }
                if (c > 0 && c - 1 >= lo && c - 1 - lo < channels) { /* csum[c] = csum[c-1] + padded[c-1] */
                    lag += o2g_square(xs[(c - 1 - lo) * inner], in_scale);
                    O2G_KEEP(lag);
                }
                sum = lead - lag;
                O2G_KEEP(sum);
                t = alpha_over_size * sum;
                O2G_KEEP(t);
                base = bias + t;
                O2G_KEEP(base);
                p = powf(base, beta);
                ys[c * inner] = o2g_q(o2g_fdiv(o2g_deq(xs[c * inner], in_scale), p), out_scale);
            }
        }
}

void o2g_layernorm(const int8_t *x, const float *gamma, const float *beta, int8_t *y, size_t outer,
                   size_t norm_size, float epsilon, float in_scale, float out_scale)
{
    size_t o, k;
    for (o = 0; o < outer; o++, x += norm_size, y += norm_size) {
        struct o2g_values v;
        float mean, var, denom, s;
        v.x = x;
        v.scale = in_scale;
        v.shift = 0.0f;
        v.kind = O2G_DEQ;
        mean = o2g_fdiv(o2g_pairwise(&v, 0, norm_size), (float)norm_size);
        v.shift = mean;
        v.kind = O2G_SQDEV;
        var = o2g_fdiv(o2g_pairwise(&v, 0, norm_size), (float)norm_size);
        s = var + epsilon;
        O2G_KEEP(s);
        denom = sqrtf(s);
        O2G_KEEP(denom);
        for (k = 0; k < norm_size; k++) {
            float d = o2g_deq(x[k], in_scale) - mean, g, r;
            O2G_KEEP(d);
            g = o2g_fdiv(d, denom) * gamma[k];
            O2G_KEEP(g);
            r = g + beta[k];
            O2G_KEEP(r);
            y[k] = o2g_q(r, out_scale);
        }
    }
}

/* ---- reductions ------------------------------------------------------------------------------------ */

#define O2G_REDUCE_CHUNK 64 /* inner positions reduced at once: int32 accumulators on the stack */

static int8_t o2g_reduce_out(int32_t r, int kind, size_t axis_len, float in_scale, float out_scale)
{
    float v = (float)r;
    if (kind == O2G_REDUCE_L2) {
        v = sqrtf(v);
        O2G_KEEP(v);
    }
    v = v * in_scale;
    O2G_KEEP(v);
    if (kind == O2G_REDUCE_MEAN)
        v = o2g_fdiv(v, (float)axis_len);
    return o2g_q(v, out_scale);
}

void o2g_reduce(const int8_t *x, int8_t *y, size_t outer, size_t axis_len, size_t inner, int kind,
                float in_scale, float out_scale)
{
    const int add = kind == O2G_REDUCE_SUM || kind == O2G_REDUCE_MEAN, largest = kind == O2G_REDUCE_MAX;
    const int squares = kind == O2G_REDUCE_L2;
    size_t o, i0, i, k;
    for (o = 0; o < outer; o++, x += axis_len * inner, y += inner)
        for (i0 = 0; i0 < inner; i0 += O2G_REDUCE_CHUNK) {
            const size_t n = inner - i0 < O2G_REDUCE_CHUNK ? inner - i0 : O2G_REDUCE_CHUNK;
            int32_t acc[O2G_REDUCE_CHUNK];
            const int8_t *row = x + i0;
            for (i = 0; i < n; i++)
                acc[i] = squares ? row[i] * row[i] : row[i];
            for (k = 1; k < axis_len; k++) {
                row += inner;
                if (squares)
                    for (i = 0; i < n; i++)
                        acc[i] += row[i] * row[i];
                else if (add)
                    for (i = 0; i < n; i++)
                        acc[i] += row[i];
                else if (largest)
                    for (i = 0; i < n; i++)
                        acc[i] = row[i] > acc[i] ? row[i] : acc[i];
                else
                    for (i = 0; i < n; i++)
                        acc[i] = row[i] < acc[i] ? row[i] : acc[i];
            }
            for (i = 0; i < n; i++)
                y[i0 + i] = o2g_reduce_out(acc[i], kind, axis_len, in_scale, out_scale);
        }
}

/* ---- LSTM / GRU recurrence ------------------------------------------------------------------------- */

#define O2G_RNN_MAX_HIDDEN 1024 /* cpu/recurrent.py MAX_HIDDEN: the compiler refuses larger states */

/* One sequence's float32 state at a time: h, the new h, and c (LSTM) or z and r*h (GRU). */
static float o2g_rnn_state[4 * O2G_RNN_MAX_HIDDEN];

static float o2g_rnn_dot(const float *r_row, const float *h, size_t hidden)
{
    float dot = 0.0f;
    size_t m;
    for (m = 0; m < hidden; m++) {
        float t = r_row[m] * h[m];
        O2G_KEEP(t);
        dot += t;
    }
    return dot;
}

/* Projection element i: int8 values, or the int32 accumulators of a full_C matmul (p_int32). */
O2G_INLINE int o2g_rnn_p(const void *p, int p_int32, size_t i)
{
    return p_int32 ? ((const int32_t *)p)[i] : ((const int8_t *)p)[i];
}

/* A gate before its activation: (dequantized projection + dot) + bias, in NumPy's order. */
O2G_INLINE float o2g_rnn_gate(int p, float p_scale, float dot, float bias)
{
    float v = o2g_deq(p, p_scale) + dot;
    O2G_KEEP(v);
    return v + bias;
}

O2G_INLINE float o2g_sigmoid(float v)
{
    float e = expf(-v);
    O2G_KEEP(e);
    return o2g_fdiv(1.0f, 1.0f + e);
}

/* a * b + c * d with both products rounded (NumPy's elementwise order, no FMA). */
O2G_INLINE float o2g_rnn_mix(float a, float b, float c, float d)
{
    float x = a * b, y = c * d;
    O2G_KEEP(x);
    O2G_KEEP(y);
    return x + y;
}

void o2g_lstm(const void *p, int p_int32, const float *r, const float *bias, const float *peephole,
              const float *h0, const float *c0, int8_t *y, int8_t *y_h, int8_t *y_c, size_t seq, size_t batch,
              size_t hidden, int directions, int reverse, float p_scale, float y_scale, float y_h_scale,
              float y_c_scale)
{
    float *h = o2g_rnn_state, *h_new = h + O2G_RNN_MAX_HIDDEN, *c = h_new + O2G_RNN_MAX_HIDDEN;
    const size_t width = 4 * hidden, p_row = (size_t)directions * width;
    size_t b, s, j;
    int d;
    if (hidden > O2G_RNN_MAX_HIDDEN)
        return;
    for (d = 0; d < directions; d++) {
        const float *rd = r + (size_t)d * width * hidden, *bd = bias + (size_t)d * width;
        const float *pi = peephole + (size_t)d * 3 * hidden, *po = pi + hidden, *pf = po + hidden;
        const int backward = reverse || d == 1;
        for (b = 0; b < batch; b++) {
            const size_t state = ((size_t)d * batch + b) * hidden;
            for (j = 0; j < hidden; j++) {
                h[j] = h0[state + j];
                c[j] = c0[state + j];
            }
            for (s = 0; s < seq; s++) {
                const size_t t = backward ? seq - 1 - s : s;
                const size_t pt = (t * batch + b) * p_row + (size_t)d * width;
                int8_t *yt = y + ((t * (size_t)directions + (size_t)d) * batch + b) * hidden;
                for (j = 0; j < hidden; j++) {
                    const float gi = o2g_rnn_gate(o2g_rnn_p(p, p_int32, pt + j), p_scale,
                                                  o2g_rnn_dot(rd + j * hidden, h, hidden), bd[j]);
                    const float go = o2g_rnn_gate(o2g_rnn_p(p, p_int32, pt + hidden + j), p_scale,
                                                  o2g_rnn_dot(rd + (hidden + j) * hidden, h, hidden), bd[hidden + j]);
                    const float gf = o2g_rnn_gate(o2g_rnn_p(p, p_int32, pt + 2 * hidden + j), p_scale,
                                                  o2g_rnn_dot(rd + (2 * hidden + j) * hidden, h, hidden),
                                                  bd[2 * hidden + j]);
                    const float gc = o2g_rnn_gate(o2g_rnn_p(p, p_int32, pt + 3 * hidden + j), p_scale,
                                                  o2g_rnn_dot(rd + (3 * hidden + j) * hidden, h, hidden),
                                                  bd[3 * hidden + j]);
                    float pc = pi[j] * c[j], i, f, ct;
                    O2G_KEEP(pc);
                    i = o2g_sigmoid(gi + pc);
                    pc = pf[j] * c[j];
                    O2G_KEEP(pc);
                    f = o2g_sigmoid(gf + pc);
                    ct = o2g_rnn_mix(f, c[j], i, tanhf(gc));
                    pc = po[j] * ct;
                    O2G_KEEP(pc);
                    c[j] = ct;
                    h_new[j] = o2g_sigmoid(go + pc) * tanhf(ct);
                }
                for (j = 0; j < hidden; j++) {
                    h[j] = h_new[j];
                    yt[j] = o2g_q(h[j], y_scale);
                }
            }
            for (j = 0; j < hidden; j++) {
                y_h[state + j] = o2g_q(h[j], y_h_scale);
                y_c[state + j] = o2g_q(c[j], y_c_scale);
            }
        }
    }
}

void o2g_gru(const void *p, int p_int32, const float *r, const float *bias, const float *h0, int8_t *y,
             int8_t *y_h, size_t seq, size_t batch, size_t hidden, int directions, int reverse,
             int linear_before_reset, float p_scale, float y_scale, float y_h_scale)
{
    float *h = o2g_rnn_state, *h_new = h + O2G_RNN_MAX_HIDDEN, *z = h_new + O2G_RNN_MAX_HIDDEN;
    float *rh = z + O2G_RNN_MAX_HIDDEN;
    const size_t width = 3 * hidden, p_row = (size_t)directions * width;
    size_t b, s, j;
    int d;
    if (hidden > O2G_RNN_MAX_HIDDEN)
        return;
    for (d = 0; d < directions; d++) {
        const float *rz = r + (size_t)d * width * hidden, *rr = rz + hidden * hidden, *rc = rr + hidden * hidden;
        const float *bz = bias + (size_t)d * width, *br = bz + hidden, *bc = br + hidden;
        const int backward = reverse || d == 1;
        for (b = 0; b < batch; b++) {
            const size_t state = ((size_t)d * batch + b) * hidden;
            for (j = 0; j < hidden; j++)
                h[j] = h0[state + j];
            for (s = 0; s < seq; s++) {
                const size_t t = backward ? seq - 1 - s : s;
                const size_t pt = (t * batch + b) * p_row + (size_t)d * width;
                int8_t *yt = y + ((t * (size_t)directions + (size_t)d) * batch + b) * hidden;
                for (j = 0; j < hidden; j++) {
                    const float reset = o2g_sigmoid(o2g_rnn_gate(o2g_rnn_p(p, p_int32, pt + hidden + j), p_scale,
                                                                 o2g_rnn_dot(rr + j * hidden, h, hidden), br[j]));
                    z[j] = o2g_sigmoid(o2g_rnn_gate(o2g_rnn_p(p, p_int32, pt + j), p_scale,
                                                    o2g_rnn_dot(rz + j * hidden, h, hidden), bz[j]));
                    if (linear_before_reset) {
                        float v = o2g_rnn_dot(rc + j * hidden, h, hidden) + bc[j];
                        O2G_KEEP(v);
                        v = reset * v;
                        O2G_KEEP(v);
                        /* the candidate */
                        rh[j] = tanhf(o2g_deq(o2g_rnn_p(p, p_int32, pt + 2 * hidden + j), p_scale) + v);
                    } else {
                        rh[j] = reset * h[j];
                    }
                }
                for (j = 0; j < hidden; j++) {
                    const float candidate = linear_before_reset ? rh[j] : tanhf(o2g_rnn_gate(
                        o2g_rnn_p(p, p_int32, pt + 2 * hidden + j), p_scale, o2g_rnn_dot(rc + j * hidden, rh, hidden),
                        bc[j]));
                    h_new[j] = o2g_rnn_mix(1.0f - z[j], candidate, z[j], h[j]);
                }
                for (j = 0; j < hidden; j++) {
                    h[j] = h_new[j];
                    yt[j] = o2g_q(h[j], y_scale);
                }
            }
            for (j = 0; j < hidden; j++)
                y_h[state + j] = o2g_q(h[j], y_h_scale);
        }
    }
}

/* ==== layers kept float (--keep-float): o2g_float_conv ================================================ */
/* onnx2gemmini/cpu/float_layers.py is the reference. Each int8 value is dequantized to float32 (one
 * rounding, DequantizeLinear), each product with a float32 weight is exact in double (24 + 24 bits), and
 * each output's products are summed in double in the order (kernel row, kernel column, input channel)
 * of the valid taps, so the order in which the compiler schedules independent outputs changes nothing:
 * exact against the NumPy semantics. */

/* The 8 outputs k..k+7 of one output pixel over its valid taps (kernel rows r0..r1, columns c0..c1): eight
 * double accumulators in registers, each summed in tap order, then channel order. xs: the pixel's first
 * valid tap; dq: the dequantized values, indexed by the int8 value; dense (icg > 1): the eight share their
 * group's input channels; depthwise (icg == 1): output k + j reads channel ch[j] (ch NULL: xs points at channel
 * k and output k + j reads xs[j]). */
O2G_INLINE void o2g_float_conv8(const int8_t *xs, const float *ws, const double *dq, double *out, int r0, int r1,
                                int c0, int c1, size_t row_step, size_t col_step, size_t wrow_step, size_t tap_w,
                                size_t icg, size_t oc_n, const size_t *ch)
{
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0, a4 = 0.0, a5 = 0.0, a6 = 0.0, a7 = 0.0;
    int kr, kc;
    for (kr = r0; kr < r1; kr++) {
        const int8_t *xp = xs + (size_t)(kr - r0) * row_step;
        const float *wp = ws + (size_t)kr * wrow_step + (size_t)c0 * tap_w;
        for (kc = c0; kc < c1; kc++, xp += col_step, wp += tap_w) {
            if (icg == 1 && ch == NULL) { /* depthwise, multiplier 1: output k + j reads channel k + j */
                a0 += dq[xp[0]] * (double)wp[0];
                a1 += dq[xp[1]] * (double)wp[1];
                a2 += dq[xp[2]] * (double)wp[2];
                a3 += dq[xp[3]] * (double)wp[3];
                a4 += dq[xp[4]] * (double)wp[4];
                a5 += dq[xp[5]] * (double)wp[5];
                a6 += dq[xp[6]] * (double)wp[6];
                a7 += dq[xp[7]] * (double)wp[7];
            } else if (icg == 1) {
                a0 += dq[xp[ch[0]]] * (double)wp[0];
                a1 += dq[xp[ch[1]]] * (double)wp[1];
                a2 += dq[xp[ch[2]]] * (double)wp[2];
                a3 += dq[xp[ch[3]]] * (double)wp[3];
                a4 += dq[xp[ch[4]]] * (double)wp[4];
                a5 += dq[xp[ch[5]]] * (double)wp[5];
                a6 += dq[xp[ch[6]]] * (double)wp[6];
                a7 += dq[xp[ch[7]]] * (double)wp[7];
            } else {
                const float *wi = wp;
                size_t i;
                for (i = 0; i < icg; i++, wi += oc_n) {
                    const double xv = dq[xp[i]];
                    a0 += xv * (double)wi[0];
                    a1 += xv * (double)wi[1];
                    a2 += xv * (double)wi[2];
                    a3 += xv * (double)wi[3];
                    a4 += xv * (double)wi[4];
                    a5 += xv * (double)wi[5];
                    a6 += xv * (double)wi[6];
                    a7 += xv * (double)wi[7];
                }
            }
        }
    }
    out[0] = a0;
    out[1] = a1;
    out[2] = a2;
    out[3] = a3;
    out[4] = a4;
    out[5] = a5;
    out[6] = a6;
    out[7] = a7;
}

/* One output (a group's last few channels): the same sum with one accumulator. */
static double o2g_float_conv1(const int8_t *xs, const float *ws, const double *dq, int r0, int r1, int c0,
                              int c1, size_t row_step, size_t col_step, size_t wrow_step, size_t tap_w, size_t icg,
                              size_t oc_n, size_t ch)
{
    double a = 0.0;
    int kr, kc;
    for (kr = r0; kr < r1; kr++) {
        const int8_t *xp = xs + (size_t)(kr - r0) * row_step;
        const float *wp = ws + (size_t)kr * wrow_step + (size_t)c0 * tap_w;
        for (kc = c0; kc < c1; kc++, xp += col_step, wp += tap_w) {
            size_t i;
            if (icg == 1)
                a += dq[xp[ch]] * (double)wp[0];
            else
                for (i = 0; i < icg; i++)
                    a += dq[xp[i]] * (double)wp[i * oc_n];
        }
    }
    return a;
}

/* sum + bias in double, rounded to float32, QuantizeLinear (ReLU: to [0, 127]). */
O2G_INLINE int8_t o2g_float_conv_out(double acc, const float *bias, size_t k, float out_scale, int relu)
{
    float f = (float)(bias != NULL ? acc + (double)bias[k] : acc);
    O2G_KEEP(f);
    return o2g_sat_act(o2g_fdiv(f, out_scale), relu);
}

void o2g_float_conv(const int8_t *x, const float *weights, const float *bias, int8_t *y,
                    int batches, int rows, int cols, int channels, const struct o2g_window *w,
                    int groups, int out_channels, float in_scale, float out_scale, int relu)
{
    const struct o2g_window win = *w; /* in registers: y's stores could alias *w */
    const size_t c_n = (size_t)channels, oc_n = (size_t)out_channels, row_elems = (size_t)cols * c_n;
    const size_t icg = c_n / (size_t)groups, ocg = oc_n / (size_t)groups;
    const size_t tap_w = icg * oc_n, wrow_step = (size_t)win.kernel_cols * tap_w; /* weights per tap, kernel row */
    const size_t row_step = (size_t)win.dilation_rows * row_elems, col_step = (size_t)win.dilation_cols * c_n;
    double deq[256], acc[8];
    const double *dq = deq + 128; /* dq[v]: the int8 value v dequantized (DequantizeLinear), widened exactly */
    int v, b, orow, ocol, r0, r1, c0, c1;
    for (v = -128; v < 128; v++)
        deq[v + 128] = (double)o2g_deq(v, in_scale);
    for (b = 0; b < batches; b++) {
        const int8_t *xb = x + (size_t)b * (size_t)rows * row_elems;
        for (orow = 0; orow < win.out_rows; orow++) {
            const int ir0 = orow * win.stride_rows - win.pad_top;
            o2g_tap_range(ir0, win.kernel_rows, win.dilation_rows, rows, &r0, &r1);
            for (ocol = 0; ocol < win.out_cols; ocol++, y += oc_n) {
                const int ic0 = ocol * win.stride_cols - win.pad_left;
                const int8_t *xs;
                size_t k = 0, ch[8] = {0}, j;
                o2g_tap_range(ic0, win.kernel_cols, win.dilation_cols, cols, &c0, &c1);
                if (r1 == r0 || c1 == c0) { /* only padding: the bias */
                    for (k = 0; k < oc_n; k++)
                        y[k] = o2g_float_conv_out(0.0, bias, k, out_scale, relu);
                    continue;
                }
                xs = xb + (size_t)(ir0 + r0 * win.dilation_rows) * row_elems +
                     (size_t)(ic0 + c0 * win.dilation_cols) * c_n;
                while (k < oc_n) {
                    const size_t g = k / ocg, left = ocg - k % ocg; /* outputs left in k's group */
                    const int8_t *xg = icg == 1 ? xs : xs + g * icg;
                    if ((left >= 8 || icg == 1) && oc_n - k >= 8) {
                        for (j = 0; icg == 1 && ocg > 1 && j < 8; j++)
                            ch[j] = (k + j) / ocg;
                        o2g_float_conv8(icg == 1 && ocg == 1 ? xs + k : xg, weights + k, dq, acc, r0, r1, c0, c1,
                                        row_step, col_step, wrow_step, tap_w, icg, oc_n,
                                        icg == 1 && ocg == 1 ? NULL : ch);
                        for (j = 0; j < 8; j++, k++)
                            y[k] = o2g_float_conv_out(acc[j], bias, k, out_scale, relu);
                        continue;
                    }
                    y[k] = o2g_float_conv_out(o2g_float_conv1(xg, weights + k, dq, r0, r1, c0, c1, row_step,
                                                              col_step, wrow_step, tap_w, icg, oc_n, k / ocg),
                                              bias, k, out_scale, relu);
                    k++;
                }
            }
        }
    }
}
