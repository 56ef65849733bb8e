"""QOperator models (QLinearConv, QLinearMatMul, com.microsoft QGemm) rewritten as DQ -> op -> Q before
shape inference, so they load like any QDQ model and passes/qdq_import.py takes their scales."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

# (domain, op) -> (float op, (x, x_scale, x_zp), (w, w_scale, w_zp), y_scale, y_zp, bias) input positions
LAYOUTS = {
    ("", "QLinearConv"): ("Conv", (0, 1, 2), (3, 4, 5), 6, 7, 8),
    ("", "QLinearMatMul"): ("MatMul", (0, 1, 2), (3, 4, 5), 6, 7, None),
    ("com.microsoft", "QGemm"): ("Gemm", (0, 1, 2), (3, 4, 5), 7, 8, 6),
}
KEEP_ATTRS = {"Conv": None, "MatMul": (), "Gemm": ("alpha", "transA", "transB")}


def has_qoperators(model: onnx.ModelProto) -> bool:
    return any((_domain(n), n.op_type) in LAYOUTS for n in model.graph.node)


def _domain(node) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def rewrite(model: onnx.ModelProto) -> None:
    """In place: every QOperator node becomes DequantizeLinear(s) -> float op -> QuantizeLinear."""
    inits = {t.name: t for t in model.graph.initializer}
    nodes = []
    for node in model.graph.node:
        layout = LAYOUTS.get((_domain(node), node.op_type))
        if layout is None:
            nodes.append(node)
            continue
        op, xs, ws, ys, yz, bias = layout
        get = lambda i: node.input[i] if i is not None and i < len(node.input) else ""  # noqa: E731
        name = node.name or node.output[0]
        x_f, w_f, y_f = f"{name}__x", f"{name}__w", f"{name}__y"
        nodes.append(helper.make_node("DequantizeLinear", [get(i) for i in xs], [x_f], name=f"{name}__dq_x"))
        trans_b = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "transB"), 0)
        w_axis = {"Conv": 0, "MatMul": 1, "Gemm": 0 if trans_b else 1}[op]  # per-channel scales: output axis
        nodes.append(helper.make_node("DequantizeLinear", [get(i) for i in ws], [w_f], name=f"{name}__dq_w",
                                      axis=w_axis))
        op_inputs = [x_f, w_f]
        if get(bias):
            b_scale = f"{name}__b_scale"
            product = np.float32(numpy_helper.to_array(inits[get(xs[1])])) * \
                np.float32(numpy_helper.to_array(inits[get(ws[1])]))
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(product, np.float32), b_scale))
            nodes.append(helper.make_node("DequantizeLinear", [get(bias), b_scale], [f"{name}__b"],
                                          name=f"{name}__dq_b", axis=0))
            op_inputs.append(f"{name}__b")
        keep = KEEP_ATTRS[op]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if keep is None or a.name in keep}
        nodes.append(helper.make_node(op, op_inputs, [y_f], name=name, **attrs))
        nodes.append(helper.make_node("QuantizeLinear", [y_f, get(ys), get(yz)], [node.output[0]],
                                      name=f"{name}__q_y"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
