"""What a handler may read while lowering: produced tensors, scales, quantized weights, the config.

The context is read-only; handlers return new tensors and steps instead of registering them, so each
handler can be called alone in a test.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..config import GemminiConfig
from ..plan import Tensor
from ..quant.quantize import QuantTable, WeightQuant


@dataclass(frozen=True)
class LowerContext:
    config: GemminiConfig
    quant: QuantTable
    tensors: Mapping[str, Tensor]      # ONNX tensor name -> plan tensor holding it
    tensor_ids: Mapping[str, str]      # ONNX tensor name -> sanitized unique id
    node_ids: Mapping[str, str]        # ONNX node name -> sanitized unique id

    def tensor(self, onnx_name: str) -> Tensor:
        return self.tensors[onnx_name]

    def scale(self, onnx_name: str) -> float:
        return self.quant.scales[onnx_name]

    def weight(self, node_name: str) -> WeightQuant:
        return self.quant.weights[node_name]

    def output(self, onnx_name: str, shape: tuple[int, ...], layout: str = "plain",
               view_of: str | None = None, dtype: str | None = None) -> Tensor:
        """The plan tensor for a node output: int8 with its scale from the QuantTable, or float32 (scale
        None: the values are real) where the table keeps it float (quantize.float_tensors)."""
        if dtype is None:
            dtype = "float32" if onnx_name in self.quant.float_tensors else "int8"
        scale = None if dtype == "float32" else self.quant.scales.get(onnx_name)
        return Tensor(self.tensor_ids[onnx_name], onnx_name, tuple(shape), dtype, layout, scale,
                      "activation", view_of)

    def temp(self, node_name: str, suffix: str, shape: tuple[int, ...], scale: float | None,
             layout: str = "plain", dtype: str = "int8", kind: str = "temp",
             view_of: str | None = None) -> Tensor:
        """A node-private buffer; ids with '__' never collide with sanitized ONNX names."""
        tid = f"{self.node_ids[node_name]}__{suffix}"
        return Tensor(tid, "", tuple(shape), dtype, layout, scale, kind, view_of)

    def channel_slice(self, node_name: str, suffix: str, parent: Tensor, start: int, width: int,
                      scale: float | None) -> Tensor:
        """Channels [start, start+width) of `parent` (its last storage axis), in place: no copy."""
        tid = f"{self.node_ids[node_name]}__{suffix}"
        return Tensor(tid, "", parent.shape[:-1] + (width,), parent.dtype, parent.layout, scale, "temp",
                      slice_of=parent.id, offset=start)

    def const_id(self, node_name: str, suffix: str) -> str:
        return f"{self.node_ids[node_name]}__{suffix}"
