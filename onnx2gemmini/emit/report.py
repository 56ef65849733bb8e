"""report.json and report.md: what was compiled, where each layer runs, what it costs, and (`quality`) how
far each layer's int8 result is from the float model."""
from __future__ import annotations

import json

import numpy as np

from ..cpu import CpuKernel
from ..memory import align_up, plan_memory
from ..normalizer import SOFTMAX
from ..plan import Conv, ConvDw, CpuOp, GlobalAverage, Matmul, Plan, Resadd
from ..version import __version__
from .names import markdown

CALLS = {Matmul: "tiled_matmul_auto", Conv: "tiled_conv_auto", ConvDw: "tiled_conv_dw_auto",
         Resadd: "tiled_resadd_auto", GlobalAverage: "tiled_global_average_auto"}


def call_name(step) -> str:
    """The gemmini.h entry point the C backend emits for this step (explicit tiles: no `_auto`)."""
    if isinstance(step, CpuOp):
        return f"cpu:{step.op}"
    name = CALLS[type(step)]
    return name.removesuffix("_auto") if getattr(step, "tiles", None) else name


def geometry(step) -> dict:
    if isinstance(step, Matmul):
        return {"I": step.I, "J": step.J, "K": step.K}
    if isinstance(step, Conv):
        return {"batch": step.batch_size, "in_rows": step.in_row_dim, "in_cols": step.in_col_dim,
                "in_channels": step.in_channels, "out_rows": step.out_row_dim, "out_cols": step.out_col_dim,
                "out_channels": step.out_channels, "kernel": step.kernel_dim, "stride": step.stride,
                "padding": step.padding, "pool_size": step.pool_size, "pool_stride": step.pool_stride,
                "pool_padding": step.pool_padding}
    if isinstance(step, ConvDw):
        return {"batch": step.batch_size, "in_rows": step.in_row_dim, "in_cols": step.in_col_dim,
                "channels": step.channels, "out_rows": step.out_row_dim, "out_cols": step.out_col_dim,
                "kernel": step.kernel_dim, "stride": step.stride, "padding": step.padding,
                "pool_size": step.pool_size, "pool_stride": step.pool_stride, "pool_padding": step.pool_padding}
    if isinstance(step, Resadd):
        return {"I": step.I, "J": step.J}
    if isinstance(step, GlobalAverage):
        return {"batches": step.batches, "channels": step.channels, "dim": step.dim}
    return {}


def step_macs(step, plan: Plan) -> int:
    """Multiply-accumulates of a step, wherever it runs (CPU depthwise convs count too)."""
    if isinstance(step, (Matmul, Conv, ConvDw)):
        return step.macs
    if isinstance(step, CpuOp) and step.op == "dwconv":
        kh, kw = step.params.window.kernel
        return int(np.prod(plan.tensors[step.outputs[0]].shape)) * kh * kw
    if isinstance(step, CpuOp) and type(step.params).macs is not CpuKernel.macs:  # a layer kept float
        return step.params.macs(plan.call_site(step))
    return 0


def layer_rows(plan: Plan, node_ops: dict[str, str]) -> list[dict]:
    """One row per plan step (quantize steps included: they are CPU work too), with the cost figures
    tiling attached to the plan."""
    rows = []
    for i, step in enumerate(plan.steps):
        est = (plan.costs[i] if plan.costs else None) or {}
        quantize = isinstance(step, CpuOp) and step.op == "quantize"
        rows.append({
            "name": step.node,
            "op": node_ops.get(step.node, "QuantizeLinear" if quantize else "output"),
            "target": step.target,
            "call": call_name(step),
            "macs": step_macs(step, plan),
            "geometry": geometry(step),
            "tiles": getattr(step, "tiles", None) or est.get("tiles"),
            "baseline_tiles": est.get("baseline_tiles"),
            "dram_bytes": est.get("dram_bytes"),
            "baseline_dram_bytes": est.get("baseline_dram_bytes"),
            "est_cycles": est.get("est_cycles"),
            "utilization": est.get("utilization"),
            "reason": step.reason if isinstance(step, CpuOp) else gemmini_note(step),
        })
    return rows


