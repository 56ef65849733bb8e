"""Read an ONNX file and make it static and simple: check, fix input shapes, simplify, infer shapes.

Everything that can go wrong with a user's file is turned into one ModelError line here, and every size the
file declares is checked against limits.py before anything of that size is allocated.
"""
from __future__ import annotations

import hashlib
import logging
import math
import stat
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference, version_converter

from . import dynamic_quant, fold_shapes, input_values as frozen_inputs, limits, qlinear
from .passes import fuse_mask
from .errors import ModelError, UsageError
from .per_output import named

log = logging.getLogger("onnx2gemmini")

# Models older than this are converted up, so handlers see attribute-free Clip, input-shaped Reshape, etc.
MIN_OPSET = 13
# Element types whose values are packed two to a byte (their payload size is not n * itemsize).
PACKED_4BIT = {getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(onnx.TensorProto, n)}
# Weights of these types must be finite.
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
# Where an infinite constant means something (an open clip bound, a -inf pad before a max pool).
INFINITE_OK = {("Clip", 1), ("Clip", 2), ("Pad", 2)}


@dataclass(frozen=True)
class LoadedModel:
    path: str
    sha256: str
    model: onnx.ModelProto  # simplified, static shapes, constants lifted
    original_opset: int
    files: tuple[str, ...] = ()  # the files read: the model and its external-data files (resolved paths)
    original: bytes = b""  # the model as the user gave it, serialized: diff's reference for every rewrite
    # inputs frozen by --input-value (input_values.py): name -> value, fed to the original model by diff
    input_values: dict = field(default_factory=dict)


def parse_input_shapes(specs: "list[str] | tuple[str, ...] | str | dict | None") -> dict[str, tuple[int, ...]]:
    """`NAME=1x3x224x224` strings (or one such string, or a {name: dims} dict) -> {name: shape}.

    Every dimension must be a positive integer within the max_dim limit: a 20-digit dimension is a bad
    option (exit 2), not an overflow deep inside onnx.
    """
    mapping, items = named(specs, "--input-shape", "input_shape", "NAME=D1xD2x...")
    if mapping is not None:
        return {str(k): _checked_dims(k, v, f"input_shape[{k!r}]") for k, v in mapping.items()}
    shapes = {}
    for spec, name, dims in items:
        parts = dims.lower().split("x")
        if not name or not all(p.isdigit() for p in parts):
            raise UsageError(f"--input-shape '{spec}': expected NAME=D1xD2x... with positive integers")
        shapes[name] = _checked_dims(name, [int(p) for p in parts], f"--input-shape '{spec}'")
    return shapes


def _checked_dims(name, dims, what: str) -> tuple[int, ...]:
    """Positive integer dimensions, each within the max_dim limit (a bad option otherwise)."""
    try:
        shape = tuple(dims)
    except TypeError:
        raise UsageError(f"{what}: expected a sequence of positive integers") from None
    if not shape or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0 for d in shape):
        raise UsageError(f"{what}: expected NAME=D1xD2x... with positive integers")
    for d in shape:
        limits.exceeded("max_dim", f"{what}: a dimension", int(d), UsageError)
    return tuple(int(d) for d in shape)


def read_model(path: "str | Path") -> onnx.ModelProto:
    """Parse a model file (and its external data) within the size limits."""
    return _read(Path(path))[0]


def external_data_files(path: "str | Path") -> tuple[str, ...]:
    """The external-data files a model file names (resolved), without reading them.

    What `--force` must spare: an output directory holding one of them is refused before the compile.
    """
    path = Path(path)
    model, _ = _parse(path)
    base = path.resolve().parent
    locations = [next((e.value for e in t.external_data if e.key == "location"), "") for t in model.graph.initializer
                 if t.data_location == onnx.TensorProto.EXTERNAL]
    return tuple(dict.fromkeys(str((base / loc).resolve()) for loc in locations if loc))


