"""Einsum equations that are batched matrix products, as transposes around a MatMul.

`A[batch..., m, k] x B[batch..., k, n] -> [batch..., m, n]` in any axis order (attention's Q·Kᵀ and ·V in
MaxViT and others): the handler lowers it to Gemmini matmuls and the golden writes the same MatMul, so
onnxruntime runs it as its exact integer QLinearMatMul. Other equations are refused by name.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MatmulForm:
    """Permutations that bring each operand to [batch..., m, k] / [batch..., k, n], and the product's
    [batch..., m, n] to the output's order (None: already in order)."""

    perm_a: tuple[int, ...] | None
    perm_b: tuple[int, ...] | None
    perm_out: tuple[int, ...] | None


def _terms(equation: str) -> tuple[list[str], str] | None:
    text = equation.replace(" ", "")
    if "->" not in text or "." in text:
        return None
    inputs, output = text.split("->")
    return inputs.split(","), output


def matmul_form(equation: str) -> MatmulForm | None:
    """The equation as a batched matmul, or None when it is something else (one letter each for m, n and
    k; batch letters in all three terms; no repeated letters, traces or broadcasting ellipses)."""
    parsed = _terms(equation)
    if parsed is None or len(parsed[0]) != 2:
        return None
    (a, b), out = parsed
    if any(len(set(t)) != len(t) for t in (a, b, out)):
        return None
    batch = [c for c in out if c in a and c in b]
    m = [c for c in a if c in out and c not in b]
    n = [c for c in b if c in out and c not in a]
    k = [c for c in a if c in b and c not in out]
    if len(m) != 1 or len(n) != 1 or len(k) != 1 or set(a) | set(b) != set(out) | set(k):
        return None
    if len(a) != len(batch) + 2 or len(b) != len(batch) + 2 or len(out) != len(batch) + 2:
        return None
    want_a, want_b, product = batch + m + k, batch + k + n, batch + m + n

    def perm(have: str, want: list[str]) -> tuple[int, ...] | None:
        order = tuple(have.index(c) for c in want)
        return None if order == tuple(range(len(order))) else order
    return MatmulForm(perm(a, want_a), perm(b, want_b), perm("".join(product), list(out)))


@dataclass(frozen=True)
class GroupedForm:
    """An equation as a batched matmul whose m, k and n may each span several letters (merged by reshapes):
    the letters of each group in the order they are taken."""

    batch: str
    m: str
    k: str
    n: str


def grouped_form(equation: str) -> GroupedForm | None:
    """`a,b->out` as batch letters (in all three terms), m (a and out), k (a and b: summed) and n (b and
    out), in a's order for batch, m and k and b's for n; None when a letter is in one operand only and not in
    the output (a sum over one operand), repeated, or an ellipsis."""
    parsed = _terms(equation)
    if parsed is None or len(parsed[0]) != 2:
        return None
    (a, b), out = parsed
    if any(len(set(t)) != len(t) for t in (a, b, out)) or not set(out) <= set(a) | set(b):
        return None
    if any(c not in out and c not in b for c in a) or any(c not in out and c not in a for c in b):
        return None
    batch = "".join(c for c in a if c in b and c in out)
    m = "".join(c for c in a if c in out and c not in b)
    k = "".join(c for c in a if c in b and c not in out)
    n = "".join(c for c in b if c in out and c not in a)
    if not m or not k or not n:
        return None
    return GroupedForm(batch, m, k, n)