def gemmini_note(step) -> str:
    """What a reader of the report should know about a Gemmini step: the normalizer's softmax it applies
    (passes/fuse_softmax.py), and why gemmini.h's own tiles are unsafe for it."""
    notes = []
    if isinstance(step, Matmul) and step.act == SOFTMAX:
        notes.append(f"the softmax on Gemmini's normalizer (bert_scale {step.bert_scale:.4g}, operands through the "
                     f"mvin scaler at {step.A_scale_factor:.4g})")
    if getattr(step, "heuristic_hazard", ""):
        notes.append(step.heuristic_hazard)
    return "; ".join(notes)


def input_entry(plan, tid: str) -> dict:
    """A model input: name, ONNX shape, dtype and its quantization scale (None: integer ids, never quantized)."""
    t = plan.tensors[tid]
    quantize = next((s for s in plan.steps if isinstance(s, CpuOp) and s.inputs[0] == tid
                     and s.params.op == "quantize"), None)
    return {"name": t.onnx_name, "shape": list(t.onnx_shape), "dtype": t.dtype,
            "scale": plan.tensors[quantize.outputs[0]].scale if quantize is not None else None}


def output_entry(t) -> dict:
    """A model output in report.json: name, ONNX shape, dtype ("int8", or "float32": real values, scale 1),
    scale, and (when it keeps its concat inputs' scales) `axis_scales`: the ONNX axis and one scale per index
    along it."""
    entry = {"name": t.onnx_name, "shape": list(t.onnx_shape), "dtype": t.dtype,
             "scale": 1.0 if t.dtype == "float32" else t.scale}
    if t.scale_axis is not None:
        entry["axis_scales"] = {"axis": t.scale_axis, "scales": list(t.axis_scales)}
    return entry


def _sum_or_none(rows, key):
    values = [r[key] for r in rows if r["target"] == "gemmini"]
    return None if not values or any(v is None for v in values) else sum(values)


def arena_buffers(plan: Plan, memory) -> list[dict]:
    """Each arena buffer (views and slices share their base's): offset, aligned bytes, live steps."""
    rows = [{"tensor": tid, "offset": memory.offsets[tid],
             "bytes": align_up(max(plan.tensors[tid].nbytes, 1), memory.alignment),
             "first_step": first, "last_step": last} for tid, (first, last) in memory.live.items()]
    return sorted(rows, key=lambda r: (r["first_step"], r["offset"], r["tensor"]))


NO_QUALITY = {"source": None, "samples": 0, "data": "", "layers": []}


def kept_float(compiled, rows: list[dict]) -> dict:
    """The layers `--keep-float` runs in float on the CPU: per layer its float_conv step's MACs, estimated CPU
    cycles and float32 weight bytes, and their sums (what keeping them costs; `totals` counts their MACs as
    not on Gemmini and their weights in weight_bytes)."""
    plan, kept = compiled.plan, compiled.quant.float_layers
    layers = []
    for node in compiled.graph.nodes:
        if node.name not in kept:
            continue
        steps = [(s, r) for s, r in zip(plan.steps, rows) if s.node == node.name and isinstance(s, CpuOp)
                 and s.op == "float_conv"]
        layers.append({"name": node.name, "op": node.op_type, "macs": sum(r["macs"] for _, r in steps),
                       "est_cycles": sum(r["est_cycles"] or 0 for _, r in steps),
                       "weight_bytes": sum(int(plan.constants[t].nbytes) for s, _ in steps for t in s.inputs
                                           if t in plan.constants)})
    return {"layers": layers, **{k: sum(row[k] for row in layers) for k in ("macs", "est_cycles", "weight_bytes")}}


