"""Calibration and evaluation data in the formats of CONTRACTS.md: .npz, .npy, model-zoo directories, and the
in-memory forms of the Python API (an array, a dict of arrays, an iterable of per-sample dicts, a Dataset).

Every source is validated the same way (shapes, numbers, finiteness, labels) and sized against limits.py
from what it declares (.npy headers, file sizes) before its arrays are read; only the members the model
needs are read from an .npz.
"""
from __future__ import annotations

import itertools
import math
import re
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from . import limits
from .errors import DataError, UsageError
from .graph import ValueInfo

LABELS = "labels"
_ZOO_INPUT = re.compile(r"input_(\d+)\.pb")


@dataclass(frozen=True)
class Dataset:
    """Samples per model input (axis 0 = sample, each sample shaped like the model input) and labels."""

    inputs: dict[str, np.ndarray]
    labels: np.ndarray | None
    source: str

    @property
    def num_samples(self) -> int:
        return len(next(iter(self.inputs.values())))

    def sample(self, i: int) -> dict[str, np.ndarray]:
        return {k: v[i] for k, v in self.inputs.items()}

    def head(self, n: int | None) -> "Dataset":
        if n is None or n >= self.num_samples:
            return self
        labels = None if self.labels is None else self.labels[:n]
        return Dataset({k: v[:n] for k, v in self.inputs.items()}, labels, self.source)


def load_data(source, inputs: list[ValueInfo]) -> Dataset:
    """Data for a model whose (static) inputs are `inputs`, from a file, a directory or memory."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        raw, labels = _read_raw(path, [i.name for i in inputs])
        where = str(path)
    else:
        raw, labels, where = _from_memory(source, [i.name for i in inputs])
    fitted = {i.name: fit_samples(i, raw[i.name], where) for i in inputs}
    counts = sorted({len(v) for v in fitted.values()})
    if len(counts) != 1:
        raise DataError(f"{where}: inputs have different sample counts {counts}")
    limits.exceeded("data_samples", f"{where}: samples", counts[0], DataError)
    return Dataset(fitted, _check_labels(labels, counts[0], where), where)


def random_data(inputs: list[ValueInfo], num_samples: int = 8, seed: int = 0) -> Dataset:
    """Deterministic stand-in data (standard normal), used when the user gives none; sized before drawn."""
    limits.exceeded("data_samples", "random data: samples", num_samples, DataError)
    size = sum(num_samples * math.prod(i.shape) * 4 for i in inputs)
    limits.exceeded("data_bytes", f"random calibration data ({num_samples} samples of "
                    f"{', '.join(_shape_text(i) for i in inputs)})", size, DataError)
    rng = np.random.default_rng(seed)
    arrays = {i.name: _random_ids(rng, i, num_samples) if np.dtype(i.dtype).kind in "iu"
              else rng.standard_normal((num_samples,) + tuple(i.shape)).astype(np.float32) for i in inputs}
    return Dataset(arrays, None, f"random (seed {seed})")


def _random_ids(rng: np.random.Generator, info: ValueInfo, num_samples: int) -> np.ndarray:
    """Uniform token ids over the rows the input's lookups can address; an attention mask pads each sequence
    after a random length of at least one position."""
    shape = (num_samples,) + tuple(info.shape)
    if info.attention_mask:
        return padding_masks(rng, shape, info.dtype)
    return rng.integers(0, info.index_limit or 1, shape).astype(info.dtype)


def padding_masks(rng: np.random.Generator, shape, dtype, shortest: int = 1) -> np.ndarray:
    """Attention masks as a tokenizer pads: along the last axis, ones for a random length of at least
    `shortest`, then zeros."""
    lengths = rng.integers(shortest, shape[-1] + 1, tuple(shape[:-1]))
    return (np.arange(shape[-1]) < lengths[..., None]).astype(dtype)


def _shape_text(info: ValueInfo) -> str:
    return f"'{info.name}' " + "x".join(map(str, info.shape))


# ---- files ---------------------------------------------------------------------------------------------

def _read_raw(path: Path, input_names: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """({input: array}, labels) from a file or model-zoo folder; the format comes from the suffix and
    content that does not match it is a DataError, not an internal error."""
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_dir():
        return _read_zoo_dir(path, input_names), None
    if not path.is_file():
        raise DataError(f"{path}: not a regular file (a device, FIFO or socket)")
    try:
        if path.suffix == ".npy":
            if len(input_names) != 1:
                raise DataError(f"{path}: a .npy file serves single-input models; this model has inputs "
                                f"{', '.join(input_names)} (use .npz keyed by input name)")
            with open(path, "rb") as f:
                header = _npy_header(f, str(path))
                _check_declared([(str(path), header)])
                return {input_names[0]: _npy_payload(f, header, str(path))}, None
        if path.suffix == ".npz":
            return _read_npz(path, input_names)
    except OSError as exc:
        raise DataError(f"{path}: cannot read data: {exc.strerror or exc}") from None
    raise DataError(f"{path}: unknown data format (expected .npz, .npy or a test_data_set_* directory)")


def _read_npz(path: Path, input_names: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Read only the members the model needs (and labels), each sized from its header first."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = {n[:-4]: n for n in archive.namelist() if n.endswith(".npy")}
            missing = [n for n in input_names if n not in members]
            if missing:
                raise DataError(f"{path}: no array for model input(s) {', '.join(missing)} "
                                f"(arrays: {', '.join(sorted(members)) or 'none'})")
            wanted = input_names + ([LABELS] if LABELS in members else [])
            headers = []
            for name in wanted:
                with archive.open(members[name]) as f:
                    headers.append((f"{path}[{name}]", _npy_header(f, f"{path}[{name}]")))
            _check_declared(headers)
            arrays = {}
            for name, (where, header) in zip(wanted, headers):
                with archive.open(members[name]) as f:
                    _npy_header(f, where)
                    arrays[name] = _npy_payload(f, header, where)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        # RuntimeError: an encrypted member; NotImplementedError: an unknown compression method
        raise DataError(f"{path}: cannot read data: not a .npz archive ({str(exc).splitlines()[0][:120]})") from None
    labels = arrays.pop(LABELS, None)
    return arrays, labels


def _npy_header(f, where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) from an .npy header, reading nothing else."""
    try:
        version = np.lib.format.read_magic(f)
        reader = {1: np.lib.format.read_array_header_1_0, 2: np.lib.format.read_array_header_2_0}.get(version[0])
        if reader is None:
            raise DataError(f"{where}: unsupported .npy format version {version[0]}.{version[1]}")
        shape, fortran, dtype = reader(f)
    except (ValueError, SyntaxError, EOFError, TypeError) as exc:
        raise DataError(f"{where}: cannot read data: not a .npy array ({str(exc).splitlines()[0][:120]})") from None
    if dtype.hasobject:
        raise DataError(f"{where}: holds Python objects (a pickled array); expected numbers")
    return tuple(int(d) for d in shape), bool(fortran), dtype


