"""Flatten, Reshape, Squeeze, Unsqueeze, Identity, Dropout: views of the same int8 bytes (an NHWC -> NCHW
move when the order matters)."""
from __future__ import annotations

from ..graph import NodeView
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler


class ViewHandler(Handler):
    gemmini = "none needed: a view of the same int8 buffer"
    limits = "4-D NHWC inputs are first moved to ONNX order on the CPU when the order matters"
    output_scale = "input"

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = ctx.tensor(node.inputs[0])
        out_shape = node.shape(node.output)
        if self.keeps_layout(node) and x.layout == "NHWC":
            y = ctx.output(node.output, x.shape, "NHWC", view_of=x.id)
        else:
            x = to_plain(node, ctx, x, lowered)
            y = ctx.output(node.output, out_shape, "plain", view_of=x.id)
        lowered.tensors.append(y)
        return lowered

    def keeps_layout(self, node: NodeView) -> bool:
        return False


@handler("Flatten", since=1)
class FlattenHandler(ViewHandler):
    pass


@handler("Reshape", since=5)
class ReshapeHandler(ViewHandler):
    def check(self, node, ctx):
        return [] if node.is_const(node.inputs[1]) else ["shape is not constant"]


@handler("Identity", since=1)
class IdentityHandler(ViewHandler):
    def keeps_layout(self, node):
        return True


@handler("Dropout", since=1)
class DropoutHandler(ViewHandler):
    limits = "inference only: the identity; the mask output is refused"

    def check(self, node, ctx):
        reasons = ["the mask output is used"] if len(node.outputs) > 1 and node.used(node.outputs[1]) else []
        training = node.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        ratio = node.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        if len(node.inputs) > 2 and node.inputs[2] and (training is None or bool(training)):
            if ratio is None or float(ratio) != 0.0:
                reasons.append("training-mode dropout (random) is not inference")
        return reasons

    def keeps_layout(self, node):
        return True


@handler("Squeeze", since=13)
class SqueezeHandler(ViewHandler):
    pass


@handler("Unsqueeze", since=13)
class UnsqueezeHandler(ViewHandler):
    pass
