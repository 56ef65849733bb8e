"""How far one execution may be from another: a maximum in LSB and a budget of values that may differ.

Why both: a maximum alone lets a broken kernel that is off by one everywhere pass a 1-LSB check. Each
tolerance states the share of values its cause can move (`rate`, derived from the op's arithmetic), and
a check allows that share of the compared values plus binomial noise (three standard deviations), so a
systematic error fails even within the maximum.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

SIGMAS = 3.0


@dataclass(frozen=True)
class Tolerance:
    lsb: int = 0           # the largest difference allowed
    rate: float = 0.0      # the expected share of values that differ (at most `lsb` each)
    why: str = "bit-exact"

    def allowed(self, compared: int) -> int:
        """Mismatching values allowed among `compared`: the expected count plus SIGMAS binomial deviations
        (at least one value when the rate is not zero)."""
        if self.lsb == 0 or self.rate <= 0.0 or compared <= 0:
            return 0
        mean = self.rate * compared
        return max(1, math.ceil(mean + SIGMAS * math.sqrt(mean * (1.0 - min(self.rate, 1.0)))))

    def failure(self, max_lsb: int, mismatches: int, compared: int) -> str | None:
        """Why a comparison breaks this tolerance, or None."""
        if max_lsb > self.lsb:
            return f"{max_lsb} LSB > {self.lsb}"
        if mismatches > self.allowed(compared):
            return (f"{mismatches} of {compared} values differ, more than the {self.allowed(compared)} allowed "
                    f"({self.why})")
        return None

    def combine(self, other: "Tolerance") -> "Tolerance":
        """What a layer made of several steps may differ by: the larger maximum and the larger rate."""
        if other == EXACT or other == self:
            return self
        if self == EXACT:
            return other
        return Tolerance(max(self.lsb, other.lsb), max(self.rate, other.rate), f"{self.why}; {other.why}")


EXACT = Tolerance()

# A float32 computation that reorders or approximates (libm, onnxruntime's MLAS kernels) ends within a
# relative error of about 2^-17 (64 float32 ulps) of another; quantized, it differs only where the exact
# value lies that close to a rounding boundary: at most 2 * 128 * 2^-17 of the values, one LSB each.
FLOAT_REORDERING = Tolerance(1, 2 * 128 * 2.0 ** -17, "float32 evaluation order and approximations")
