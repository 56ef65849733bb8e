"""MaskRows (made by passes/input_mask.py, not an ONNX op): x * mask[b, s] for an attention mask input, the
embeddings DeBERTa zeroes at padded positions. Each row of x is kept or zeroed, at x's own scale: an exact
int8 copy on the CPU."""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..plan import CpuOp
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler

DOMAIN = "onnx2gemmini"


@handler("MaskRows", since=1, domain=DOMAIN)
class MaskRowsHandler(Handler):
    gemmini = "none: an int8 copy on the CPU"
    limits = ("not an ONNX op: what passes/input_mask.py makes of x * mask (x [batch, positions, ...], an integer "
              "mask input [batch, positions])")
    output_scale = "input"

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        x = to_plain(node, ctx, ctx.tensor(node.inputs[0]), lowered)
        mask = ctx.tensor(node.inputs[1])
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        rows = int(np.prod(node.shape(node.inputs[1]), dtype=np.int64))
        lowered.steps.append(CpuOp(node.name, inputs=(x.id, mask.id), outputs=(y.id,), params=cpu.MaskRows(rows),
                                   reason="an attention mask zeroes the rows of padded positions: an int8 copy"))
        return lowered
