"""Data files: .npz, .npy and model-zoo directories; their errors."""
import numpy as np
import pytest
from onnx import numpy_helper

from onnx2gemmini.data import load_data, random_data
from onnx2gemmini.errors import DataError
from onnx2gemmini.graph import ValueInfo

ONE = [ValueInfo("x", (1, 2, 3), np.dtype(np.float32))]
TWO = ONE + [ValueInfo("z", (1, 4), np.dtype(np.float32))]


def test_npz_with_and_without_batch_axis(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.ones((5, 2, 3)), labels=np.arange(5))
    d = load_data(tmp_path / "a.npz", ONE)
    assert d.inputs["x"].shape == (5, 1, 2, 3) and d.inputs["x"].dtype == np.float32
    assert d.labels.tolist() == [0, 1, 2, 3, 4] and d.head(2).num_samples == 2
    np.savez(tmp_path / "b.npz", x=np.ones((4, 1, 2, 3)))
    assert load_data(tmp_path / "b.npz", ONE).num_samples == 4


def test_npy_single_input_only(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((3, 1, 2, 3), np.float32))
    assert load_data(tmp_path / "a.npy", ONE).num_samples == 3
    with pytest.raises(DataError, match="single-input"):
        load_data(tmp_path / "a.npy", TWO)


def test_model_zoo_directory(tmp_path):
    for k in range(3):
        d = tmp_path / f"test_data_set_{k}"
        d.mkdir()
        for i, vi in enumerate(TWO):
            t = numpy_helper.from_array(np.full(vi.shape, k, np.float32))
            (d / f"input_{i}.pb").write_bytes(t.SerializeToString())
    data = load_data(tmp_path, TWO)
    assert data.num_samples == 3 and data.inputs["z"][2].max() == 2


@pytest.mark.parametrize("make,fragment", [
    (lambda p: None, "no such file"),
    (lambda p: p.write_bytes(b"not a zip"), "cannot read"),
    (lambda p: np.savez(p, x=np.ones((2, 9))), "shape"),
    (lambda p: np.savez(p, x=np.array(["a", "b"])), "dtype"),
    (lambda p: np.savez(p, x=np.ones((0, 2, 3))), "no samples"),
], ids=["missing", "garbage", "shape", "strings", "empty"])
def test_bad_files(tmp_path, make, fragment):
    path = tmp_path / "d.npz"
    make(path)
    with pytest.raises(DataError, match=fragment):
        load_data(path, ONE)


def test_inconsistent_sample_counts(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.ones((2, 1, 2, 3)), z=np.ones((3, 1, 4)))
    with pytest.raises(DataError, match="sample counts"):
        load_data(tmp_path / "d.npz", TWO)


def test_random_data_is_deterministic():
    a, b = random_data(TWO, 3), random_data(TWO, 3)
    np.testing.assert_array_equal(a.inputs["x"], b.inputs["x"])


@pytest.mark.parametrize("layout", ["fortran", "big_endian", "float64", "uint8"])
def test_npy_layouts_read_exactly(tmp_path, layout):
    x = np.arange(5 * 6, dtype=np.float32).reshape(5, 1, 2, 3)
    stored = {"fortran": np.asfortranarray(x), "big_endian": x.astype(">f4"), "float64": x.astype(np.float64),
              "uint8": x.astype(np.uint8)}[layout]
    np.save(tmp_path / "a.npy", stored)
    got = load_data(tmp_path / "a.npy", ONE).inputs["x"]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x)


def test_model_zoo_inputs_in_numeric_order(tmp_path):
    inputs = [ValueInfo(f"i{k}", (1, 2), np.dtype(np.float32)) for k in range(11)]
    d = tmp_path / "test_data_set_0"
    d.mkdir()
    for k in range(11):
        (d / f"input_{k}.pb").write_bytes(numpy_helper.from_array(np.full((1, 2), k, np.float32)).SerializeToString())
    data = load_data(tmp_path, inputs)
    assert [int(data.inputs[f"i{k}"][0, 0, 0]) for k in range(11)] == list(range(11))
