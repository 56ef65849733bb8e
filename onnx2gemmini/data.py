"""Calibration and evaluation data in the formats of CONTRACTS.md: .npz, .npy, model-zoo directories."""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import DataError
from .graph import ValueInfo


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


def _read_raw(path: Path, input_names: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_dir():
        return _read_zoo_dir(path, input_names), None
    try:
        if path.suffix == ".npy":
            if len(input_names) != 1:
                raise DataError(f"{path}: a .npy file serves single-input models; this model has inputs "
                                f"{', '.join(input_names)} (use .npz keyed by input name)")
            return {input_names[0]: np.load(path, allow_pickle=False)}, None
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
            labels = arrays.pop("labels", None)
            missing = [n for n in input_names if n not in arrays]
            if missing:
                raise DataError(f"{path}: no array for model input(s) {', '.join(missing)} "
                                f"(arrays: {', '.join(sorted(arrays)) or 'none'})")
            return {n: arrays[n] for n in input_names}, labels
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise DataError(f"{path}: cannot read data: {str(exc).splitlines()[0][:200]}") from None
    raise DataError(f"{path}: unknown data format (expected .npz, .npy or a test_data_set_* directory)")


def _read_zoo_dir(path: Path, input_names: list[str]) -> dict[str, np.ndarray]:
    sets = sorted(p for p in path.glob("test_data_set_*") if p.is_dir())
    if not sets and list(path.glob("input_*.pb")):
        sets = [path]
    if not sets:
        raise DataError(f"{path}: no test_data_set_* directories with input_*.pb files")
    columns: dict[str, list[np.ndarray]] = {n: [] for n in input_names}
    for s in sets:
        files = sorted(s.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        if len(files) != len(input_names):
            raise DataError(f"{s}: {len(files)} input_*.pb files, the model has {len(input_names)} inputs")
        for name, f in zip(input_names, files):
            tensor = onnx.TensorProto()
            try:
                tensor.ParseFromString(f.read_bytes())
                columns[name].append(numpy_helper.to_array(tensor))
            except Exception:
                raise DataError(f"{f}: not a serialized ONNX tensor") from None
    try:
        return {n: np.stack(v) for n, v in columns.items()}
    except ValueError:
        raise DataError(f"{path}: samples of one input have different shapes") from None


def _fit(name: str, array: np.ndarray, shape: tuple[int, ...], source: str) -> np.ndarray:
    """Samples shaped like the input, or like the input without its batch-1 axis, -> [S, *shape]."""
    if not np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype, np.complexfloating):
        raise DataError(f"{source}: input '{name}' has dtype {array.dtype}, expected numbers")
    if array.ndim >= 1 and tuple(array.shape[1:]) == tuple(shape):
        fitted = array
    elif shape and shape[0] == 1 and tuple(array.shape[1:]) == tuple(shape[1:]):
        fitted = array.reshape((array.shape[0],) + tuple(shape))
    else:
        raise DataError(f"{source}: input '{name}' has shape {list(array.shape)}; expected samples on axis 0 "
                        f"shaped {list(shape)} or {list(shape[1:])}")
    if fitted.shape[0] == 0:
        raise DataError(f"{source}: input '{name}' has no samples")
    fitted = fitted.astype(np.float32)
    if not np.all(np.isfinite(fitted)):
        raise DataError(f"{source}: input '{name}' contains NaN or infinite values")
    return fitted


def load_data(path: "str | Path", inputs: list[ValueInfo]) -> Dataset:
    """Read a data file for a model whose (static) inputs are `inputs`."""
    path = Path(path)
    raw, labels = _read_raw(path, [i.name for i in inputs])
    fitted = {i.name: _fit(i.name, raw[i.name], i.shape, str(path)) for i in inputs}
    counts = {len(v) for v in fitted.values()}
    if len(counts) != 1:
        raise DataError(f"{path}: inputs have different sample counts {sorted(counts)}")
    if labels is not None:
        labels = np.asarray(labels)
        if labels.ndim != 1 or len(labels) != counts.pop() or not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"{path}: 'labels' must be one integer class id per sample")
    return Dataset(fitted, labels, str(path))


def random_data(inputs: list[ValueInfo], num_samples: int = 8, seed: int = 0) -> Dataset:
    """Deterministic stand-in data (standard normal), used when the user gives none."""
    rng = np.random.default_rng(seed)
    arrays = {i.name: rng.standard_normal((num_samples,) + tuple(i.shape)).astype(np.float32) for i in inputs}
    return Dataset(arrays, None, f"random (seed {seed})")
