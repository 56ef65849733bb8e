/*
 * o2g_selftest.h: the self-test's checks (onnx2gemmini). model.c, built with -DO2G_SELFTEST, calls
 * o2g_step_done(step) after every plan step; selftest.c compares the tensors checked after that step
 * with the emulator's values (selftest_checks.inc), then writes the emulator's values in place, so
 * every later step runs on exactly the inputs the emulator gave it and no difference propagates.
 */
#ifndef O2G_SELFTEST_H
#define O2G_SELFTEST_H

#include <stddef.h>
#include <stdint.h>

struct o2g_check {
    int step;                 /* checked after this plan step */
    const char *tensor;       /* the tensor's name, for messages */
    int8_t *data;             /* its first element; rows are row_stride elements apart (channel slices) */
    size_t rows, width, row_stride;
    const int8_t *expected;   /* the emulator's values, rows x width, dense */
    int max_lsb;              /* the largest difference allowed */
    size_t allowed;           /* how many values may differ (at most max_lsb each) */
    int output;               /* 1: the tensor is a model output (the FAIL line counts these values) */
    int elem_bytes;           /* 1: int8 values; 4: float32 ones (a model output kept float), compared exactly */
};

void o2g_step_done(int step);

#endif /* O2G_SELFTEST_H */
