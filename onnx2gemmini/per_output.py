"""Options given per model output, `[OUTPUT=]VALUE` (diff's --atol/--rtol and its accuracy floors): one reader.

Each takes a single number (every output), a dict {output: value}, or the command line's strings `V` (every
output) and `NAME=V` (one output; the last '=' splits, so a name may hold '='); an unknown output name or a
value its option refuses is a UsageError naming the option.
"""
from __future__ import annotations

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
