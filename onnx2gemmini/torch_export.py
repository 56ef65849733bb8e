"""`o2g.compile(torch_module, example_inputs=...)`: a PyTorch module becomes an ONNX model in memory.

Why here and so small: most Gemmini users start from PyTorch, and the compiler's front end takes ONNX.
torch.onnx.export (the TorchScript-based exporter, `dynamo=False`: it needs no onnxscript and gives
plain opset-17 graphs the handlers know) writes the model to memory; nothing touches the disk. torch is
an optional dependency, imported only when a module is passed.
"""
from __future__ import annotations

import inspect
import io
import sys
import warnings

import onnx

from .errors import ModelError, UsageError

OPSET = 17


def is_torch_module(obj) -> bool:
    """True for a torch.nn.Module (without importing torch: an unimported torch made no module)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def export(module, example_inputs, input_names=None, output_names=None, opset: int = OPSET) -> onnx.ModelProto:
    """The module in eval mode, traced on `example_inputs` (a tensor or a tuple of tensors, one sample,
    batch dimension included), as an ONNX model whose graph is named after the module's class.

    Input names default to the parameter names of `forward` (so `calib={"x": ...}` fits `forward(self, x)`);
    output names to `output` (one output) or `output_0`, `output_1`, ...
    """
    import torch

    if example_inputs is None:
        raise UsageError("compile: a torch module needs example_inputs= (a tensor or a tuple of tensors)")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    bad = [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]
    if bad:
        raise UsageError(f"compile: example_inputs[{bad[0]}] is {type(args[bad[0]]).__name__}, expected a "
                         f"torch.Tensor")
    names = list(input_names) if input_names is not None else _forward_names(module, len(args))
    buffer = io.BytesIO()
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "legacy exporter": chosen on purpose, above
            if output_names is None:  # one forward pass tells how many outputs to name
                result = module(*args)
                count = len(result) if isinstance(result, (tuple, list)) else 1
                output_names = ["output"] if count == 1 else [f"output_{i}" for i in range(count)]
            torch.onnx.export(module, args, buffer, dynamo=False, opset_version=opset, input_names=names,
                              output_names=list(output_names), do_constant_folding=True)
    except Exception as exc:  # torch raises many types; the user needs the first line
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"torch.onnx.export of {type(module).__name__} failed: {first}") from None
    finally:
        module.train(was_training)
    model = onnx.load_from_string(buffer.getvalue())
    model.graph.name = type(module).__name__
    return model


def as_data(value):
    """A torch tensor given as calibration or evaluation data, as a NumPy array (anything else as it is)."""
    return value.detach().cpu().numpy() if is_torch_tensor(value) else value


def is_torch_tensor(obj) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _forward_names(module, count: int) -> list[str]:
    """The first `count` positional parameter names of module.forward (input_<i> where there are none)."""
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    params = params if len(params) >= count else []
    return params[:count] if params else [f"input_{i}" for i in range(count)]

