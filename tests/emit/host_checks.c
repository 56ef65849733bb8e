/*
 * The step checks of a model.mlir emitted with check_steps (tests/emit/test_mlir.py): @o2g_rt_check(k, t)
 * compares tensor t with check k's expected values, records how many differ and by how much, and writes
 * the expected values in place, so the next steps run on the emulator's values.
 */
#include <stdint.h>
#include <stdlib.h>

#include "o2g_mlir_abi.h"

struct o2g_test_check {
    const int8_t *expected;
    int64_t count, differing;
    int largest, done;
};

static struct o2g_test_check *checks;
static int64_t num_checks;

void o2g_test_set_checks(int64_t n)
{
    free(checks);
    checks = calloc((size_t)(n ? n : 1), sizeof *checks);
    num_checks = n;
}

void o2g_test_set_check(int64_t k, const int8_t *expected, int64_t count)
{
    checks[k].expected = expected;
    checks[k].count = count;
}

void o2g_test_check_result(int64_t k, int64_t *differing, int *largest, int *done)
{
    *differing = checks[k].differing;
    *largest = checks[k].largest;
    *done = checks[k].done;
}

void _mlir_ciface_o2g_rt_check(int64_t k, o2g_unranked_memref *t)
{
    int8_t *data = o2g_memref_data(t, 1);
    int64_t i;
    if (k < 0 || k >= num_checks)
        abort();
    for (i = 0; i < checks[k].count; i++) {
        int d = data[i] - checks[k].expected[i];
        d = d < 0 ? -d : d;
        checks[k].differing += d != 0;
        checks[k].largest = d > checks[k].largest ? d : checks[k].largest;
        data[i] = checks[k].expected[i];
    }
    checks[k].done = 1;
}