def _npy_payload(f, header: tuple[tuple[int, ...], bool, np.dtype], where: str) -> np.ndarray:
    """The array after its header: exactly the declared bytes, or a DataError if the file is short."""
    shape, fortran, dtype = header
    buffer = bytearray(math.prod(shape) * dtype.itemsize)
    view, got = memoryview(buffer), 0
    while got < len(buffer):
        n = f.readinto(view[got:])
        if not n:
            raise DataError(f"{where}: truncated ({got} of {len(buffer)} bytes)")
        got += n
    return np.frombuffer(buffer, dtype).reshape(shape, order="F" if fortran else "C")


def _check_declared(headers: list[tuple[str, tuple]]) -> None:
    """The declared arrays together within data_bytes (at least float32 per value), before reading them."""
    total = 0
    for where, (shape, _, dtype) in headers:
        total += math.prod(shape) * max(dtype.itemsize, 4)
        limits.exceeded("data_bytes", f"{where} ({'x'.join(map(str, shape)) or 'scalar'} {dtype})", total,
                        DataError)
        if shape:
            limits.exceeded("data_samples", f"{where}: samples", shape[0], DataError)


def _read_zoo_dir(path: Path, input_names: list[str]) -> dict[str, np.ndarray]:
    sets = sorted(p for p in path.glob("test_data_set_*") if p.is_dir())
    if not sets and list(path.glob("input_*.pb")):
        sets = [path]
    if not sets:
        raise DataError(f"{path}: no test_data_set_* directories with input_*.pb files")
    limits.exceeded("data_samples", f"{path}: samples", len(sets), DataError)
    files = [_zoo_inputs(s, len(input_names)) for s in sets]
    total = sum(f.stat().st_size for row in files for f in row)
    limits.exceeded("data_bytes", f"{path}: input_*.pb files", total, DataError)
    columns: dict[str, list[np.ndarray]] = {n: [] for n in input_names}
    for row in files:
        for name, f in zip(input_names, row):
            columns[name].append(_read_tensor(f))
    try:
        return {n: np.stack(v) for n, v in columns.items()}
    except ValueError:
        raise DataError(f"{path}: samples of one input have different shapes") from None


