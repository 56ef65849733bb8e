"""Gather: with constant indices, an exact int8 copy on the CPU; of a constant table by integer ids a model
input holds (token ids), an embedding lookup that copies int8 rows of the table stored at the output's scale."""
from __future__ import annotations

import numpy as np

from .. import cpu
from ..graph import NodeView
from ..numerics import quantize
from ..plan import CpuOp
from .common import to_plain
from .context import LowerContext
from .registry import Handler, Lowered, handler


@handler("Gather", since=13)
class GatherHandler(Handler):
    gemmini = "none: an int8 copy on the CPU"
    limits = "constant indices, or a constant table indexed by an integer model input (an embedding lookup)"
    output_scale = "input"

    def check(self, node, ctx):
        data, indices = node.inputs[0], node.inputs[1]
        if node.is_const(indices):
            return [] if not node.is_index(data) else ["integer data"]
        if not node.is_index(indices):
            return ["non-constant indices"]
        if not node.is_const(data):
            return ["an integer model input indexing a computed tensor (only constant tables)"]
        if len(node.shape(node.output)) == 4:
            return ["a 4-D embedding lookup"]
        return []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        if node.is_index(node.inputs[1]):
            return self.lookup(node, ctx)
        lowered = Lowered()
        x = to_plain(node, ctx, ctx.tensor(node.inputs[0]), lowered)
        indices = np.asarray(node.const(node.inputs[1]), np.int64)
        axis = node.attr("axis", 0) % len(x.shape)
        indices = np.where(indices < 0, indices + x.shape[axis], indices)
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        params = cpu.Gather(axis, tuple(int(i) for i in indices.reshape(-1)), tuple(indices.shape))
        lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=params,
                                   reason="Gather: an int8 copy"))
        return lowered

    @staticmethod
    def lookup(node: NodeView, ctx: LowerContext) -> Lowered:
        """Rows of the table quantized at the output's (calibrated) scale: QuantizeLinear(Gather(table, ids))
        equals Gather(QuantizeLinear(table), ids) value for value, so the lookup is exact."""
        table = node.const(node.inputs[0])
        axis = node.attr("axis", 0) % table.ndim
        y = ctx.output(node.output, node.shape(node.output))
        table_id = ctx.const_id(node.name, "table")
        params = cpu.Embedding(axis) if node.fused.positions is None else cpu.PositionEmbedding(node.fused.positions)
        step = CpuOp(node.name, inputs=(ctx.tensor(node.inputs[1]).id, table_id), outputs=(y.id,), params=params,
                     reason="Gather of a constant table by integer ids (an embedding lookup): int8 rows copied")
        return Lowered([step], [y], {table_id: quantize(table, y.scale)})
