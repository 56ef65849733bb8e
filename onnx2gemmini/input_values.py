"""`--input-value NAME=V`: an input frozen to a constant before simplification.

Why: streaming and signal models take inputs that never change on a device (a sample rate, a flag, a fixed
length) and branch on them (`If`, `Where`, `Equal`). Frozen, the input becomes an initializer, onnxsim folds
the branches, and the compiled model no longer reads it; `diff` feeds the same value to the user's original
model, and the report records it.

A value is a number, or numbers separated by commas for a small tensor, read in the input's declared element
type; its count must fill the declared shape (one dynamic dimension takes the rest). Any other declaration is
one UsageError: an input the model lacks or does not read, a value its type cannot hold, a wrong count.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import UsageError
from .per_output import named

MAX_VALUES = 4096  # a frozen input is a small constant (a rate, a flag, a table), not data
_NUMBER_KINDS = "biuf"


def parse(specs) -> dict[str, list]:
    """`NAME=V[,V...]` strings (or one such string), or a {name: value} mapping -> {name: raw value}; the
    values are typed against the model later (`freeze`)."""
    mapping, items = named(specs, "--input-value", "input_values", "NAME=V", last=False)
    if mapping is not None:
        return {str(k): v for k, v in mapping.items()}
    values = {}
    for spec, name, text in items:
        if not name or not text.strip():
            raise UsageError(f"--input-value '{spec}': expected NAME=V (a number, or numbers separated by commas)")
        if name in values:
            raise UsageError(f"--input-value: '{name}' given twice")
        values[name] = [part.strip() for part in text.split(",")]
    return values


def freeze(model: onnx.ModelProto, values: dict) -> dict[str, np.ndarray]:
    """Turn each named graph input of `model` into an initializer holding its value (in place); returns the
    typed values, for the report and for running the original model."""
    if not values:
        return {}
    initializers = {t.name for t in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in initializers}
    read = _read_names(model.graph)
    frozen = {}
    for name, raw in values.items():
        if name not in inputs:
            raise UsageError(f"--input-value: the model has no input '{name}' "
                             f"(inputs: {', '.join(sorted(inputs)) or 'none'})")
        if name not in read:
            raise UsageError(f"--input-value {name}: the model does not read this input; nothing to freeze")
        frozen[name] = _typed(name, raw, inputs[name])
    for name, array in frozen.items():
        model.graph.input.remove(inputs[name])
        model.graph.initializer.append(numpy_helper.from_array(array, name))
    return frozen


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name a node reads, inside If/Loop/Scan bodies too (they may read outer names)."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _read_names(sub)
    names.update(o.name for o in graph.output)  # an input returned as an output is read too
    return names


def _typed(name: str, raw, info: onnx.ValueInfoProto) -> np.ndarray:
    """The value as an array of the input's element type and declared shape, or a UsageError."""
    what = f"--input-value {name}"
    tensor = info.type.tensor_type
    if not info.type.HasField("tensor_type"):
        raise UsageError(f"{what}: the input is not a tensor")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    if dtype.kind not in _NUMBER_KINDS:
        raise UsageError(f"{what}: the input's type {onnx.TensorProto.DataType.Name(tensor.elem_type)} "
                         f"cannot be frozen (numbers and booleans only)")
    items = list(np.ravel(raw)) if not isinstance(raw, (list, tuple)) else list(np.ravel(np.array(raw, object)))
    if not items or len(items) > MAX_VALUES:
        raise UsageError(f"{what}: {len(items)} values (a frozen input holds 1 to {MAX_VALUES})")
    typed = np.array([_number(what, v, dtype) for v in items], dtype)
    return typed.reshape(_shape(what, tensor, len(items)))


def _number(what: str, value, dtype: np.dtype):
    """One value in `dtype`, exactly: an integer input takes integers within its range, a boolean 0/1/true/
    false, a float input any finite number."""
    text = value.strip() if isinstance(value, str) else value
    if dtype.kind == "b":
        if isinstance(text, str) and text.lower() in ("true", "false", "0", "1"):
            return text.lower() in ("true", "1")
        if isinstance(text, (bool, np.bool_)) or (isinstance(text, (int, np.integer)) and text in (0, 1)):
            return bool(text)
        raise UsageError(f"{what}: {value!r} is not a boolean (0, 1, true or false)")
    try:
        number = float(text) if dtype.kind == "f" else _integer(text)
    except (TypeError, ValueError):
        kind = "a finite number" if dtype.kind == "f" else f"an integer ({dtype.name})"
        raise UsageError(f"{what}: {value!r} is not {kind}") from None
    if dtype.kind == "f":
        if not math.isfinite(number) or abs(number) > np.finfo(dtype).max:
            raise UsageError(f"{what}: {value!r} is not a finite {dtype.name}")
        return number
    info = np.iinfo(dtype)
    if not info.min <= number <= info.max:
        raise UsageError(f"{what}: {value!r} is outside {dtype.name}'s range [{info.min}, {info.max}]")
    return number


def _integer(value) -> int:
    """An integer from text ('16000', '-3') or a Python/NumPy integer; a float with a fraction is refused."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not float(value).is_integer():
            raise ValueError(value)
        return int(value)
    return int(str(value), 10)


def _shape(what: str, tensor, count: int) -> tuple[int, ...]:
    """The declared shape filled by `count` values; at most one dynamic dimension, which takes the rest."""
    if not tensor.HasField("shape"):
        return () if count == 1 else (count,)
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor.shape.dim]
    known = math.prod(d for d in dims if d is not None)
    unknown = dims.count(None)
    text = "x".join("?" if d is None else str(d) for d in dims) or "a scalar"
    if unknown > 1 or (unknown == 1 and (known == 0 or count % known)) or (unknown == 0 and count != known):
        raise UsageError(f"{what}: {count} value{'s' * (count != 1)} given; the input's shape is {text}")
    return tuple(count // known if d is None else d for d in dims)