def _zoo_inputs(folder: Path, count: int) -> list[Path]:
    """input_0.pb .. input_{count-1}.pb of one test_data_set_*, named exactly so."""
    files = sorted(folder.glob("input_*.pb"))
    numbers = {}
    for f in files:
        match = _ZOO_INPUT.fullmatch(f.name)
        if not match or not f.is_file():
            raise DataError(f"{f}: expected a file named input_<N>.pb (N = 0, 1, ...)")
        numbers[int(match.group(1))] = f
    if sorted(numbers) != list(range(count)):
        raise DataError(f"{folder}: input files {', '.join(f.name for f in files) or 'none'}; the model has "
                        f"{count} input(s): expected input_0.pb .. input_{count - 1}.pb")
    return [numbers[i] for i in range(count)]


def _read_tensor(f: Path) -> np.ndarray:
    """A serialized TensorProto with its data inline (external data would read arbitrary files)."""
    from .load import check_tensor

    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(f.read_bytes())
    except Exception:
        raise DataError(f"{f}: not a serialized ONNX tensor") from None
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise DataError(f"{f}: tensors with external data are refused in data directories")
    check_tensor(tensor, str(f), DataError)
    try:
        return numpy_helper.to_array(tensor)
    except Exception:
        raise DataError(f"{f}: not a serialized ONNX tensor") from None


# ---- memory --------------------------------------------------------------------------------------------

def _from_memory(source, input_names: list[str]) -> tuple[dict, np.ndarray | None, str]:
    """The API's in-memory forms -> ({input: samples}, labels, description)."""
    if isinstance(source, Dataset):
        return _named(dict(source.inputs), input_names, source.source), source.labels, source.source
    if isinstance(source, np.ndarray):
        if len(input_names) != 1:
            raise DataError(f"an array serves single-input models; this model has inputs "
                            f"{', '.join(input_names)} (pass a dict keyed by input name)")
        return {input_names[0]: source}, None, "array"
    if isinstance(source, Mapping):
        arrays = {str(k): _as_array(v, f"data[{k!r}]") for k, v in source.items()}
        labels = arrays.pop(LABELS, None)
        return _named(arrays, input_names, "data dict"), labels, "data dict"
    if isinstance(source, Iterable) and not isinstance(source, (bytes, bytearray)):
        return _stack_samples(source, input_names) + ("data samples",)
    raise UsageError(f"data: expected a path, an array, a dict of arrays, an iterable of per-sample dicts or a "
                     f"Dataset, got {type(source).__name__}")


def _named(arrays: dict, input_names: list[str], where: str) -> dict:
    """The arrays of the model's inputs (others are ignored, as in an .npz)."""
    missing = [n for n in input_names if n not in arrays]
    if missing:
        raise DataError(f"{where}: no array for model input(s) {', '.join(missing)} "
                        f"(arrays: {', '.join(sorted(arrays)) or 'none'})")
    return {n: arrays[n] for n in input_names}