def _read(path: Path) -> tuple[onnx.ModelProto, str, tuple[str, ...]]:
    """The parsed model with its external data, the file's sha256 and the files read (model first)."""
    model, digest = _parse(path)
    external = _load_external_data(model, path, model_size=path.stat().st_size)
    return model, digest, (str(path.resolve()),) + external


def _parse(path: Path) -> tuple[onnx.ModelProto, str]:
    """The model file parsed (external data not loaded) and its sha256."""
    data = _read_bytes(path)
    model = onnx.ModelProto()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.ParseFromString(data)
    except Exception:  # protobuf raises DecodeError or RuntimeWarning-laden errors
        raise ModelError(f"{path}: not an ONNX model (protobuf parse failed)") from None
    if not model.HasField("graph") or not model.graph.node:
        raise ModelError(f"{path}: not an ONNX model (no graph or no nodes)")
    return model, hashlib.sha256(data).hexdigest()


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, refusing what cannot be an ONNX file before reading it.

    Only regular files: /dev/zero or a FIFO would otherwise be read until memory runs out.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ModelError(f"{path}: no such file") from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot read: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ModelError(f"{path}: is a directory, expected an .onnx file")
    if not stat.S_ISREG(info.st_mode):
        raise ModelError(f"{path}: not a regular file (a device, FIFO or socket), expected an .onnx file")
    if info.st_size == 0:
        raise ModelError(f"{path}: empty file, expected an ONNX model")
    limits.exceeded("model_bytes", f"{path}", info.st_size, ModelError)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ModelError(f"{path}: cannot read: {exc.strerror}") from None


def _load_external_data(model: onnx.ModelProto, path: Path, model_size: int) -> tuple[str, ...]:
    """Load external tensors only from regular files inside the model's directory, each range checked.

    onnx's own loader turns a bad offset or length into an internal error (or reads a short tensor);
    here each is a ModelError naming the initializer, and the total counts against model_bytes.
    """
    base = path.resolve().parent
    files, total = [], model_size
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        target = _external_file(tensor.name, info.get("location", ""), base)
        offset, length = _external_range(tensor, info, target.stat().st_size)
        total += length
        limits.exceeded("model_bytes", f"{path} with its external data", total, ModelError)
        with open(target, "rb") as f:
            f.seek(offset)
            tensor.raw_data = f.read(length)
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
        files.append(str(target))
    return tuple(dict.fromkeys(files))


def _external_file(name: str, location: str, base: Path) -> Path:
    """The resolved file of an external tensor, refused outside the model's folder (no ../, no symlink out)."""
    target = (base / location).resolve()
    if not location or base not in target.parents or not target.is_file():
        raise ModelError(f"initializer '{name}': external data '{location}' is missing or outside "
                         f"the model's directory (refused)")
    return target


def _external_range(tensor: onnx.TensorProto, info: dict, file_size: int) -> tuple[int, int]:
    """(offset, length) of a tensor's bytes in its file: integers, inside the file, the tensor's size."""
    where = f"initializer '{tensor.name}': external data '{info.get('location', '')}'"
    check_tensor(tensor, f"initializer '{tensor.name}'", ModelError)
    expected = _payload_bytes(tensor)
    try:
        offset = int(info.get("offset", 0))
        default = expected if expected is not None else file_size - offset
        length = int(info["length"]) if "length" in info else default
    except ValueError:
        raise ModelError(f"{where}: offset/length are not integers") from None
    if offset < 0 or length < 0 or offset + length > file_size:
        raise ModelError(f"{where}: offset {offset} and length {length} lie outside the file "
                         f"({file_size} bytes)")
    if expected is not None and expected != length:
        raise ModelError(f"{where}: {length} bytes, the tensor's shape and type need {expected}")
    return offset, length


def _payload_bytes(tensor: onnx.TensorProto) -> "int | None":
    """Raw bytes a tensor of this shape and type holds (None for strings and unknown types)."""
    if tensor.data_type == onnx.TensorProto.STRING:
        return None
    n = math.prod(tensor.dims)
    if tensor.data_type in PACKED_4BIT:
        return (n + 1) // 2
    try:
        return n * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None


