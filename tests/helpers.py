"""Shared test helpers: one-node/small model builders and the emulator-vs-onnxruntime check."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx2gemmini as o2g
from onnx2gemmini.data import Dataset, padding_masks
from onnx2gemmini.compare import run_diff
from onnx2gemmini.fidelity import NO_FLOORS

OPSET = 17


def make_model(nodes, inputs, outputs, initializers=None, opset=OPSET, name="test", check=True,
               input_types=None) -> onnx.ModelProto:
    """inputs/outputs: {name: shape}; initializers: {name: array}; `check=False` for models onnx may refuse;
    input_types: {name: TensorProto type} for inputs that are not float (token ids)."""
    types = input_types or {}
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    return model


def infer_outputs(nodes, inputs, initializers=None, opset=OPSET, outputs=("y",), input_types=None):
    """Build a model whose output shapes come from onnx shape inference."""
    types = input_types or {}
    probe = helper.make_graph(nodes, "probe",
                              [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), s)
                               for n, s in inputs.items()],
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()])
    m = helper.make_model(probe, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    return make_model(nodes, inputs, {o: shapes[o] for o in outputs}, initializers, opset, input_types=input_types)


def rng(seed=0):
    return np.random.default_rng(seed)


def random_dataset(model: onnx.ModelProto, samples=4, seed=0, low=-1.0, high=1.0) -> Dataset:
    r = rng(seed)
    arrays = {}
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        rows = table_rows(model, vi.name) if dtype.kind in "iu" else None
        if rows:  # token ids: uniform over the rows of the tables they index
            arrays[vi.name] = r.integers(0, rows, [samples] + shape).astype(dtype)
        elif dtype.kind in "iu":  # an attention mask: each sequence padded after a random length (at least 1)
            arrays[vi.name] = padding_masks(r, [samples] + shape, dtype)
        else:
            arrays[vi.name] = r.uniform(low, high, size=[samples] + shape).astype(np.float32)
    return Dataset(arrays, None, "test")


def table_rows(model: onnx.ModelProto, ids: str) -> int:
    """The rows of the smallest constant table that Gather nodes index by `ids` (0: none)."""
    inits = {t.name: t for t in model.graph.initializer}
    rows = [inits[n.input[0]].dims[next((a.i for a in n.attribute if a.name == "axis"), 0)]
            for n in model.graph.node if n.op_type == "Gather" and n.input[1] == ids and n.input[0] in inits]
    return min(rows, default=0)


def compile_and_diff(model: onnx.ModelProto, samples=4, seed=0, **kwargs):
    """Compile with calibration on random data and diff on other random data. Random weights prove coverage,
    not accuracy: no accuracy floors (NO_FLOORS); the exact half and the weight check still judge."""
    calib = random_dataset(model, samples, seed)
    calib = kwargs.pop("calib", calib)
    compiled = o2g.compile(model, calib=calib, **kwargs)
    result = run_diff(compiled, random_dataset(model, samples, seed + 1), floors=NO_FLOORS)
    return compiled, result


def assert_matches_ort(model: onnx.ModelProto, samples=4, seed=0, **kwargs):
    """Every layer within its stated tolerance of onnxruntime's QDQ run; exact layers bit for bit."""
    compiled, result = compile_and_diff(model, samples, seed, **kwargs)
    for layer in result["layers"]:
        assert layer["max_lsb_vs_ort_qdq"] <= layer["tolerance_lsb"], layer
        if layer["tolerance_lsb"] == 0:
            assert layer["mismatches_vs_ort_qdq"] == 0, layer
    if result["verdict"]["exact_model"]:
        for name, out in result["outputs"].items():
            assert out["int8_vs_ort_qdq"]["mismatches"] == 0, (name, out)
    assert result["verdict"]["passed"], result["verdict"]
    return compiled, result


def one_node(op, shape, inits, extra, after_conv=False, opset=17, **attrs):
    """`op` on input x, or (after_conv) on the NHWC output of a 3x3 conv."""
    nodes, src, inits = [], "x", dict(inits)
    if after_conv:
        inits["W"] = rng(0).normal(0, 0.3, (shape[1], 3, 3, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]))
        src = "c"
    nodes.append(helper.make_node(op, [src, *extra], ["y"], name=op.lower(), **attrs))
    x_shape = [shape[0], 3, *shape[2:]] if after_conv else list(shape)
    return infer_outputs(nodes, {"x": x_shape}, inits, opset=opset)


def assert_exact_move(model):
    """The model matches onnxruntime and its own moves are exact `remap` steps, with no transpose added."""
    compiled, result = assert_matches_ort(model)
    remaps = [s for s in compiled.plan.steps if getattr(s, "op", "") == "remap"]
    assert remaps and all(s.golden_tolerance(compiled.plan.call_site(s)).lsb == 0 for s in remaps)
    own = {s.node for s in remaps}
    assert not any(getattr(s, "op", "") == "transpose" for s in compiled.plan.steps if s.node in own)
    return compiled
