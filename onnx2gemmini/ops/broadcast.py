"""Expand and Tile: exact int8 repetitions of an activation (Swin V2's attention, position embeddings,
class tokens broadcast over a batch); one remap each, whose index maps repeat input positions."""
from __future__ import annotations

import numpy as np

from ..graph import NodeView
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler
from .remap import const_input_reasons, lower_remap


class _Repeat(Handler):
    gemmini = "none: an exact int8 move on the CPU"
    output_scale = "input"

    def maps(self, node: NodeView, in_shape: tuple[int, ...]) -> list[list[int]]:  # pragma: no cover
        raise NotImplementedError

    def check(self, node, ctx):
        return const_input_reasons(node, 1)

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = ctx.tensor(node.inputs[0])
        out_rank = len(node.shape(node.output))
        in_shape = node.shape(node.inputs[0])
        if len(in_shape) < out_rank:  # leading axes of size 1 first (Expand's rank promotion): a view
            x = to_plain(node, ctx, x, lowered)
            in_shape = (1,) * (out_rank - len(in_shape)) + tuple(in_shape)
            view = ctx.temp(node.name, "ranked", in_shape, x.scale, view_of=x.id)
            lowered.tensors.append(view)
            x = view
        moved, _ = lower_remap(node, ctx, x, self.maps(node, tuple(in_shape)), 0,
                               f"{node.op_type}: an int8 repetition on the CPU")
        return lowered.add(moved)


@handler("Expand", since=8)
class ExpandHandler(_Repeat):
    limits = "constant shape"

    def maps(self, node, in_shape):
        out_shape = node.shape(node.output)
        return [[0] * o if i == 1 and o != 1 else list(range(i)) for i, o in zip(in_shape, out_shape)]


@handler("Tile", since=6)
class TileHandler(_Repeat):
    limits = "constant repeats"

    def maps(self, node, in_shape):
        repeats = np.asarray(node.const(node.inputs[1]), np.int64).tolist()
        return [list(range(n)) * int(r) for n, r in zip(in_shape, repeats)]
