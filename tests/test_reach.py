"""Which judged output parts each tensor reaches (quant/reach.py), checked against onnxruntime: a tensor
reaches a part when nudging it changes that part's values."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx2gemmini.graph import from_onnx
from onnx2gemmini.ops.registry import handlers_for
from onnx2gemmini.ort_session import session
from onnx2gemmini.quant import reach as reach_mod
from onnx2gemmini.quant.quantize import scale_units
from onnx2gemmini.quant.refine import branches, part_label
from onnx2gemmini.quant.selection import parts
from tests.helpers import make_model

H = 4


def yolo_head(transpose: bool = False) -> onnx.ModelProto:
    """A YOLOv8-like head: a trunk, a box branch (4 channels) and a class branch (2) per level, each level's
    pair joined by a Concat, reshaped, the levels joined, Split into boxes and scores, the scores through a
    sigmoid and joined again: the branches meet twice before the output parts them."""
    rng = np.random.default_rng(0)
    w = lambda o, i: rng.normal(0, 0.5, (o, i, 1, 1)).astype(np.float32)  # noqa: E731
    inits, nodes, level_outs = {"wt": w(8, 3)}, [helper.make_node("Conv", ["x", "wt"], ["trunk"], name="trunk")], []
    nodes.append(helper.make_node("Relu", ["trunk"], ["trunk_act"], name="trunk_act"))
    for lv, pool in enumerate((1, 2)):
        src = "trunk_act"
        if pool > 1:
            nodes.append(helper.make_node("MaxPool", [src], [f"p{lv}"], kernel_shape=[2, 2], strides=[2, 2]))
            src = f"p{lv}"
        inits[f"mb{lv}"], inits[f"mc{lv}"], inits[f"wb{lv}"], inits[f"wc{lv}"] = w(8, 8), w(8, 8), w(4, 8), w(2, 8)
        nodes += [helper.make_node("Conv", [src, f"mb{lv}"], [f"bm{lv}"], name=f"bm{lv}"),
                  helper.make_node("Relu", [f"bm{lv}"], [f"bact{lv}"], name=f"bact{lv}"),
                  helper.make_node("Conv", [src, f"mc{lv}"], [f"cm{lv}"], name=f"cm{lv}"),
                  helper.make_node("Relu", [f"cm{lv}"], [f"cact{lv}"], name=f"cact{lv}"),
                  helper.make_node("Conv", [f"bact{lv}", f"wb{lv}"], [f"box{lv}"], name=f"box{lv}"),
                  helper.make_node("Conv", [f"cact{lv}", f"wc{lv}"], [f"cls{lv}"], name=f"cls{lv}"),
                  helper.make_node("Concat", [f"box{lv}", f"cls{lv}"], [f"pair{lv}"], axis=1),
                  helper.make_node("Reshape", [f"pair{lv}", f"shape{lv}"], [f"flat{lv}"])]
        inits[f"shape{lv}"] = np.array([1, 6, -1], np.int64)
        level_outs.append(f"flat{lv}")
    nodes += [helper.make_node("Concat", level_outs, ["levels"], axis=2),
              helper.make_node("Split", ["levels", "sizes"], ["boxes", "logits"], axis=1),
              helper.make_node("Mul", ["boxes", "stride"], ["scaled"], name="scale"),
              helper.make_node("Sigmoid", ["logits"], ["scores"], name="sigmoid")]
    inits["sizes"], inits["stride"] = np.array([4, 2], np.int64), np.array(8.0, np.float32)
    last = ["scaled", "scores"]
    if transpose:  # the joined output transposed: the parts then lie along the last axis
        nodes.append(helper.make_node("Concat", last, ["joined"], axis=1))
        nodes.append(helper.make_node("Transpose", ["joined"], ["y"], perm=[0, 2, 1]))
        out_shape = [1, H * H + (H // 2) ** 2, 6]
    else:
        nodes.append(helper.make_node("Concat", last, ["y"], axis=1))
        out_shape = [1, 6, H * H + (H // 2) ** 2]
    return make_model(nodes, {"x": [1, 3, H, H]}, {"y": out_shape}, inits)


def nudged_reach(model: onnx.ModelProto, tensor: str, cuts: list[tuple]) -> set[int]:
    """The parts of y whose values onnxruntime sees change when `tensor` gets noise added."""
    nudged = onnx.ModelProto()
    nudged.CopyFrom(model)
    g = nudged.graph
    for node in g.node:
        node.input[:] = [f"{tensor}_nudged" if i == tensor else i for i in node.input]
    shape = next(list(d.dim_value for d in v.type.tensor_type.shape.dim)
                 for v in list(onnx.shape_inference.infer_shapes(model).graph.value_info) + list(g.input)
                 if v.name == tensor)
    noise = np.random.default_rng(1).normal(0, 1.0, shape).astype(np.float32)
    g.initializer.append(numpy_helper.from_array(noise, f"{tensor}_noise"))
    g.node.insert(0, helper.make_node("Add", [tensor, f"{tensor}_noise"], [f"{tensor}_nudged"]))
    ordered = _sorted(nudged)
    del g.node[:]
    g.node.extend(ordered)
    x = np.random.default_rng(2).normal(0, 1, (1, 3, H, H)).astype(np.float32)
    base, moved = session(model).run(["y"], {"x": x})[0], session(nudged).run(["y"], {"x": x})[0]
    return {k for k, cut in enumerate(cuts) if not np.array_equal(base[cut], moved[cut])}


def _sorted(model):
    ready, pending, out = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer}, \
        list(model.graph.node), []
    while pending:
        node = next(n for n in pending if all(i in ready for i in n.input if i))
        pending.remove(node)
        out.append(node)
        ready.update(node.output)
    return out


@pytest.mark.parametrize("transpose", [False, True])
def test_each_tensor_reaches_the_parts_onnxruntime_sees_it_change(transpose):
    model = yolo_head(transpose)
    graph = from_onnx(onnx.shape_inference.infer_shapes(model))
    judged = [("y", p) for p in parts(graph, "y")]
    if transpose:  # a Transpose makes the output: one part, reached by every tensor
        assert judged == [("y", (...,))]
        return
    assert [part_label(*u) for u in judged] == ["y[:, 0:4]", "y[:, 4:6]"]
    found = reach_mod.reach(graph, handlers_for(graph), judged)
    checked = ["trunk", "trunk_act", "p1", "bact0", "cact1", "box0", "box1", "cls0", "cls1", "pair0", "levels",
               "boxes", "logits"]
    for tensor in checked:
        assert found[tensor] == nudged_reach(model, tensor, [p for _, p in judged]), tensor
    assert found["box0"] == {0} and found["cls1"] == {1} and found["trunk"] == {0, 1}  # not all alike


def test_without_following_the_moves_every_branch_reaches_every_part(monkeypatch):
    """Negative control: an op taken to mix its inputs (as every op not followed is) joins the branches at
    the first Concat, so no branch is told apart."""
    model = yolo_head()
    graph = from_onnx(onnx.shape_inference.infer_shapes(model))
    judged = [("y", p) for p in parts(graph, "y")]
    monkeypatch.setattr(reach_mod, "MOVES", frozenset())
    found = reach_mod.reach(graph, handlers_for(graph), judged)
    assert found["box0"] == found["cls1"] == {0, 1}


def test_branches_group_the_scale_units_trunk_first():
    model = yolo_head()
    graph = from_onnx(onnx.shape_inference.infer_shapes(model))
    handlers = handlers_for(graph)
    units, _ = scale_units(graph, handlers)
    groups = branches(graph, handlers, [("y", p) for p in parts(graph, "y")], units)
    assert [reached for reached, _ in groups][0] == (0, 1)
    assert sorted(reached for reached, _ in groups[1:]) == [(0,), (1,)]
    members = {reached: {t for u in group for t in u.scaled} for reached, group in groups}
    assert {"cact0", "cact1"} <= members[(1,)] and {"bact0", "bact1"} <= members[(0,)]
    assert "trunk_act" in members[(0, 1)]
    one = from_onnx(onnx.shape_inference.infer_shapes(make_model(
        [helper.make_node("Relu", ["x"], ["y"])], {"x": [1, 4]}, {"y": [1, 4]})))
    assert branches(one, handlers_for(one), [("y", (...,))], scale_units(one, handlers_for(one))[0]) == []
