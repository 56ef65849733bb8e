/*
 * o2g_mlir_selftest.c: the self-check program of the MLIR path (onnx2gemmini, OUT/mlir/, docs/mlir.md).
 *
 * The same self-test as the C back end's selftest.c, for model.mlir lowered by Buddy-MLIR: it runs @forward
 * on the embedded sample (selftest_data.bin) and compares every model output with the bit-exact emulator's
 * values, exactly for float32 outputs. model_checked.mlir (the module with a hook after every step) calls
 * @o2g_rt_check(k, tensor) after each step: the hooks the table of selftest_model.inc names compare the
 * step's output with the emulator's and then put the emulator's values in place, so each step runs on the
 * emulator's own inputs and no difference propagates (the float kernels whose libm calls may differ by 1 LSB
 * always; every step with CHECK_LAYERS=1, which names the first step that differs). It prints the total cycles,
 * then PASS (exact), PASS (within N LSB: K of M values) or FAIL: K of M output values differ, and returns 0
 * only on PASS; a passing CHECK_LAYERS=1 build first says how many steps it checked ("checked K of N layers:
 * all exact", or "all within tolerance": the steps hooked, and those whose model outputs are compared when
 * @forward returns; past the layer_check_bytes limit only the first steps are hooked).
 * A streaming model (selftest_model.inc defines O2G_NUM_STATES) first runs the warm-up steps of its
 * calibration stream, unchecked, carrying its state as the C program's <prefix>_stream_step does, and requires
 * the state carried into the checked step to equal the emulator's ("carried the state through K steps: exact").
 * Cycles are rdcycle: on Spike, which has no timing model, they count instructions retired.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "o2g_mlir_abi.h"

#ifndef O2G_CHECK_LAYERS
#define O2G_CHECK_LAYERS 0
#endif

/* A hook's check: after step `step`, tensor `tensor` (count int8 values, dense) against `expected`. */
struct o2g_hook_check {
    long hook;            /* the k of @o2g_rt_check(k, ...) in model_checked.mlir */
    int step;
    const char *layer, *tensor;
    const int8_t *expected;
    unsigned long count;
    int max_lsb;          /* the largest difference allowed */
    unsigned long allowed; /* how many values may differ */
    int output;           /* the model output it is (its index), or -1 */
};

/* A model output, compared after @forward returns unless a hook checked it. */
struct o2g_output_check {
    const char *name;
    const void *data, *expected;
    unsigned long count;
    int elem_bytes;       /* 1: int8; 4: float32, compared for equality */
    int step;             /* the step that writes it, or -1 */
};

static unsigned long compared, differing, failures, checked;
static unsigned long output_compared, output_differing; /* model outputs only: what the FAIL line counts */
static int largest;
static int checking = 1; /* 0 while a streaming model's warm-up steps run */

#include "selftest_model.inc"

static int output_hooked[O2G_NUM_OUTPUTS + 1];
static unsigned char layer_checked[O2G_NUM_LAYERS + 1]; /* 1: this step's output was checked */

static void count(unsigned long values, unsigned long bad, int most, int output)
{
    checked++;
    compared += values;
    differing += bad;
    largest = most > largest ? most : largest;
    if (output >= 0) {
        output_compared += values;
        output_differing += bad;
        output_hooked[output] = 1;
    }
}

void _mlir_ciface_o2g_rt_check(int64_t hook, o2g_unranked_memref *tensor)
{
    int8_t *data = o2g_memref_data(tensor, 1);
    unsigned long k, i;
    for (k = 0; k < sizeof o2g_hook_checks / sizeof o2g_hook_checks[0]; k++) { /* an unused table: hook -1 */
        const struct o2g_hook_check *ch = &o2g_hook_checks[k];
        unsigned long bad = 0;
        long first = -1;
        int most = 0;
        if (ch->hook != hook || !checking)
            continue;
        for (i = 0; i < ch->count; i++) {
            int d = data[i] - ch->expected[i];
            d = d < 0 ? -d : d;
            if (d != 0 && first < 0)
                first = (long)i;
            bad += d != 0;
            most = d > most ? d : most;
        }
        if (most > ch->max_lsb || bad > ch->allowed) {
            failures++;
            printf("FAILED after layer %d %s: tensor %s: %lu of %lu values differ, max %d LSB (allowed: %d LSB in "
                   "%lu values); first at index %ld: %d, expected %d\n", ch->step, ch->layer, ch->tensor, bad,
                   ch->count, most, ch->max_lsb, ch->allowed, first, data[first], ch->expected[first]);
        } else if (bad) {
            printf("within tolerance after layer %d %s: tensor %s: %lu of %lu values differ, max %d LSB\n",
                   ch->step, ch->layer, ch->tensor, bad, ch->count, most);
        }
        count(ch->count, bad, most, ch->output);
        layer_checked[ch->step] = 1;
        memcpy(data, ch->expected, ch->count); /* later steps read the emulator's values */
    }
}

