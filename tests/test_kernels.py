"""The emulator's kernels: exact integer arithmetic through float BLAS, Gemmini's rounding and saturation."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx2gemmini import kernels


@pytest.mark.parametrize("k", [1, 1024, 1025, 5000], ids=lambda k: f"K{k}")
def test_int8_matmul_is_exact_at_the_extremes(k):
    a = np.full((3, k), -128, np.int8)
    b = np.full((k, 2), -128, np.int8)
    a[1] = 127
    a[2, ::2] = 127
    exact = a.astype(np.int64) @ b.astype(np.int64)
    got = kernels.int8_matmul(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, exact.astype(np.int32))


@given(i=st.integers(1, 8), k=st.integers(1, 3000), j=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_int8_matmul_random(i, k, j, seed):
    r = np.random.default_rng(seed)
    a = r.integers(-128, 128, (i, k)).astype(np.int8)
    b = r.integers(-128, 128, (k, j)).astype(np.int8)
    np.testing.assert_array_equal(kernels.int8_matmul(a, b), a.astype(np.int64) @ b.astype(np.int64))


def test_fused_pool_pads_with_zero_not_minus_infinity():
    y = np.full((1, 2, 2, 1), -5, np.int8)
    assert kernels.maxpool_zero_padded(y, 3, 1, 1).max() == 0
    assert kernels.maxpool(y, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (2, 2)).max() == -5


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 2600), st.integers(1, 9), st.booleans(), st.integers(0, 2**31 - 1))
def test_accumulator_bound_is_the_largest_column_sum(k, j, bias, seed):
    """128 * max_j sum_k |b[k, j]| + max|d|, with -128 weights (|-128| overflows int8) and K past one chunk."""
    r = np.random.default_rng(seed)
    b = r.integers(-128, 128, (k, j)).astype(np.int8)
    b[r.integers(0, k)] = -128
    d = r.integers(-2**20, 2**20, j).astype(np.int32) if bias else None
    expected = 128 * int(np.abs(b.astype(np.int64)).sum(axis=0).max()) + (int(np.abs(d).max()) if bias else 0)
    assert kernels.accumulator_bound(b, d) == expected
    assert kernels.float32_exact(b, d) == (expected <= 2**24)
