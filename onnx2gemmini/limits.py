"""Size limits on what the compiler reads and allocates, as data: every one named, documented, overridable.

A model or data file that declares a huge tensor must fail with one line naming the tensor and the limit,
before anything large is allocated, rather than with a MemoryError (or a swapping machine) minutes later.
The defaults let real models through (ResNet-50: ~100 MB of weights, ~250 MB of float32 activations per
sample; VGG-19: ~550 MB of weights, largest tensor 410 MB, ~700 MB of activations) and stop the pathological
ones at once. Override them with `--limit NAME=VALUE` (CLI) or `limits={NAME: VALUE}`
(Python API); VALUE is an integer with an optional K/M/G/T (binary) suffix, or `none` for no limit.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
from dataclasses import dataclass
from typing import Iterator, Mapping

from .errors import UsageError

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
UNLIMITED = 1 << 62


@dataclass(frozen=True)
class Limits:
    """The limits in force; every field is a count (bytes, elements, samples)."""

    model_bytes: int = 2 * GiB       # the .onnx file plus its external-data files
    tensor_bytes: int = 1 * GiB      # any one initializer, or any one activation of one sample (float32)
    max_dim: int = 1 << 24           # any one dimension of a model input or an --input-shape
    activation_bytes: int = 8 * GiB  # activations of one sample held at once, copies included (past it: pieces)
    data_bytes: int = 2 * GiB        # calibration or evaluation data as loaded (at least float32 per value)
    data_samples: int = 1_000_000    # calibration or evaluation samples
    layer_check_bytes: int = 256 * MiB  # CHECK_LAYERS=1's expected values; past it, only the first steps'

    def replace(self, **values: int) -> "Limits":
        return dataclasses.replace(self, **values)


DESCRIPTIONS = {
    "model_bytes": "the .onnx file plus its external data",
    "tensor_bytes": "any one initializer or activation of one sample",
    "max_dim": "any one dimension of a model input",
    "activation_bytes": "activations of one sample held at once (a larger model runs in pieces that fit)",
    "data_bytes": "calibration or evaluation data as loaded",
    "data_samples": "calibration or evaluation samples",
    "layer_check_bytes": "the self-test's values of every step (CHECK_LAYERS=1; past it, of the first steps)",
}
COUNTS = ("max_dim", "data_samples")  # the other limits are in bytes
NAMES = tuple(f.name for f in dataclasses.fields(Limits))
DEFAULTS = Limits()
_SUFFIX = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": TiB}
_current: contextvars.ContextVar[Limits] = contextvars.ContextVar("onnx2gemmini_limits", default=DEFAULTS)


def current() -> Limits:
    """The limits in force here (set by `applied`; the defaults otherwise)."""
    return _current.get()


@contextlib.contextmanager
def applied(overrides: "Limits | Mapping | list | tuple | None") -> Iterator[Limits]:
    """Put `overrides` (on top of the limits in force) in force for the duration of a with-block.

    A context variable, so that deep readers (load, data) see the caller's limits without threading an
    argument through every layer, and concurrent threads each keep their own.
    """
    limits = parse_limits(overrides, current())
    token = _current.set(limits)
    try:
        yield limits
    finally:
        _current.reset(token)


def parse_limits(spec: "Limits | Mapping | list | tuple | str | None", base: Limits = DEFAULTS) -> Limits:
    """`NAME=VALUE` strings (the CLI's repeatable --limit), a {name: value} dict or a Limits -> Limits."""
    if spec is None:
        return base
    if isinstance(spec, Limits):
        return spec
    if isinstance(spec, str):
        spec = [spec]
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, (list, tuple)):
        items = [_split(s) for s in spec]
    else:
        raise UsageError(f"limits: expected NAME=VALUE strings or a {{name: value}} dict, got {type(spec).__name__}")
    values = {}
    for name, value in items:
        if name not in NAMES:
            raise UsageError(f"--limit: unknown limit '{name}' (choose from {', '.join(NAMES)})")
        values[name] = parse_size(value, name)
    return base.replace(**values)


def _split(spec) -> tuple[str, str]:
    """`NAME=VALUE` -> (name, value); anything else is a usage error naming the valid names."""
    if not isinstance(spec, str) or "=" not in spec:
        raise UsageError(f"--limit '{spec}': expected NAME=VALUE (names: {', '.join(NAMES)})")
    name, _, value = spec.partition("=")
    return name.strip(), value.strip()


def parse_size(value, name: str) -> int:
    """`123`, `512M`, `2GiB`, `none` -> a positive int (`none`: no limit)."""
    if isinstance(value, bool):
        raise UsageError(f"--limit {name}: expected a positive integer, got {value!r}")
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip().lower()
        if text in ("none", "unlimited"):
            return UNLIMITED
        match = re.fullmatch(r"(\d{1,18})\s*([kmgt]?)(?:i?b)?", text)
        if not match:
            raise UsageError(f"--limit {name}={value}: expected a positive integer with an optional K/M/G/T "
                             f"suffix, or 'none'")
        number = int(match.group(1)) * _SUFFIX[match.group(2)]
    if number <= 0:
        raise UsageError(f"--limit {name}: must be positive, got {value}")
    return min(number, UNLIMITED)


def describe(limits: "Limits | None" = None) -> str:
    """`name: what (value)` for every limit, for --help and the README."""
    limits = limits or DEFAULTS
    return "; ".join(f"{n}: {DESCRIPTIONS[n]} ({_limit_text(n, getattr(limits, n))})" for n in NAMES)


def _limit_text(name: str, limit: int) -> str:
    """A limit for people: `none` when lifted."""
    return "none" if limit >= UNLIMITED else _value_text(name, limit)


def _value_text(name: str, value: int) -> str:
    """A measured size for people: counts with separators, bytes in binary units."""
    return f"{value:,}" if name in COUNTS else size_text(value)


def size_text(n: int) -> str:
    """Bytes for people: 1.5 GiB, 768 MiB, 12 KiB, 100 B."""
    for unit, scale in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def exceeded(name: str, what: str, value: int, error: type, limits: "Limits | None" = None) -> None:
    """Raise `error` (ModelError, DataError, UsageError) if `value` is above the limit `name`."""
    limit = getattr(limits or current(), name)
    if value <= limit:
        return
    raise error(f"{what}: {_value_text(name, value)} is above the {name} limit of {_limit_text(name, limit)} "
                f"(raise it with --limit {name}=N if this is intended)")
