"""The handler registry: `@handler("Conv", since=11)`; the newest `since` <= the model's opset wins.

A handler is a small class with pure methods. `check` lists why a node cannot be converted at all;
`lower` returns plan steps (Gemmini calls, or CPU steps that carry their reason). Limits are data, so
`onnx2gemmini ops` and docs/supported_ops.md are generated from here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from ..errors import UnsupportedError
from ..graph import NodeView
from ..plan import Step, Tensor


@dataclass
class Lowered:
    """What a handler returns: steps, the tensors they create, and constant data."""

    steps: list[Step] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, other: "Lowered") -> "Lowered":
        self.steps += other.steps
        self.tensors += other.tensors
        self.constants.update(other.constants)
        return self


class Handler:
    op_type: ClassVar[str] = ""
    since: ClassVar[int] = 1
    domain: ClassVar[str] = ""
    gemmini: ClassVar[str] = ""          # the Gemmini mapping, for the support table
    limits: ClassVar[str] = ""           # what falls back to the CPU or is refused
    # "calibrated"; "input": the output shares the input's scale; "shared": inputs and output share one
    output_scale: ClassVar[str] = "calibrated"

    def check(self, node: NodeView, ctx: Any) -> list[str]:
        """Reasons this node cannot be converted at all (empty: convertible)."""
        return []

    def float_weights(self, node: NodeView) -> tuple[np.ndarray, np.ndarray | None] | None:
        """(weights, bias) in the handler's canonical float layout, for quantize.py; None if none."""
        return None

    def output_shift(self, node: NodeView, weight_error: np.ndarray, input_means: dict) -> np.ndarray | None:
        """Expected per-output-channel error that `weight_error` (int8 weights minus float weights, in the
        float_weights layout) causes on inputs with these channel means; None: no bias correction."""
        return None

    def weight_input(self, node: NodeView) -> str | None:
        """The initializer holding the weights as given (a pre-quantized model may fix its scale)."""
        return None

    def channel_axis(self, node: NodeView) -> tuple[int, int] | None:
        """The output-channel axis of the weights as given and in the float_weights layout, when the
        lowering can give runs of output channels their own scale (separate Gemmini calls); None: one
        scale per tensor only."""
        return None

    def output_scale_floor(self, node: NodeView, input_scale: float) -> float:
        """The smallest calibrated output scale the node's int8 arithmetic (and onnxruntime's kernel for it, the
        golden) accepts for an input at `input_scale`; 0: any."""
        return 0.0

    def writes_float(self, node: NodeView) -> bool:
        """True: the lowering can write this node's output as float32 when quantize.float_tensors asks (a
        lookup table of float32 values instead of int8 ones)."""
        return False

    def lower(self, node: NodeView, ctx: Any) -> Lowered:  # pragma: no cover - abstract
        raise NotImplementedError


_REGISTRY: dict[tuple[str, str], dict[int, Handler]] = {}


def handler(op_type: str, since: int = 1, domain: str = "") -> Callable[[type], type]:
    """Register a handler class for `op_type` valid from opset `since`; duplicates are refused."""
    def register(cls: type) -> type:
        versions = _REGISTRY.setdefault((domain, op_type), {})
        if since in versions:
            raise ValueError(f"duplicate handler for {op_type} since {since}")
        cls.op_type, cls.since, cls.domain = op_type, since, domain
        versions[since] = cls()
        return cls
    return register


def lookup(op_type: str, opset: int, domain: str = "") -> Handler | None:
    domain = "" if domain == "ai.onnx" else domain
    versions = _REGISTRY.get((domain, op_type), {})
    eligible = [v for v in versions if v <= opset]
    return versions[max(eligible)] if eligible else None


def handlers_for(graph) -> dict[str, Handler]:
    """Each node's handler by node name (preflight has refused unknown ops)."""
    found = {}
    for node in graph.nodes:
        found[node.name] = lookup(node.op_type, graph.opset, node.domain)
        if found[node.name] is None:
            raise UnsupportedError(f"node '{node.name}': no handler for {node.op_type}")
    return found


def all_handlers() -> list[Handler]:
    return [h for _, versions in sorted(_REGISTRY.items()) for _, h in sorted(versions.items())]
