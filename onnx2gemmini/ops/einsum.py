"""Einsum: the batched-matmul forms (onnx2gemmini/einsum.py) as Gemmini matmuls of two activations, with
int8 transposes on the CPU where an operand or the result is in another axis order."""
from __future__ import annotations

from .. import cpu
from ..einsum import matmul_form
from ..graph import NodeView
from ..plan import CpuOp, Tensor
from .common import to_plain
from .context import LowerContext
from .gemm import activation_matmul
from .registry import Handler, Lowered, handler


def _transposed(node: NodeView, ctx: LowerContext, x: Tensor, perm, name: str, lowered: Lowered) -> Tensor:
    if perm is None:
        return x
    y = ctx.temp(node.name, name, tuple(x.shape[p] for p in perm), x.scale)
    lowered.tensors.append(y)
    lowered.steps.append(CpuOp(node.name, inputs=(x.id,), outputs=(y.id,), params=cpu.Transpose(tuple(perm)),
                               reason=f"Einsum {node.attr('equation')}: operand in matmul order"))
    return y


@handler("Einsum", since=12)
class EinsumHandler(Handler):
    gemmini = "tiled_matmul per batch (batched products of two activations, any axis order)"
    limits = "batched-matmul equations of two activations only (one m, n and k letter each)"

    def check(self, node, ctx):
        equation = node.attr("equation")
        if isinstance(equation, bytes):
            equation = equation.decode()
        if matmul_form(equation or "") is None:
            return [f"equation {equation!r} is not a batched matrix product"]
        if len(node.inputs) != 2 or any(node.is_const(t) for t in node.inputs):
            return ["a constant operand (only products of two activations are supported)"]
        return []

    def lower(self, node: NodeView, ctx: LowerContext) -> Lowered:
        lowered = Lowered()
        equation = node.attr("equation")
        form = matmul_form(equation.decode() if isinstance(equation, bytes) else equation)
        a = _transposed(node, ctx, to_plain(node, ctx, ctx.tensor(node.inputs[0]), lowered), form.perm_a, "a", lowered)
        b = _transposed(node, ctx, to_plain(node, ctx, ctx.tensor(node.inputs[1]), lowered), form.perm_b, "b", lowered)
        y = ctx.output(node.output, node.shape(node.output))
        lowered.tensors.append(y)
        if form.perm_out is None:
            return lowered.add(activation_matmul(node, ctx, a, b, y))
        product_shape = a.shape[:-1] + (b.shape[-1],)
        product = ctx.temp(node.name, "product", product_shape, y.scale)
        lowered.tensors.append(product)
        lowered.add(activation_matmul(node, ctx, a, b, product))
        lowered.steps.append(CpuOp(node.name, inputs=(product.id,), outputs=(y.id,),
                                   params=cpu.Transpose(form.perm_out),
                                   reason=f"Einsum {equation}: the product in the output's axis order"))
        return lowered
