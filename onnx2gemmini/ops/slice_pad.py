"""Slice and Pad: exact int8 moves on the CPU, one per-axis index map each (remap.py)."""
from __future__ import annotations

import numpy as np

from ..graph import NodeView
from ..numerics import quantize_value
from .registry import handler
from .remap import RemapMove, const_input_reasons

@handler("Slice", since=13)
class SliceHandler(RemapMove):
    limits = "constant starts/ends/axes/steps (any steps, negative and clamped values)"

    def check(self, node, ctx):
        return const_input_reasons(node, 1)

    def maps(self, node):
        shape = node.shape(node.inputs[0])
        maps = [list(range(n)) for n in shape]
        starts, ends = (np.asarray(node.const(node.inputs[i]), np.int64).tolist() for i in (1, 2))
        axes = node.const(node.input("axes")) if node.input("axes") else range(len(starts))
        steps = node.const(node.input("steps")) if node.input("steps") else [1] * len(starts)
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis = int(axis) % len(shape)
            maps[axis] = list(range(*slice(int(start), int(end), int(step)).indices(shape[axis])))
        return maps


def _pad_map(n: int, before: int, after: int, mode: str) -> list[int]:
    out = []
    for o in range(-before, n + after):
        if 0 <= o < n:
            out.append(o)
        elif mode == "constant":
            out.append(-1)
        elif mode == "edge":
            out.append(min(max(o, 0), n - 1))
        elif mode == "wrap":
            out.append(o % n)
        else:  # reflect (without repeating the edge), as numpy.pad
            period = 2 * (n - 1)
            r = abs(o) % period if period else 0
            out.append(r if r < n else period - r)
    return out


@handler("Pad", since=13)
class PadHandler(RemapMove):
    limits = ("constant pads, axes and pad value (quantized to the input's scale); modes constant, reflect, "
              "edge, wrap")

    def check(self, node, ctx):
        reasons = const_input_reasons(node, 1)
        mode = node.attr("mode", "constant")
        if mode not in ("constant", "reflect", "edge", "wrap"):
            reasons.append(f"mode {mode}")
        shape = node.shape(node.inputs[0])
        if mode != "constant" and not reasons and any(
                n == 0 for n, (b, a) in zip(shape, self._pads(node)) if b or a):
            reasons.append("non-constant padding of an empty axis")
        return reasons

    @staticmethod
    def _pads(node: NodeView) -> list[tuple[int, int]]:
        rank = len(node.shape(node.inputs[0]))
        pads = np.asarray(node.const(node.inputs[1]), np.int64).tolist()
        axes_name = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else None
        axes = [int(a) % rank for a in node.const(axes_name)] if axes_name else list(range(rank))
        k = len(axes)
        result = [(0, 0)] * rank
        for i, a in enumerate(axes):
            result[a] = (pads[i], pads[i + k])
        return result

    def maps(self, node):
        mode = node.attr("mode", "constant")
        return [_pad_map(n, b, a, mode) for n, (b, a) in zip(node.shape(node.inputs[0]), self._pads(node))]

    def value(self, node, scale):
        v = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        return quantize_value(float(np.asarray(node.const(v)).reshape(-1)[0]), scale) if v else 0