static void check_output(int index, const struct o2g_output_check *out)
{
    unsigned long bad = 0, i;
    long first = -1;
    int most = 0;
    for (i = 0; i < out->count; i++) {
        int d;
        if (out->elem_bytes == 4) {
            d = ((const float *)out->data)[i] != ((const float *)out->expected)[i];
        } else {
            d = ((const int8_t *)out->data)[i] - ((const int8_t *)out->expected)[i];
            d = d < 0 ? -d : d;
        }
        if (d != 0 && first < 0)
            first = (long)i;
        bad += d != 0;
        most = d > most ? d : most;
    }
    if (bad && out->elem_bytes == 4) {
        uint32_t got, want;
        failures++;
        memcpy(&got, (const float *)out->data + first, sizeof got);
        memcpy(&want, (const float *)out->expected + first, sizeof want);
        printf("FAILED: output %d %s (float32): %lu of %lu values differ; first at index %ld: bits 0x%08lx, "
               "expected 0x%08lx\n", index, out->name, bad, out->count, first, (unsigned long)got,
               (unsigned long)want);
    } else if (bad) {
        failures++;
        printf("FAILED: output %d %s: %lu of %lu values differ, max %d LSB; first at index %ld: %d, expected %d\n",
               index, out->name, bad, out->count, most, first, ((const int8_t *)out->data)[first],
               ((const int8_t *)out->expected)[first]);
    }
    count(out->count, bad, most, -1);
    if (out->step >= 0)
        layer_checked[out->step] = 1;
    output_compared += out->count;
    output_differing += bad;
}

static unsigned long cycles(void)
{
#if defined(__riscv)
    unsigned long c;
    __asm__ volatile("rdcycle %0" : "=r"(c));
    return c;
#else
    return 0; /* a host build of the self-test (the project's tests) counts nothing */
#endif
}

#ifdef O2G_NUM_STATES
/* A streaming model: the warm-up steps of its calibration stream, unchecked, carrying the state; 0 when the
   state carried into the checked step is the emulator's. */
static int warm_up(void)
{
    const char *differs;
    int s;
    o2g_stream_reset();
    checking = 0;
    for (s = 0; s < O2G_WARMUP_STEPS; s++) {
        o2g_warmup_inputs_of(s);
        o2g_stream_step();
    }
    checking = 1;
    differs = o2g_carried_state_differs();
    if (differs) {
        printf("FAIL: the state input %s carried through %d steps differs from the emulator's\n", differs,
               O2G_WARMUP_STEPS);
        return 1;
    }
    printf("carried the state through %d steps: exact\n", O2G_WARMUP_STEPS);
    return 0;
}
#endif

int main(void)
{
    unsigned long start, end, layers = 0;
    int i;

#ifdef O2G_NUM_STATES
    if (warm_up())
        return 1;
#endif
    start = cycles();
    o2g_forward();
    end = cycles();
    printf("total: %lu cycles\n", end - start);
    printf("(cycles are rdcycle: on Spike, which has no timing model, they count instructions retired)\n");
    for (i = 0; i < O2G_NUM_OUTPUTS; i++)
        if (!output_hooked[i])
            check_output(i, &o2g_output_checks[i]);
    if (failures) {
        printf("FAIL: %lu of %lu output values differ (%lu of %lu checked tensors beyond their tolerance)\n",
               output_differing, output_compared, failures, checked);
        return 1;
    }
    for (i = 0; i < O2G_NUM_LAYERS; i++)
        layers += layer_checked[i];
    if (O2G_CHECK_LAYERS)
        printf("checked %lu of %d layers: %s\n", layers, O2G_NUM_LAYERS,
               differing ? "all within tolerance" : "all exact");
    if (differing)
        printf("PASS (within %d LSB: %lu of %lu values)\n", largest, differing, compared);
    else
        printf("PASS (exact)\n");
    return 0;
}