def check_tensor(tensor: onnx.TensorProto, what: str, error: type) -> None:
    """A stored tensor's declared size within tensor_bytes, and a payload that matches it.

    Checked before numpy converts it: a tiny file can declare a huge shape, and a short payload is
    otherwise an internal error (or a short read) deep inside onnx.
    """
    if any(d < 0 for d in tensor.dims):
        raise error(f"{what}: negative dimension in {list(tensor.dims)}")
    expected = _payload_bytes(tensor)
    if expected is None:
        if tensor.data_type != onnx.TensorProto.STRING:
            raise error(f"{what}: unknown data type {tensor.data_type}")
        return
    limits.exceeded("tensor_bytes", f"{what} ({_shape_text(tensor.dims)})", expected, error)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return  # sized and range-checked by _external_range when loaded
    if tensor.HasField("raw_data"):
        intact = len(tensor.raw_data) == expected
    else:
        count = math.prod(tensor.dims)
        complex_ = tensor.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128)
        wanted = (count + 1) // 2 if tensor.data_type in PACKED_4BIT else count * (2 if complex_ else 1)
        intact = len(getattr(tensor, helper.tensor_dtype_to_field(tensor.data_type))) == wanted
    if not intact:
        raise error(f"{what}: its data does not match its shape {_shape_text(tensor.dims)} (truncated or corrupt)")


def _check_initializers(model: onnx.ModelProto) -> None:
    """Every stored tensor of the graph: initializers and Constant node values (named by their output)."""
    for tensor in model.graph.initializer:
        check_tensor(tensor, f"initializer '{tensor.name}'", ModelError)
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    check_tensor(attr.t, f"constant '{node.output[0] if node.output else node.name}'", ModelError)


def _check_finite(model: onnx.ModelProto) -> None:
    """No NaN weight anywhere and no infinite one outside Clip bounds and Pad values.

    A NaN or infinite weight quantizes to garbage int8 weights, and a diff against onnxruntime (which
    propagates the same NaN) can still pass: refuse it instead.
    """
    uses: dict[str, set[tuple[str, int]]] = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, set()).add((node.op_type, i))
    for tensor in model.graph.initializer:
        if tensor.data_type not in FLOAT_TYPES:
            continue
        values = numpy_helper.to_array(tensor)
        if np.isfinite(values).all():
            continue
        if np.isnan(values).any():
            raise ModelError(f"initializer '{tensor.name}' contains NaN values; the model cannot be quantized")
        if not (values.size == 1 and uses.get(tensor.name) and uses[tensor.name] <= INFINITE_OK) \
                and not _softmax_mask(model, tensor.name, values):
            raise ModelError(f"initializer '{tensor.name}' contains infinite values; the model cannot be "
                             f"quantized")


# Ops an attention mask's -inf passes through on its way to the Add before a Softmax (Where: as a value).
MASK_PATH_OPS = {"Where", "Add", "Expand", "Reshape", "Unsqueeze", "Squeeze", "Slice", "Tile", "Concat", "Cast"}


def _softmax_mask(model: onnx.ModelProto, name: str, values: np.ndarray) -> bool:
    """An attention mask (passes/fuse_mask.py, input_mask.py): -inf (or 0) values that reach nothing but the
    Add before a Softmax, through ops that only move or select them."""
    if not (fuse_mask.is_mask(values) or np.all(values <= fuse_mask.MASKED_BELOW)):
        return False
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    outputs = {o.name for o in model.graph.output}
    frontier, seen = [name], set()
    while frontier:
        tensor = frontier.pop()
        readers = consumers.get(tensor, [])
        if tensor in outputs or not readers:
            return False
        for node in readers:
            if node.op_type not in MASK_PATH_OPS or (node.op_type == "Where" and node.input[0] == tensor):
                return False  # not a move or selection of the values (a Where's condition is not a value)
            after = consumers.get(node.output[0], [])
            if node.op_type in ("Add", "Where") and len(after) == 1 and after[0].op_type == "Softmax":
                continue
            if node.output[0] not in seen:
                seen.add(node.output[0])
                frontier.append(node.output[0])
    return True