def _as_array(value, where: str) -> np.ndarray:
    """np.asarray, with ragged nested lists a DataError rather than a ValueError."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise DataError(f"{where}: not an array of numbers ({str(exc).splitlines()[0][:120]})") from None


def _stack_samples(samples: Iterable, input_names: list[str]) -> tuple[dict, np.ndarray | None]:
    """An iterable of {input: one sample} dicts, read no further than the data_samples limit."""
    limit = limits.current().data_samples
    columns: dict[str, list[np.ndarray]] = {n: [] for n in input_names}
    labels, total = [], 0
    for i, sample in enumerate(itertools.islice(samples, limit + 1)):
        limits.exceeded("data_samples", "data samples", i + 1, DataError)
        if not isinstance(sample, Mapping):
            raise UsageError(f"data sample {i}: expected a dict of arrays keyed by input name, got "
                             f"{type(sample).__name__}")
        arrays = {str(k): _as_array(v, f"data sample {i}[{k!r}]") for k, v in sample.items()}
        if LABELS in arrays:
            labels.append(arrays.pop(LABELS))
        for name, array in _named(arrays, input_names, f"data sample {i}").items():
            total += array.size * max(array.dtype.itemsize, 4)
            limits.exceeded("data_bytes", "data samples", total, DataError)
            columns[name].append(array)
    if not columns[input_names[0]]:
        raise DataError("data samples: the iterable holds no samples")
    if labels and len(labels) != len(columns[input_names[0]]):
        raise DataError("data samples: 'labels' must be given for every sample or for none")
    try:
        stacked = {n: np.stack(v) for n, v in columns.items()}
    except ValueError:
        raise DataError("data samples: samples of one input have different shapes") from None
    return stacked, (np.asarray(labels) if labels else None)


# ---- validation ----------------------------------------------------------------------------------------

def fit_samples(info: ValueInfo, array: np.ndarray, source: str) -> np.ndarray:
    """Samples shaped like the input, or like the input without its batch-1 axis, -> [S, *shape] of the
    input's type; real numbers only, finite."""
    name, shape = info.name, tuple(info.shape)
    array = np.asarray(array)
    if array.dtype.kind not in "iuf":
        raise DataError(f"{source}: input '{name}' has dtype {array.dtype}, expected real numbers")
    if array.ndim >= 1 and tuple(array.shape[1:]) == shape:
        fitted = array
    elif shape and shape[0] == 1 and tuple(array.shape[1:]) == shape[1:]:
        fitted = array.reshape((array.shape[0],) + shape)
    else:
        raise DataError(f"{source}: input '{name}' has shape {list(array.shape)}; expected samples on axis 0 "
                        f"shaped {list(shape)} or {list(shape[1:])}")
    if fitted.shape[0] == 0:
        raise DataError(f"{source}: input '{name}' has no samples")
    target = np.dtype(info.dtype) if np.dtype(info.dtype).kind in "iuf" else np.dtype(np.float32)
    if target.kind in "iu" and fitted.dtype.kind == "f":
        raise DataError(f"{source}: input '{name}' holds floats; the model's input is {target}")
    fitted = fitted.astype(target, copy=False)
    if target.kind == "f" and not np.isfinite(fitted).all():
        raise DataError(f"{source}: input '{name}' contains NaN or infinite values")
    if target.kind in "iu" and info.index_limit is not None and fitted.size:
        low, high = int(array.min()), int(array.max())
        if low < -info.index_limit or high >= info.index_limit:
            bad = low if low < -info.index_limit else high
            raise DataError(f"{source}: input '{name}' holds id {bad}, outside the table it indexes "
                            f"({info.index_limit} rows: ids {-info.index_limit} to {info.index_limit - 1})")
    if info.attention_mask and fitted.size:
        _check_attention_mask(fitted, info, source)
    return fitted


def _check_attention_mask(mask: np.ndarray, info: ValueInfo, source: str) -> None:
    """0 (masked) and 1 (attend) only, the values the mask's ops were probed with (passes/input_mask.py); and,
    padding or causal, every query attends to some position: a row of zeros (or, causal, a masked first
    position) would leave a softmax row with nothing to normalize, which the int8 code and the model define
    differently."""
    other = mask[(mask != 0) & (mask != 1)]
    if other.size:
        raise DataError(f"{source}: attention mask '{info.name}' holds {int(other[0])}; a mask holds 0 (masked) "
                        f"and 1 (attend)")
    if info.attention_mask == "query_key":
        return
    empty = ~(mask != 0).any(axis=-1) if info.attention_mask == "padding" else mask[..., 0] == 0
    if empty.any():
        sample = int(np.argwhere(empty)[0][0])
        why = "masks every position" if info.attention_mask == "padding" else \
            "masks its first position, which a causal mask leaves the first query alone with (pad on the right)"
        raise DataError(f"{source}: attention mask '{info.name}' of sample {sample} {why}")


def _check_labels(labels, count: int, where: str) -> np.ndarray | None:
    """Labels, when given, are one integer class id per sample (accuracy is computed from them)."""
    if labels is None:
        return None
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != count or labels.dtype.kind not in "iu":
        raise DataError(f"{where}: 'labels' must be one integer class id per sample")
    return labels
