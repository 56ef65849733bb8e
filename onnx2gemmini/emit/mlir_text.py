"""Exact, deterministic MLIR spellings: types, f32 literals, dense data, comments, symbol and SSA names."""
from __future__ import annotations

import re

import numpy as np

ELEMENT_TYPES = {"int8": "i8", "int32": "i32", "int64": "i64", "float32": "f32", "float64": "f64"}
NUMPY_TYPES = {"i8": np.int8, "i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}


def element_type(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in ELEMENT_TYPES:
        raise ValueError(f"no MLIR element type for {name}")
    return ELEMENT_TYPES[name]


def memref_type(shape: tuple[int, ...], elem: str) -> str:
    """`memref<2x3xi8>`; identity layout, static shape."""
    return f"memref<{''.join(f'{int(d)}x' for d in shape)}{elem}>"


def unranked_type(elem: str) -> str:
    return f"memref<*x{elem}>"


def f32_literal(x: float) -> str:
    """A decimal literal that MLIR parses back to exactly float32(x).

    The shortest repr of the float64 equal to float32(x) round-trips through the parser's float64 with
    no second rounding; MLIR's float grammar needs a '.' in the mantissa.
    """
    return f64_literal(float(np.float32(x)))


def f64_literal(x: float) -> str:
    """A decimal literal that MLIR parses back to exactly float(x) (shortest round-trip repr)."""
    v = float(x)
    if not np.isfinite(v):
        raise ValueError(f"non-finite f32 attribute {x!r}")
    s = repr(v)
    mantissa, _, exponent = s.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + (f"e{exponent}" if exponent else "")


def literal(value, elem: str) -> str:
    """`value` as an MLIR literal of scalar type `elem`."""
    if elem == "f32":
        return f32_literal(value)
    if elem == "f64":
        return f64_literal(value)
    return str(int(value))


def f32_attr(x: float) -> str:
    return f"{f32_literal(x)} : f32"


def i64_attr(n: int) -> str:
    return f"{int(n)} : i64"


def bool_attr(b: bool) -> str:
    return "true" if b else "false"


def dense(array: np.ndarray) -> str:
    """`dense<...>` for a memref.global: a splat when every element is equal, a list for a short i64 vector,
    else little-endian hex bytes."""
    a = np.ascontiguousarray(array)
    if a.size and (a == a.reshape(-1)[0]).all():
        v = a.reshape(-1)[0]
        return f"dense<{literal(v, element_type(a.dtype)) if a.dtype.kind == 'f' else int(v)}>"
    if a.ndim == 1 and a.size <= 8 and a.dtype == np.int64:  # shape vectors: readable
        return f"dense<[{', '.join(str(int(v)) for v in a)}]>"
    return f'dense<"0x{a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes().hex().upper()}">'


def shape_tag(shape: tuple[int, ...]) -> str:
    return "x".join(str(int(d)) for d in shape) or "scalar"


class SsaNames:
    """Unique, readable SSA names: `%<hint>`, `%<hint>.2`, ... (hints are sanitized ids; '.' never occurs
    in them, so the suffixes cannot collide with another id)."""

    def __init__(self):
        self.used: set[str] = set()
        self.next: dict[str, int] = {}  # per hint, the suffix to try first: every smaller one is taken

    def fresh(self, hint: str) -> str:
        hint = re.sub(r"[^A-Za-z0-9_.$-]", "_", hint) or "v"
        if hint[0].isdigit():
            hint = "v" + hint
        k = self.next.get(hint, 2)
        name = hint if k == 2 else f"{hint}.{k}"
        while name in self.used:  # names once taken stay taken: resuming at k finds what a scan from 2 would
            name, k = f"{hint}.{k}", k + 1
        self.next[hint] = k
        self.used.add(name)
        return "%" + name