def _shape_text(dims) -> str:
    return "x".join(str(d) for d in dims) or "scalar"


def _tensor_bytes(vi: onnx.ValueInfoProto) -> "int | None":
    """Bytes of a value with a fully static shape, counted as float32 or wider; None when not static."""
    dims = vi.type.tensor_type.shape.dim
    if not vi.type.tensor_type.HasField("shape") or not all(d.HasField("dim_value") and d.dim_value >= 0
                                                            for d in dims):
        return None
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).itemsize
    except (KeyError, ValueError, TypeError):
        itemsize = 4
    return math.prod(d.dim_value for d in dims) * max(itemsize, 4)


def _check_activation_sizes(model: onnx.ModelProto) -> None:
    """Each activation within tensor_bytes (one sample). All of them together may exceed activation_bytes:
    calibration and the checks then run the model in pieces that fit it (segments.py), and refuse only a node
    whose own values do not."""
    initializers = {t.name for t in model.graph.initializer}
    values = [vi for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output)
              if vi.name not in initializers]
    for vi in {vi.name: vi for vi in values}.values():
        size = _tensor_bytes(vi)
        if size is None:
            continue
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        limits.exceeded("tensor_bytes", f"tensor '{vi.name}' ({_shape_text(dims)})", size, ModelError)


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _refuse_empty_io(model: onnx.ModelProto) -> None:
    """A model input or output declared with a dimension of 0 is an empty tensor: nothing to compute on.
    (A dynamic dimension is a name, unset, or -1; only those become --input-shape's to fix.)"""
    initializers = {t.name for t in model.graph.initializer}
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for vi in values:
            dims = vi.type.tensor_type.shape.dim
            if vi.name not in initializers and any(d.HasField("dim_value") and d.dim_value == 0 for d in dims):
                shape = _shape_text(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
                raise ModelError(f"{kind} '{vi.name}' has a zero-sized dimension ({shape}): it is an empty tensor, "
                                 "so the model computes nothing on it; a dynamic dimension is written as a name or -1")


def _forget_non_positive_dims(model: onnx.ModelProto) -> None:
    """A dim_value < 0 (paddle2onnx writes -1) means "dynamic": make it an unknown dimension everywhere (a 0 on
    an input or output was refused by _refuse_empty_io; on a value_info it is cleared too, inference redoes it).

    Done first: the opset converter and strict shape inference would otherwise take -1 for a size.
    """
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.Clear()


def _is_dynamic(d) -> bool:
    """Unset or symbolic (after _forget_non_positive_dims, -1 is unset too; 0 was refused before)."""
    return not d.HasField("dim_value")


def _fix_input_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> None:
    """Make every input static: from --input-shape, or a dynamic batch set to 1."""
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in initializers]
    names = {vi.name for vi in graph_inputs}
    for name in shapes:
        if name not in names:
            raise UsageError(f"--input-shape: the model has no input '{name}' (inputs: {', '.join(sorted(names))})")
    for vi in graph_inputs:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in shapes:
            _apply_shape(vi, shapes[vi.name])
        else:
            _default_shape(vi)
        for axis, d in enumerate(dims):
            limits.exceeded("max_dim", f"input '{vi.name}': dimension {axis}", d.dim_value, ModelError)
        limits.exceeded("tensor_bytes", f"input '{vi.name}' ({_shape_text(d.dim_value for d in dims)})",
                        _tensor_bytes(vi) or 0, ModelError)


