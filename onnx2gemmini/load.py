"""Read an ONNX file and make it static and simple: check, fix input shapes, simplify, infer shapes.

Everything that can go wrong with a user's file is turned into one ModelError line here.
"""
from __future__ import annotations

import hashlib
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import numpy_helper, shape_inference, version_converter

from . import qlinear
from .errors import ModelError, UsageError

log = logging.getLogger("onnx2gemmini")

# Models older than this are converted up, so handlers see attribute-free Clip, input-shaped Reshape, etc.
MIN_OPSET = 13


@dataclass(frozen=True)
class LoadedModel:
    path: str
    sha256: str
    model: onnx.ModelProto  # simplified, static shapes, constants lifted
    original_opset: int


def parse_input_shapes(specs: "list[str] | tuple[str, ...] | dict | None") -> dict[str, tuple[int, ...]]:
    """`NAME=1x3x224x224` strings (or a dict) -> {name: shape}."""
    if not specs:
        return {}
    if isinstance(specs, dict):
        return {k: tuple(int(d) for d in v) for k, v in specs.items()}
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d <= 0 for d in shape):
            raise UsageError(f"--input-shape '{spec}': expected NAME=D1xD2x... with positive integers")
        shapes[name] = shape
    return shapes


def read_model(path: "str | Path") -> onnx.ModelProto:
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if path.is_dir():
        raise ModelError(f"{path}: is a directory, expected an .onnx file")
    data = path.read_bytes()
    if not data:
        raise ModelError(f"{path}: empty file, expected an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # protobuf raises DecodeError or RuntimeWarning-laden errors
        raise ModelError(f"{path}: not an ONNX model (protobuf parse failed)") from None
    if not model.HasField("graph") or not model.graph.node:
        raise ModelError(f"{path}: not an ONNX model (no graph or no nodes)")
    _load_external_data(model, path)
    return model


def _load_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Load external tensors only from files inside the model's directory."""
    base = path.resolve().parent
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    for tensor in external:
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        target = (base / location).resolve()
        if not location or base not in target.parents or not target.is_file():
            raise ModelError(f"initializer '{tensor.name}': external data '{location}' is missing or outside "
                             f"the model's directory (refused)")
    if external:
        onnx.external_data_helper.load_external_data_for_model(model, str(base))


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _fix_input_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> None:
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in initializers]
    names = {vi.name for vi in graph_inputs}
    for name in shapes:
        if name not in names:
            raise UsageError(f"--input-shape: the model has no input '{name}' (inputs: {', '.join(sorted(names))})")
    for vi in graph_inputs:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in shapes:
            shape = shapes[vi.name]
            if len(shape) != len(dims):
                raise UsageError(f"--input-shape {vi.name}: rank {len(shape)} given, the model's input has rank "
                                 f"{len(dims)}")
            for d, value in zip(dims, shape):
                if d.HasField("dim_value") and d.dim_value != value:
                    raise UsageError(f"--input-shape {vi.name}: dimension {d.dim_value} is fixed in the model, "
                                     f"{value} given")
                d.Clear()
                d.dim_value = value
            continue
        for axis, d in enumerate(dims):
            if d.HasField("dim_value") and d.dim_value > 0:
                continue
            if d.HasField("dim_value") and not d.dim_param:
                raise ModelError(f"input '{vi.name}': dimension {axis} is 0 (an empty tensor)")
            label = d.dim_param or "?"
            if axis == 0:
                log.info("input '%s': dynamic batch dimension '%s' set to 1", vi.name, label)
                d.Clear()
                d.dim_value = 1
            else:
                raise ModelError(f"input '{vi.name}': dimension {axis} ('{label}') is dynamic; fix it with "
                                 f"--input-shape {vi.name}=" + "x".join(
                                     str(x.dim_value) if x.HasField("dim_value") and x.dim_value > 0 else "N"
                                     for x in dims))


def _lift_constants(model: onnx.ModelProto) -> None:
    """Constant nodes become initializers, so handlers see every constant the same way."""
    keep = []
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) == 1 \
                and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)


def _simplify(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        import onnxsim
    except ImportError:  # pragma: no cover - a declared dependency
        log.warning("onnxsim is not installed; the model is compiled without simplification")
        return model
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            simplified, ok = onnxsim.simplify(model)
    except Exception as exc:  # onnxsim raises many kinds; the unsimplified model is still usable
        log.warning("onnxsim could not simplify the model (%s); continuing without", str(exc).splitlines()[0][:200])
        return model
    return simplified if ok else model


def load(path: "str | Path | onnx.ModelProto", input_shapes: "dict[str, tuple[int, ...]] | None" = None,
         simplify: bool = True) -> LoadedModel:
    """Read, check, fix shapes and simplify a model file (or an in-memory ModelProto)."""
    if isinstance(path, onnx.ModelProto):
        model = onnx.ModelProto.FromString(path.SerializeToString())
        digest = hashlib.sha256(path.SerializeToString()).hexdigest()
        path = f"<{model.graph.name or 'model'}>"
    else:
        model = read_model(path)
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "validation failed"
        raise ModelError(f"{path}: invalid ONNX model: {first}") from None
    original_opset = _opset(model)
    if original_opset < MIN_OPSET:
        try:
            model = version_converter.convert_version(model, MIN_OPSET)
            # Old IR versions list initializers as graph inputs; opset 13 goes with IR 7.
            model.ir_version = max(model.ir_version, 7)
        except Exception as exc:
            raise ModelError(f"{path}: cannot convert opset {original_opset} to {MIN_OPSET}: "
                             f"{str(exc).splitlines()[0][:200]}") from None
    _fix_input_shapes(model, input_shapes or {})
    _lift_constants(model)
    if qlinear.has_qoperators(model):
        qlinear.rewrite(model)
    if simplify and any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        simplify = False  # constant folding would dequantize the weights and lose their scales
        log.info("pre-quantized model: compiled without onnxsim, with the model's own scales")
    if simplify:
        model = _simplify(model)
        _lift_constants(model)
    try:
        model = shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        raise ModelError(f"{path}: shape inference failed: {str(exc).strip().splitlines()[0][:300]}") from None
    return LoadedModel(str(path), digest, model, original_opset)


def initializer_arrays(model: onnx.ModelProto) -> dict:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
