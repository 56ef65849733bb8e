"""Bad calibration/evaluation data: one `error:` line, exit 3, no output folder; only needed bytes are read."""
from __future__ import annotations

import io
import tracemalloc
import zipfile

import numpy as np
import pytest
from onnx import numpy_helper

import onnx2gemmini as o2g
from onnx2gemmini.data import load_data
from onnx2gemmini.graph import ValueInfo
from tests.reliability.common import assert_one_error, conv_model, leftovers, save

X = ValueInfo("x", (1, 3, 8, 8), np.dtype(np.float32))
GOOD = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _npy_header(shape, dtype="<f4") -> bytes:
    """An .npy header declaring `shape` (no data follows)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def _zip(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _zoo(tmp, files: dict[str, bytes]):
    folder = tmp / "zoo" / "test_data_set_0"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return tmp / "zoo"


def _tensor(array) -> bytes:
    return numpy_helper.from_array(np.asarray(array)).SerializeToString()


def _write(name, data):
    def build(tmp):
        (tmp / name).write_bytes(data)
        return tmp / name
    return build


def _npz(**arrays):
    def build(tmp):
        np.savez(tmp / "d.npz", **arrays)
        return tmp / "d.npz"
    return build


def _corrupt_deflate(tmp):
    """A compressed member whose deflate stream is damaged (zlib.error while reading it)."""
    path = tmp / "d.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", _npy_bytes(GOOD))
    raw = bytearray(path.read_bytes())
    raw[60:120] = bytes(b ^ 0x55 for b in raw[60:120])
    path.write_bytes(raw)
    return path


def _external_zoo_tensor(tmp):
    tensor = numpy_helper.from_array(GOOD[:1])
    tensor.ClearField("raw_data")
    tensor.data_location = tensor.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "/etc/passwd"
    return _zoo(tmp, {"input_0.pb": tensor.SerializeToString()})


CORPUS = {
    # id: (build(tmp) -> data path, fragments of the error line)
    "npz_is_npy": (_write("d.npz", _npy_bytes(GOOD)), ["not a .npz archive"]),
    "npy_is_npz": (lambda tmp: _zip(tmp / "d.npy", {"x.npy": _npy_bytes(GOOD)}), ["not a .npy array"]),
    "npy_is_text": (_write("d.npy", b"1,2,3\n4,5,6\n"), ["not a .npy array"]),
    "npy_pickled_objects": (_write("d.npy", _npy_bytes(np.array([{"a": 1}, None], dtype=object))),
                            ["Python objects"]),
    "npz_pickled_member": (lambda tmp: _zip(tmp / "d.npz", {"x.npy": _npy_bytes(np.array([1, "a"], dtype=object))}),
                           ["d.npz[x]", "Python objects"]),
    "npz_corrupt_deflate": (_corrupt_deflate, ["d.npz", "cannot read data"]),
    "npy_truncated": (_write("d.npy", _npy_bytes(GOOD)[:-100]), ["truncated"]),
    "npy_declares_huge": (_write("d.npy", _npy_header((10**6, 3, 8000, 8000))), ["data_bytes"]),
    "npz_member_declares_huge": (lambda tmp: _zip(tmp / "d.npz", {"x.npy": _npy_header((10**5, 3, 800, 800))}),
                                 ["d.npz[x]", "data_bytes"]),
    "nan": (_npz(x=np.where(GOOD > 2, np.nan, GOOD)), ["'x'", "NaN"]),
    "inf": (_npz(x=np.where(GOOD > 2, np.inf, GOOD)), ["'x'", "infinite"]),
    "strings": (_npz(x=np.array(["a", "b"])), ["dtype"]),
    "wrong_shape_same_size": (_npz(x=GOOD.reshape(4, 3, 64)), ["shape"]),
    "labels_not_integers": (_npz(x=GOOD, labels=np.ones(4)), ["labels"]),
    "zoo_misnamed_file": (lambda tmp: _zoo(tmp, {"input_a.pb": _tensor(GOOD[:1])}), ["input_a.pb", "input_<N>.pb"]),
    "zoo_numbering_gap": (lambda tmp: _zoo(tmp, {"input_1.pb": _tensor(GOOD[:1])}), ["expected input_0.pb"]),
    "zoo_not_a_tensor": (lambda tmp: _zoo(tmp, {"input_0.pb": b"\xff\xfe garbage"}), ["not a serialized ONNX tensor"]),
    "zoo_external_data": (_external_zoo_tensor, ["external data"]),
    "zoo_declares_huge": (lambda tmp: _zoo(tmp, {"input_0.pb": _huge_zoo_tensor()}), ["tensor_bytes"]),
    "unknown_suffix": (_write("d.csv", b"1,2,3"), ["unknown data format"]),
}


def _huge_zoo_tensor() -> bytes:
    tensor = numpy_helper.from_array(GOOD[:1])
    del tensor.dims[:]
    tensor.dims.extend([1, 3, 10**6, 10**6])
    return tensor.SerializeToString()


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_bad_calibration_data_is_one_error_line(cli, tmp_path, memory_cap, case):
    build, fragments = CORPUS[case]
    model = save(conv_model(), tmp_path / "m.onnx")
    data = build(tmp_path)
    assert_one_error(cli(model, "--calib", data, "-o", tmp_path / "out"), 3, *fragments)
    assert leftovers(tmp_path, "out") == []


def test_bad_evaluation_data_in_diff(cli, tmp_path):
    model = save(conv_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "eval.npz", x=np.where(GOOD > 2, np.inf, GOOD))
    assert_one_error(cli("diff", model, "--data", tmp_path / "eval.npz"), 3, "eval.npz", "infinite")


def test_data_limits_from_the_command_line(cli, tmp_path):
    model = save(conv_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=GOOD)
    assert_one_error(cli(model, "--calib", tmp_path / "d.npz", "--limit", "data_bytes=1K", "-o", tmp_path / "o"),
                     3, "d.npz[x]", "data_bytes")
    assert_one_error(cli(model, "--calib", tmp_path / "d.npz", "--limit", "data_samples=3", "-o", tmp_path / "o"),
                     3, "data_samples")
    assert_one_error(cli(model, "--num-calib", "9", "--limit", "data_samples=8", "-o", tmp_path / "o"),
                     3, "random data", "data_samples")
    assert leftovers(tmp_path, "o") == []


def test_unrelated_npz_members_are_not_read(tmp_path):
    """A member the model does not need is never unpacked: neither a corrupt one nor a big one."""
    path = tmp_path / "d.npz"
    _zip(path, {"x.npy": _npy_bytes(GOOD), "corrupt.npy": _npy_header((1 << 28,)) + b"short"})
    np.testing.assert_array_equal(load_data(path, [X]).inputs["x"], GOOD[:, None])
    big = tmp_path / "big.npz"
    with zipfile.ZipFile(big, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("x.npy", _npy_bytes(GOOD))
        with z.open("unrelated.npy", "w", force_zip64=True) as f:  # 64 MiB of zeros, ~64 KiB on disk
            f.write(_npy_header((1 << 24,)))
            zeros = bytes(1 << 20)
            for _ in range(64):
                f.write(zeros)
    assert big.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        data = load_data(big, [X])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data.num_samples == 4 and peak < 8 << 20, peak


def test_in_memory_forms_agree(tmp_path):
    """The API's data forms (CONTRACTS.md) give the same calibration as the same samples in a file."""
    np.savez(tmp_path / "d.npz", x=GOOD)
    reference = o2g.compile(conv_model(), calib=tmp_path / "d.npz").plan.to_dict()
    for form in (GOOD, {"x": GOOD}, [{"x": s} for s in GOOD[:, None]], ({"x": s} for s in GOOD[:, None])):
        assert o2g.compile(conv_model(), calib=form).plan.to_dict() == reference