def _apply_shape(vi: onnx.ValueInfoProto, shape: tuple[int, ...]) -> None:
    """An --input-shape may fix dynamic dimensions only: a fixed one that differs is a usage error."""
    dims = vi.type.tensor_type.shape.dim
    if len(shape) != len(dims):
        raise UsageError(f"--input-shape {vi.name}: rank {len(shape)} given, the model's input has rank "
                         f"{len(dims)}")
    for d, value in zip(dims, shape):
        if not _is_dynamic(d) and d.dim_value != value:
            raise UsageError(f"--input-shape {vi.name}: dimension {d.dim_value} is fixed in the model, "
                             f"{value} given")
        d.Clear()
        d.dim_value = value


def _default_shape(vi: onnx.ValueInfoProto) -> None:
    """A dynamic batch (axis 0) becomes 1; any other dynamic dimension needs --input-shape."""
    dims = vi.type.tensor_type.shape.dim
    for axis, d in enumerate(dims):
        if not _is_dynamic(d):
            continue
        label = d.dim_param or "?"
        if axis == 0:
            log.info("input '%s': dynamic batch dimension '%s' set to 1", vi.name, label)
            d.Clear()
            d.dim_value = 1
        else:
            example = "x".join("N" if _is_dynamic(x) else str(x.dim_value) for x in dims)
            raise ModelError(f"input '{vi.name}': dimension {axis} ('{label}') is dynamic; fix it with "
                             f"--input-shape {vi.name}={example}")


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


# Packages some onnxsim releases import at start-up for features we never call (torch for PPQ and export
# bridges, sympy for symbolic-shape printing): seconds of a compile. `_import_onnxsim` keeps them out.
ONNXSIM_UNUSED = ("torch", "sympy")


