"""The QDQ golden with uint8 activations (zero point 128): the same values, and onnxruntime's fast kernels.

Why: the held-out choice of ranges (quant/selection.py) runs the golden on every candidate and fold, `diff`
on every sample and layer, and on
CPUs with VNNI onnxruntime's u8 x s8 kernels run light ResNet-50 in 26 ms where the signed kernels the
exact session options select take 316 ms (one thread, measured). A uint8 activation with zero point 128 is
the int8 one plus 128: Q gives clamp(round(x/s) + 128, 0, 255) = the int8 value + 128, DQ gives the same
float, so the model computes the same function. Its integer kernels are exact only where onnxruntime
accumulates u8 x s8 products in int32 (VNNI, and dot-product instructions on arm64), not where x86 without
VNNI saturates int16 pair sums: `exact_here` runs the golden's probe cases in this form to decide, and
elsewhere the signed golden runs. Not every fused kernel rounds the same in both forms: QLinearAveragePool
with a divisor that varies at the borders (padding not counted) differs by 1 on some values, so a model
runs in this form only when each of its ops is one `tests/test_unsigned_golden.py` finds bit-identical
in both forms (VERIFIED_OPS; AveragePool only with a constant divisor).
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from .ort_session import probe_cases, session

# Op types of the QDQ golden whose outputs tests/test_unsigned_golden.py finds bit-identical in both forms.
VERIFIED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "Identity", "Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Mul",
    "Div", "Relu", "Clip", "PRelu", "Sigmoid", "HardSigmoid", "Tanh", "Softmax", "MaxPool", "AveragePool",
    "GlobalAveragePool", "Concat", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Pad", "Resize", "Gather",
    "LayerNormalization", "BatchNormalization", "LRN", "ReduceMean", "ReduceSum", "ReduceMax", "LSTM", "GRU",
    "Where", "Equal", "Not", "And", "Cast", "CumSum"})


def unsigned_activations(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the QDQ model whose activation Q/DQ pairs hold uint8 with zero point 128 (weights stay int8
    with zero point 0): each int8 zero point an activation's Q or DQ reads gets a uint8 twin."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {t.name: t for t in g.initializer}
    constants = set(inits)
    twins: dict[str, str] = {}
    unsigned: set[str] = set()  # the tensors that become uint8
    for node in g.node:
        activation = node.op_type == "QuantizeLinear" or (node.op_type == "DequantizeLinear"
                                                           and node.input[0] not in constants)
        if not activation or len(node.input) < 3 or node.input[2] not in inits:
            continue
        zero = node.input[2]
        if zero not in twins:
            value = numpy_helper.to_array(inits[zero])
            if value.dtype != np.int8:
                continue  # an int32 accumulator's
            twins[zero] = f"{zero}__u8"
            g.initializer.append(numpy_helper.from_array((value.astype(np.int16) + 128).astype(np.uint8),
                                                         twins[zero]))
        node.input[2] = twins[zero]
        unsigned.add(node.output[0] if node.op_type == "QuantizeLinear" else node.input[0])
    for info in list(g.value_info) + list(g.input) + list(g.output):  # declared types follow (sub-models)
        if info.name in unsigned and info.type.tensor_type.elem_type == onnx.TensorProto.INT8:
            info.type.tensor_type.elem_type = onnx.TensorProto.UINT8
    return out


def equivalent(model: onnx.ModelProto) -> bool:
    """Whether every op of the QDQ model is one the unsigned form computes bit for bit the same."""
    for node in model.graph.node:
        if node.op_type not in VERIFIED_OPS:
            return False
        if node.op_type == "AveragePool" and _variable_divisor(node):
            return False
    return True


def _variable_divisor(node: onnx.NodeProto) -> bool:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    padded = any(attrs.get("pads", ())) or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID")
    return padded and not attrs.get("count_include_pad", 0)


@functools.lru_cache(maxsize=1)
def exact_here() -> bool:
    """Whether onnxruntime's default session computes the golden's probe cases (QDQ conv, matmul and gemm whose
    u8 x s8 pair sums saturate int16) exactly in the unsigned form on this CPU."""
    for op, case in probe_cases().items():
        if case.scale is None:  # MatMulInteger: not a QDQ model
            continue
        got = session(unsigned_activations(case.model), entries={}).run(None, case.feeds)[0]
        if case.mismatches(got):
            return False
    return True


def golden_session(qdq: onnx.ModelProto, arena: bool = True,
                   level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    """An onnxruntime session computing the QDQ golden's values: the unsigned form where it is exact here
    and equivalent for this model, else the signed golden with its exact options."""
    if exact_here() and equivalent(qdq):
        return session(unsigned_activations(qdq), entries={}, arena=arena, level=level)
    return session(qdq, arena=arena, level=level)
