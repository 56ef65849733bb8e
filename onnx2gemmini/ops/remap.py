"""The per-axis index map ("remap") behind Slice, Pad, nearest Resize and ConvTranspose's zero insertion.

Each of them chooses, independently per axis, which input position every output position reads (or -1:
the pad value), so one exact int8 kernel runs them on any layout: for an NHWC tensor the maps are put in
NHWC axis order and the output stays NHWC with no transpose. The values move unchanged, so the output
shares the input's scale and equals onnxruntime's bit for bit.
"""
from __future__ import annotations

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp, Tensor
from ..tolerance import Tolerance
from .context import LowerContext
from .registry import Handler, Lowered

NHWC_AXES = (0, 2, 3, 1)


def lower_remap(node: NodeView, ctx: LowerContext, x: Tensor, maps: list[list[int]], value: int,
                reason: str, temp: str | None = None, golden: Tolerance | None = None) -> tuple[Lowered, Tensor]:
    """One `remap` step: `maps` per ONNX axis of x; NHWC inputs get NHWC maps and an NHWC output.

    The output is the node's output, or with `temp` a node-private buffer (ConvTranspose's input)."""
    if x.layout == "NHWC":
        maps = [maps[a] for a in NHWC_AXES]
    shape = tuple(len(m) for m in maps)
    if temp:
        y = ctx.temp(node.name, temp, shape, x.scale, layout=x.layout)
    else:
        y = ctx.output(node.output, shape, x.layout)
    index = tuple(int(i) for m in maps for i in m)
    step = CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=cpu.Remap(index, int(value)), reason=reason,
                 golden=golden)
    return Lowered([step], [y]), y


class RemapMove(Handler):
    gemmini = "none: an exact int8 move on the CPU"
    output_scale = "input"

    def maps(self, node: NodeView) -> list[list[int]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def value(self, node: NodeView, scale: float) -> int:
        return 0

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        x = ctx.tensor(node.inputs[0])
        lowered, _ = lower_remap(node, ctx, x, self.maps(node), self.value(node, x.scale),
                                 f"{node.op_type}: an int8 move on the CPU")
        return lowered


def const_input_reasons(node: NodeView, first: int) -> list[str]:
    """Non-constant parameter inputs, and an empty output (no buffer to move into)."""
    reasons = [f"non-constant input '{t}'" for t in node.inputs[first:] if t and not node.is_const(t)]
    return reasons + (["empty output"] if 0 in node.shape(node.output) else [])
