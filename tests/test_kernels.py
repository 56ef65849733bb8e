"""The emulator's kernels: exact integer arithmetic through float BLAS, Gemmini's rounding and saturation."""
import numpy as np
import pytest
from hypothesis import given
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