def test_an_endless_iterable_stops_at_the_sample_limit():
    def endless():
        while True:
            yield {"x": GOOD[:1]}

    with pytest.raises(o2g.DataError, match="data_samples"):
        o2g.compile(conv_model(), calib=endless(), limits={"data_samples": 50})


def test_diff_applies_the_limits_to_its_evaluation_data(tmp_path):
    np.savez(tmp_path / "eval.npz", x=np.repeat(GOOD, 3, axis=0))
    limit = {"data_samples": len(GOOD)}
    assert o2g.diff(conv_model(), calib=GOOD, data=GOOD, limits=limit)["samples"] == len(GOOD)
    with pytest.raises(o2g.DataError, match="eval.npz.*data_samples"):
        o2g.diff(conv_model(), calib=GOOD, data=tmp_path / "eval.npz", limits=limit)


@pytest.mark.parametrize("calib,error,fragment", [
    (12, o2g.UsageError, "got int"),
    (b"bytes", o2g.UsageError, "got bytes"),
    ([1, 2, 3], o2g.UsageError, "data sample 0"),
    ({"y": GOOD}, o2g.DataError, "no array for model input(s) x"),
    ({"x": [[1, 2], [3]]}, o2g.DataError, "not an array of numbers"),
    ({"x": np.array([object(), object()])}, o2g.DataError, "dtype object"),
    (np.zeros((0, 3, 8, 8), np.float32), o2g.DataError, "no samples"),
    ([], o2g.DataError, "no samples"),
], ids=["int", "bytes", "list_of_ints", "wrong_key", "ragged", "objects", "empty_array", "empty_list"])
def test_in_memory_mistakes_are_library_errors(calib, error, fragment):
    with pytest.raises(error) as info:
        o2g.compile(conv_model(), calib=calib)
    assert fragment in str(info.value) and "\n" not in str(info.value)