def _import_onnxsim():
    """onnxsim, imported without ONNXSIM_UNUSED unless they are already loaded (then they cost nothing).

    Each is marked absent (None in sys.modules, the documented way) only while onnxsim imports, and every
    onnxsim import of them is optional; if a release needs one after all, onnxsim is imported again the
    ordinary way."""
    blocked = [name for name in ONNXSIM_UNUSED if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None
    try:
        import onnxsim
        return onnxsim
    except ImportError:
        for name in [m for m in sys.modules if m == "onnxsim" or m.startswith("onnxsim.")]:
            del sys.modules[name]
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
    import onnxsim
    return onnxsim


def _drop_dynamic_declarations(model: onnx.ModelProto) -> None:
    """With the inputs fixed, a value_info or output shape naming a dynamic dimension is stale (an extracted
    sub-model keeps its parent's): onnxsim would take the model as dynamic from it, give the inputs their
    dynamic dimensions back and fold no shape computation. Dropped here; inference declares them again."""
    for vi in list(model.graph.value_info):
        if any(d.dim_param for d in vi.type.tensor_type.shape.dim):
            model.graph.value_info.remove(vi)
    for vi in model.graph.output:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                d.Clear()  # unknown


def _simplify(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        onnxsim = _import_onnxsim()
    except ImportError:  # pragma: no cover - a declared dependency
        log.warning("onnxsim is not installed; the model is compiled without simplification")
        return model
    # Constant folding must not materialize a tensor above tensor_bytes (onnxsim takes at most ~2 GB).
    threshold = min(limits.current().tensor_bytes, 2**31 - 10_000)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            simplified, ok = onnxsim.simplify(model, tensor_size_threshold=f"{threshold}B")
    except Exception as exc:  # onnxsim raises many kinds; the unsimplified model is still usable
        log.warning("onnxsim could not simplify the model (%s); continuing without", str(exc).splitlines()[0][:200])
        return model
    return simplified if ok else model


def _open(source) -> tuple[onnx.ModelProto, str, str, tuple[str, ...]]:
    """(model, sha256, its name in messages, the files read) from a path or an in-memory ModelProto."""
    if isinstance(source, (str, Path)):
        model, digest, files = _read(Path(source))
        return model, digest, str(source), files
    if not isinstance(source, onnx.ModelProto):
        raise UsageError(f"model: expected a path or an onnx.ModelProto, got {type(source).__name__}")
    limits.exceeded("model_bytes", "the model", source.ByteSize(), ModelError)
    data = source.SerializeToString()
    model = onnx.ModelProto.FromString(data)
    external = [t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:  # relative to what? Only a file has a folder its external data may come from.
        raise ModelError(f"initializer '{external[0]}': external data in an in-memory model; "
                         f"load the model from its file instead")
    return model, hashlib.sha256(data).hexdigest(), f"<{model.graph.name or 'model'}>", ()


def load(path: "str | Path | onnx.ModelProto", input_shapes: "dict[str, tuple[int, ...]] | None" = None,
         simplify: bool = True, input_values: "dict | None" = None) -> LoadedModel:
    """Read, check, fix shapes and simplify a model file (or an in-memory ModelProto); `input_values`
    (input_values.parse) freezes inputs to constants before simplification, so branches on them fold."""
    model, digest, path, files = _open(path)
    original = _serialized(model)
    _check_initializers(model)
    _refuse_empty_io(model)
    _forget_non_positive_dims(model)
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
    frozen = frozen_inputs.freeze(model, input_values or {})
    _fix_input_shapes(model, input_shapes or {})
    _lift_constants(model)
    if dynamic_quant.has_dynamic(model):
        done = dynamic_quant.rewrite(model)
        log.info("dynamically quantized model: %d integer ops turned back into float with their weights "
                 "dequantized; calibrated like a float model", done)
    if qlinear.has_qoperators(model):
        qlinear.rewrite(model)
    if simplify and any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        simplify = False  # constant folding would dequantize the weights and lose their scales
        log.info("pre-quantized model: compiled without onnxsim, with the model's own scales")
    if simplify:
        folded = fold_shapes.fold(model)
        if folded:
            log.info("%d shape computations folded to the constants onnxruntime computes", folded)
        _drop_dynamic_declarations(model)
        model = _simplify(model)
        _lift_constants(model)
    model = _infer_shapes(model, path)
    _check_activation_sizes(model)
    _check_finite(model)
    return LoadedModel(str(path), digest, model, original_opset, files, original, frozen)


def _serialized(model: onnx.ModelProto) -> bytes:
    """The model's bytes, or none past protobuf's 2 GiB (diff then has no original to compare with)."""
    try:
        return model.SerializeToString()
    except ValueError:
        return b""


def _infer_shapes(model: onnx.ModelProto, path: str) -> onnx.ModelProto:
    """Strict shape inference. Exporters sometimes declare a graph output's (or a value_info's) shape wrongly,
    and onnxruntime runs such models anyway: when inference contradicts a declaration, the declared shapes are
    dropped (declarations compute nothing) and inferred again, with a warning naming what changed."""
    def infer(m):
        return shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)

    try:
        return infer(model)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:300]
    declared = {vi.name: vi for vi in list(model.graph.output) + list(model.graph.value_info)
                if vi.type.tensor_type.HasField("shape")}
    if "existing shape differ" not in first or not declared:
        raise ModelError(f"{path}: shape inference failed: {first}")
    texts = {name: _shape_text(d.dim_value or d.dim_param or "?" for d in vi.type.tensor_type.shape.dim)
             for name, vi in declared.items()}
    for vi in declared.values():
        vi.type.tensor_type.ClearField("shape")
    try:
        model = infer(model)
    except Exception:
        raise ModelError(f"{path}: shape inference failed: {first}") from None
    for vi in list(model.graph.output) + list(model.graph.value_info):
        got = _shape_text(d.dim_value or d.dim_param or "?" for d in vi.type.tensor_type.shape.dim)
        if vi.name in texts and got != texts[vi.name]:
            log.warning("tensor '%s': the model declares shape %s, its node computes %s; the declaration is "
                        "ignored", vi.name, texts[vi.name], got)
    return model


def initializer_arrays(model: onnx.ModelProto) -> dict:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