def build_report(compiled, timing: dict, quality: dict | None = None, sensitivity: list | None = None) -> dict:
    """report.json; `quality` comes from quality.py (a diff result, or calibration samples); `sensitivity`
    is a diff result's ranking (sensitivity.py), kept whole under the same key when given."""
    plan = compiled.plan
    node_ops = {n.name: n.op_type for n in compiled.graph.nodes}
    rows = layer_rows(plan, node_ops)
    dim = plan.config.dim
    macs = sum(r["macs"] for r in rows)
    macs_gemmini = sum(r["macs"] for r in rows if r["target"] == "gemmini")
    ideal = -(-macs_gemmini // (dim * dim))
    est_gemmini = _sum_or_none(rows, "est_cycles")
    est_cpu = sum(r["est_cycles"] or 0 for r in rows if r["target"] == "cpu")
    # the whole program: Gemmini's steps and the host core's (CPU instructions x config.cpu_cpi)
    est = None if est_gemmini is None and macs_gemmini else (est_gemmini or 0) + est_cpu
    activation_bytes = sum(plan.tensors[t].nbytes for t in plan.tensors
                           if plan.tensors[t].view_of is None and plan.tensors[t].slice_of is None
                           and plan.tensors[t].kind in ("activation", "temp", "output")
                           and plan.tensors[t].dtype == "int8")
    weight_bytes = sum(int(v.nbytes) for v in plan.constants.values())
    loaded = compiled.loaded
    memory = plan_memory(plan)
    report = {
        "tool": {"name": "onnx2gemmini", "version": __version__, "command": compiled.command},
        "model": {
            "path": loaded.path, "sha256": loaded.sha256, "opset": plan.opset,
            "inputs": [input_entry(plan, tid) for tid in plan.inputs],
            "outputs": [output_entry(plan.tensors[t]) for t in plan.outputs],
            # --input-value: inputs frozen to constants (the compiled model no longer reads them)
            "input_values": {name: value.tolist() for name, value in loaded.input_values.items()},
            # --state: outputs fed back as inputs at the next step (stream.py)
            "states": [{"output": out, "input": inp} for out, inp in compiled.states],
        },
        "config": plan.config.to_dict(),
        "quantization": {"method": compiled.quant.method, "num_samples": compiled.quant.num_samples,
                         "scheme": "symmetric int8, zero point 0, per-tensor activation scales, int32 bias at "
                                   "s_in*s_w" + (f"; {len(compiled.quant.axis_scales)} concatenated model output(s) "
                                                 "keep each input's scale" if compiled.quant.axis_scales else ""),
                         "weight_scales": compiled.quant.weight_scheme()},
        "calibration": compiled.calibration,
        "passes": compiled.changes,
        "warnings": compiled.warnings,
        "layers": rows,
        "memory": {**memory.to_dict(), "buffers": arena_buffers(plan, memory)},
        "cpu_steps": [f"cpu: {r['name']}: {r['call'][4:]}: {r['reason']}" for r in rows if r["target"] == "cpu"],
        "totals": {
            "macs": macs, "macs_on_gemmini": macs_gemmini, "ideal_cycles": ideal, "est_cycles": est,
            "utilization": (ideal / est) if est else None,
            "est_gemmini_cycles": est_gemmini, "est_cpu_cycles": est_cpu,
            "gemmini_utilization": (ideal / est_gemmini) if est_gemmini else None,
            "cpu_cpi": plan.config.cpu_cpi,
            "dram_bytes": _sum_or_none(rows, "dram_bytes"),
            "baseline_dram_bytes": _sum_or_none(rows, "baseline_dram_bytes"),
            "activation_bytes": activation_bytes, "weight_bytes": weight_bytes,
        },
        "kept_float": kept_float(compiled, rows),
        "quality": quality or {**NO_QUALITY, "layers": []},
        "timing": timing_entry(timing),
    }
    if sensitivity is not None:
        report["sensitivity"] = [dict(row) for row in sensitivity]
    return report


def timing_entry(timing: dict) -> dict:
    """report.json's `timing`: the total, then each phase in seconds."""
    return {"total_s": round(sum(timing.values()), 4), **{k: round(v, 4) for k, v in timing.items()}}


def report_json(report: dict) -> str:
    return json.dumps(report, indent=2, sort_keys=False, default=_default) + "\n"


def _default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    raise TypeError(type(value).__name__)


def calibration_text(calibration: dict, name=str) -> str:
    """One sentence on how the range estimator was chosen (quant/selection.py): by held-out candidates, or why
    not (too few samples), or "" when it was forced;
    `name` escapes a tensor name for the target text (the caller escapes the rest)."""
    scored = [c for c in calibration.get("candidates", []) if c.get("heldout_sqnr_db") is not None]
    if not scored:
        return calibration.get("note", "")
    figures = ", ".join(f"{c['name']} {c['heldout_sqnr_db']:.2f} dB" for c in scored)
    margin, error = calibration.get("margin_db"), calibration.get("margin_se_db")
    lead = f", {margin:+.2f} dB over the next best" if margin is not None else ""
    if margin is not None and error is not None and margin < 0:  # the first candidate kept: a lead within noise
        best = max((c for c in scored if c["name"] != calibration["chosen"]), key=lambda c: c["heldout_sqnr_db"])
        lead = (f", kept as the preferred candidate: {best['name']} led by {-margin:.2f} dB, within its standard "
                f"error {error:.2f} dB")
    elif margin is not None and error is not None:
        lead += f" (standard error {error:.2f} dB{': within noise' if abs(margin) <= error else ''})"
    return (f"{calibration['chosen']} chosen by output SQNR on {calibration['heldout_samples']} held-out calibration "
            f"samples ({calibration['folds']} fold(s)){lead}: {figures}{refinement_text(calibration.get('refined'), name)}")


def refinement_text(refined: dict | None, name=str) -> str:
    """The per-tensor refinement (quant/refine.py) in a clause: what it changed, or what it tried."""
    if not refined or not refined.get("units_tried"):
        return ""
    if refined.get("kept"):
        changed = ", ".join(f"{name(c['tensor'])} {c['method']}" for c in refined["changes"])
        error = refined.get("gain_se_db")
        return (f"; then, judged at the outputs, {len(refined['changes'])} tensor range(s) changed ({changed}): "
                f"{refined['heldout_sqnr_db']:.2f} dB held out, {refined['gain_db']:+.2f} dB"
                + (f" (standard error {error:.2f} dB)" if error is not None else ""))
    return f"; {refined['units_tried']} tensor range(s) tried at the outputs, none changed"


def calibration_lines(calibration: dict) -> list[str]:
    text = calibration_text(calibration, markdown)
    return [f"- range estimator: {text}"] if text else []


def report_markdown(report: dict) -> str:
    m, t = report["model"], report["totals"]
    lines = [f"# onnx2gemmini report: {markdown(m['path'])}", "",
             f"- model sha256: `{m['sha256']}`, opset {m['opset']}",
             f"- Gemmini config: {markdown(report['config']['name'])} (DIM {report['config']['dim']})",
             f"- quantization: {report['quantization']['scheme']}; calibration "
             f"{report['quantization']['method']} over {report['quantization']['num_samples']} samples",
             *calibration_lines(report.get("calibration") or {}), ""]
    for w in report["warnings"]:
        lines.append(f"> warning: {markdown(w)}")
    lines += ["", "DRAM bytes are exact for the tiling (bytes moved by mvin/mvout); cycles and utilization are "
              "ESTIMATES of the cost model in docs/cost_model.md, not measurements. `baseline` is what "
              "gemmini.h's own `*_auto` tiling would do.", "",
              "| # | layer | op | target | call | MACs | tiles | DRAM B | baseline DRAM B | est. cycles | est. util. "
              "| reason |", "|---|---|---|---|---|---:|---|---:|---:|---:|---:|---|"]
    for i, r in enumerate(report["layers"]):
        tiles = ",".join(str(v) for v in r["tiles"].values()) if r["tiles"] else ""
        lines.append(f"| {i} | {markdown(r['name'])} | {markdown(r['op'])} | {r['target']} | {r['call']} | "
                     f"{r['macs']:,} | {tiles} | {_num(r['dram_bytes'])} | {_num(r['baseline_dram_bytes'])} | "
                     f"{_num(r['est_cycles'])} | {_pct(r['utilization'])} | {markdown(r['reason'])} |")
    share = t["macs_on_gemmini"] / t["macs"] if t["macs"] else 1.0
    lines += ["", "## Totals", "",
              f"- MACs: {t['macs']:,} ({share:.1%} on Gemmini); ideal cycles {t['ideal_cycles']:,}",
              f"- estimated cycles {_num(t['est_cycles'])}, estimated utilization {_pct(t['utilization'])}",
              *_time_split_lines(t),
              f"- DRAM traffic {_num(t['dram_bytes'])} B (gemmini.h's tiling: {_num(t['baseline_dram_bytes'])} B)",
              f"- weights {t['weight_bytes']:,} B; activations {t['activation_bytes']:,} B in a static arena of "
              f"{report['memory']['arena_bytes']:,} B (lower bound {report['memory']['lower_bound_bytes']:,} B)",
              *_quality_lines(report["quality"]),
              f"- compile time {report['timing']['total_s']:.2f} s", ""]
    lines += _kept_float_lines(report.get("kept_float"), t["macs"])
    lines += _sensitivity_lines(report.get("sensitivity"))
    return "\n".join(lines)


def _time_split_lines(t: dict) -> list[str]:
    """Gemmini's estimated cycles against the host core's (CPU steps: instructions measured on Spike x CPI)."""
    if "est_cpu_cycles" not in t or not t.get("est_cycles"):
        return []
    gemmini, cpu = t.get("est_gemmini_cycles") or 0, t["est_cpu_cycles"]
    return [f"- of which Gemmini {gemmini:,} ({gemmini / t['est_cycles']:.1%}, array utilization "
            f"{_pct(t.get('gemmini_utilization'))}) and the CPU steps {cpu:,} ({cpu / t['est_cycles']:.1%}: "
            f"instructions measured on Spike x CPI {t.get('cpu_cpi')})"]


def _kept_float_lines(kept: dict | None, macs: int) -> list[str]:
    """The layers run in float on the CPU (--keep-float), with what they cost."""
    if not kept or not kept["layers"]:
        return []
    share = kept["macs"] / macs if macs else 0.0
    lines = ["## Layers kept float (--keep-float)", "",
             f"{len(kept['layers'])} layers run in float32 on the CPU (float32 weights, int8 in and out): "
             f"{kept['macs']:,} MACs ({share:.1%} of the model's), an ESTIMATED {kept['est_cycles']:,} CPU cycles "
             f"(instructions measured on Spike x the config's CPI, docs/cost_model.md), {kept['weight_bytes']:,} B "
             "of float32 weights.", "", "| layer | op | MACs | est. CPU cycles | float32 weight B |", "|---|---|---:|---:|---:|"]
    lines += [f"| {markdown(r['name'])} | {markdown(r['op'])} | {r['macs']:,} | {r['est_cycles']:,} | "
              f"{r['weight_bytes']:,} |" for r in kept["layers"]]
    return lines + [""]


SENSITIVITY_TOP = 20  # rows of the ranking report.md and report.html show (report.json has every layer)


def _sensitivity_lines(rows: list | None) -> list[str]:
    """The most costly layers of `diff --sensitivity` (sensitivity.py defines the figures)."""
    if not rows:
        return []
    more = f" ({len(rows) - SENSITIVITY_TOP} more in report.json)" if len(rows) > SENSITIVITY_TOP else ""
    lines = ["## Sensitivity: one layer quantized at a time", "",
             "Each layer quantized alone (int8 inputs, weights and output, every other layer float); SQNR of the "
             "model outputs against fp32. Cost = 10 log10(1 + share) dB, share = that layer's output noise over "
             f"the whole int8 model's; 3 dB: the layer alone is as noisy as the whole int8 model.{more}", "",
             "| rank | layer | op | SQNR dB (layer alone) | noise share | cost dB |", "|---:|---|---|---:|---:|---:|"]
    for rank, r in enumerate(rows[:SENSITIVITY_TOP], 1):
        sqnr = "exact" if r.get("sqnr_db") is None else f"{r['sqnr_db']:.2f}"
        share = "" if r.get("noise_share") is None else f"{r['noise_share']:.1%}"
        lines.append(f"| {rank} | {markdown(r['name'])} | {markdown(r.get('op', ''))} | {sqnr} | {share} | "
                     f"{r['sqnr_db_cost']:.3f} |")
    return lines + [""]


def _quality_lines(quality: dict) -> list[str]:
    """The worst layer by SQNR against the float model (report.html plots every layer)."""
    measured = [l for l in quality["layers"] if l["sqnr_db"] is not None]
    if not measured:
        return []
    worst = min(measured, key=lambda l: l["sqnr_db"])
    where = "diff" if quality["source"] == "diff" else f"{quality['samples']} calibration samples"
    return [f"- lowest per-layer SQNR vs fp32 ({where}): {worst['sqnr_db']:.2f} dB at {markdown(worst['name'])} "
            f"(every layer in report.html)"]


def _num(value) -> str:
    return "" if value is None else f"{value:,}"


def _pct(value) -> str:
    return "" if value is None else f"{value:.1%}"
