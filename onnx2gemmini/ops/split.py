"""Split: each output an exact int8 range of the input along one axis (YOLOv8's C2f blocks, GhostNet,
ShuffleNetV2's channel split); one remap per output, on any layout (remap.py)."""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .context import LowerContext
from .registry import Handler, Lowered, handler
from .remap import NHWC_AXES


class _Split(Handler):
    gemmini = "none: an exact int8 move on the CPU per output"
    limits = "constant split sizes"
    output_scale = "input"
    sizes_input = False  # opset >= 13: the sizes are the second input, not an attribute

    def sizes(self, node: NodeView) -> list[int] | None:
        """The output lengths along the axis; None when the sizes input is not constant."""
        axis_len = node.shape(node.inputs[0])[self.axis(node)]
        if self.sizes_input and len(node.inputs) > 1 and node.inputs[1]:
            if not node.is_const(node.inputs[1]):
                return None
            return [int(s) for s in np.asarray(node.const(node.inputs[1])).reshape(-1)]
        given = node.attr("split", None)
        if given:
            return [int(s) for s in given]
        parts = len(node.outputs)
        if node.attr("num_outputs", None):  # opset 18: the last part may be smaller
            parts = int(node.attr("num_outputs"))
        size = -(-axis_len // parts)
        return [min(size, axis_len - k * size) for k in range(parts)]

    def axis(self, node: NodeView) -> int:
        return int(node.attr("axis", 0)) % len(node.shape(node.inputs[0]))

    def check(self, node, ctx):
        sizes = self.sizes(node)
        if sizes is None:
            return ["the split sizes are not constant"]
        if sum(sizes) != node.shape(node.inputs[0])[self.axis(node)] or min(sizes) < 0:
            return [f"split sizes {sizes} do not add up to the axis"]
        return []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = ctx.tensor(node.inputs[0])
        shape, axis = node.shape(node.inputs[0]), self.axis(node)
        start = 0
        for name, size in zip(node.outputs, self.sizes(node)):
            maps = [list(range(n)) for n in shape]
            maps[axis] = list(range(start, start + size))
            start += size
            if not name:
                continue
            if x.layout == "NHWC":
                maps = [maps[a] for a in NHWC_AXES]
            y = ctx.output(name, tuple(len(m) for m in maps), x.layout)
            lowered.tensors.append(y)
            lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,),
                                       params=cpu.Remap(tuple(i for m in maps for i in m), 0),
                                       reason=f"Split: output {name!r} is an int8 range of the input"))
        return lowered


@handler("Split", since=2)
class SplitHandler(_Split):
    pass


@handler("Split", since=13)
class SplitSizesInputHandler(_Split):
    sizes_input = True
