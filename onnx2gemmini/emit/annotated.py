"""model.annotated.onnx: the simplified model, each node carrying its plan, so Netron shows it on the graph.

Why: the plan is easiest to read on the graph it came from. Every node gets a doc string (Netron's
description) and `onnx2gemmini.*` metadata properties (Netron's node metadata): where it runs, the
gemmini.h call, tiles, estimated cycles, DRAM bytes, scales and, when known, SQNR and mismatches. The
graph itself is untouched, so the file is still the model onnxruntime runs. Text the model provided
(names, reasons naming nodes) goes in through names.ascii_text: one printable line.
"""
from __future__ import annotations

import json

import onnx

from ..version import __version__
from .names import ascii_text

KEY = "onnx2gemmini."


def graph_node_names(model: onnx.ModelProto) -> list[str]:
    """The names graph.from_onnx gives the model's nodes (plan steps refer to nodes by these names)."""
    names, used = [], set()
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        while name in used:
            name = f"{name}_{i}"
        used.add(name)
        names.append(name)
    return names


def annotated_model(compiled, report: dict) -> onnx.ModelProto:
    """A copy of the compiled (simplified) model with every node annotated from `report` (report.json)."""
    model = onnx.ModelProto()
    model.CopyFrom(compiled.loaded.model)
    steps: dict[str, list[tuple[int, dict]]] = {}
    for i, row in enumerate(report["layers"]):
        steps.setdefault(row["name"], []).append((i, row))
    fused_into = _fused_into(compiled.graph)
    quality = {r["name"]: r for r in report["quality"]["layers"]}
    present = {n.name for n in compiled.graph.nodes}
    for node, name in zip(model.graph.node, graph_node_names(model)):
        props = _node_props(compiled, node, name, steps.get(name, []), fused_into.get(name), quality.get(name),
                            name in present)
        del node.metadata_props[:]
        for key, value in props.items():
            entry = node.metadata_props.add()
            entry.key, entry.value = KEY + key, value
        node.doc_string = "\n".join(f"{key}: {value}" for key, value in props.items())
    cfg = report["config"]
    t = report["totals"]
    summary = {"version": __version__, "command": report["tool"]["command"] or "onnx2gemmini (Python API)",
               "config": f"{cfg['name']} (DIM {cfg['dim']})",
               "macs_on_gemmini": f"{t['macs_on_gemmini']:,} of {t['macs']:,}",
               "est_cycles": _text(t["est_cycles"]), "dram_bytes": _text(t["dram_bytes"]),
               "baseline_dram_bytes": _text(t["baseline_dram_bytes"]),
               "quality_source": str(report["quality"]["source"] or "none")}
    kept = [p for p in model.metadata_props if not p.key.startswith(KEY)]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in summary.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = KEY + key, ascii_text(value)
    model.doc_string = ascii_text(f"Annotated by onnx2gemmini {__version__} for Gemmini config {cfg['name']}; "
                                  f"each node's metadata holds its plan (report.html has the figures).")
    return model


def _fused_into(graph) -> dict[str, str]:
    """Nodes the rewrite passes moved into another node (activation, max pool) -> that node's name."""
    into = {}
    for node in graph.nodes:
        if node.fused.activation_node:
            into[node.fused.activation_node] = node.name
        if node.fused.pool is not None:
            into[node.fused.pool.node] = node.name
    return into


def _node_props(compiled, node: onnx.NodeProto, name: str, steps: list, fused_into: str | None,
                quality: dict | None, present: bool) -> dict[str, str]:
    """The annotation of one node, as ordered printable key/value pairs."""
    if not steps:
        if fused_into is not None:
            return {"target": "fused", "fused_into": ascii_text(fused_into)}
        why = ("no step of its own: a view of its input or written in place by its producers" if present else
               "no step of its own: folded into a neighbouring node by the rewrite passes")
        return {"target": "none", "note": why}
    rows = [row for _, row in steps]
    targets = sorted({row["target"] for row in rows})
    props = {"target": "+".join(targets), "steps": ", ".join(f"#{i}" for i, _ in steps),
             "call": "; ".join(dict.fromkeys(row["call"] for row in rows))}
    tiles = [row["tiles"] for row in rows if row["tiles"]]
    if tiles:
        props["tiles"] = json.dumps(tiles[0] if len(tiles) == 1 else tiles, sort_keys=False)
    for key in ("macs", "est_cycles", "dram_bytes", "baseline_dram_bytes"):
        values = [row[key] for row in rows if row[key] is not None]
        if values:
            props[key] = f"{sum(values):,}"
    utilization = [row["utilization"] for row in rows if row["utilization"] is not None]
    if len(utilization) == 1:
        props["utilization"] = f"{utilization[0]:.1%}"
    scales = compiled.quant.scales
    inputs = [t for t in node.input if t in scales]
    if inputs:
        props["input_scales"] = ", ".join(_float(scales[t]) for t in inputs)
    outputs = [t for t in node.output if t in scales]
    if outputs:
        props["output_scales"] = ", ".join(_float(scales[t]) for t in outputs)
    weights = compiled.quant.weights.get(name)
    if weights is not None:
        props["weight_scale"] = _float(weights.scale) + (" (largest of its groups)" if weights.channel_scale
                                                           is not None else "")
    if quality is not None:
        props["sqnr_db"] = "exact" if quality["sqnr_db"] is None else f"{quality['sqnr_db']:.2f}"
        if quality["mismatches"] is not None:
            props["mismatches_vs_ort_qdq"] = f"{quality['mismatches']:,} of {quality['compared']:,}"
    reasons = [row["reason"] for row in rows if row["reason"]]
    if reasons:
        props["reason"] = "; ".join(dict.fromkeys(reasons))
    return {key: ascii_text(value) for key, value in props.items()}


def _float(value: float) -> str:
    """A scale exactly as float32 rounds it (repr of the float32 value)."""
    return repr(float(value))


def _text(value) -> str:
    return "unknown" if value is None else f"{value:,}"
