"""Options given per name: per model output, `[OUTPUT=]VALUE` (diff's --atol/--rtol and its accuracy floors,
`per_output`), and per model input or output, `NAME=VALUE` (--input-shape, --input-value, --state: `named`).

Each takes a single number (every output), a dict {output: value}, or the command line's strings `V` (every
output) and `NAME=V` (one output; the last '=' splits, so a name may hold '='); an unknown output name or a
value its option refuses is a UsageError naming the option.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

from .errors import UsageError


def per_output(spec, names: list[str], option: str, value: Callable[[object], object]) -> list[tuple]:
    """[(output name, or None for every output; value(text))] in the order given. `value` raises ValueError
    with what the option expects."""
    if spec is None:
        return []
    if isinstance(spec, dict):
        items = list(spec.items())
    elif isinstance(spec, (int, float, str)) and not isinstance(spec, bool):
        items = [(None, spec)] if not isinstance(spec, str) else [_split(spec)]
    else:
        items = [_split(str(s)) for s in spec]
    parsed = []
    for name, text in items:
        try:
            parsed.append((name, value(text)))
        except ValueError as exc:
            raise UsageError(f"{option}: expected [OUTPUT=]VALUE with VALUE {exc}, got '{text}'") from None
        if name is not None and name not in names:
            raise UsageError(f"{option}: the model has no output named '{name}' (outputs: {', '.join(names)})")
    return parsed


def _split(text: str) -> tuple[str | None, str]:
    name, sep, value = text.rpartition("=")
    return (name if sep else None), value


def named(specs, option: str, api: str, form: str, last: bool = True) -> tuple[dict | None, list[tuple[str, str, str]]]:
    """The forms a NAME=VALUE option takes: nothing (None or empty), one string, a list or tuple of strings, or
    a mapping {name: value}. Returns (the mapping, or None) and, for strings, [(spec, name, value text)], each
    split at its last '=' (`last`, a name may then hold '=') or its first; a string without '=' gives an empty
    name. Anything else is one UsageError naming the API's keyword `api` (a value of the wrong type) or the
    command line's `option` (an item that is not a string), and the expected `form`."""
    if not specs:
        return None, []
    if isinstance(specs, Mapping):
        return dict(specs), []
    if isinstance(specs, str):
        specs = [specs]
    if not isinstance(specs, (list, tuple)):
        raise UsageError(f"{api}: expected {form} strings or a {{name: value}} dict, got {type(specs).__name__}")
    items = []
    for spec in specs:
        if not isinstance(spec, str):
            raise UsageError(f"{option} {spec!r}: expected a {form} string")
        name, sep, text = spec.rpartition("=") if last else spec.partition("=")
        items.append((spec, name.strip() if sep else "", text))
    return None, items
