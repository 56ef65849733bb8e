"""`onnx2gemmini sweep`: plan models on many Gemmini configurations; a table and a Pareto plot.

Why: choosing a Gemmini (DIM, scratchpad and accumulator sizes) is a design-space search. Every
(model, configuration) pair is one independent compile, so the pairs run on local processes or a Ray
cluster (parallel.py); rows come back in pair order, so the table does not depend on the workers. A pair
whose plan cannot be built on its configuration (e.g. a tile that cannot fit) is a row with its error,
not the end of the sweep; a bad model, data file or option ends it with that error.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
from pathlib import Path

from .config import GemminiConfig, load_config
from .errors import UnsupportedError, UsageError
from .parallel import map_ordered

# --grid dimensions: GemminiConfig fields that take integers.
GRID_FIELDS = ("dim", "sp_kib", "acc_kib", "sp_banks", "acc_banks", "dma_bus_bits", "dma_max_bytes")
COLUMNS = ("model", "config", "dim", "sp_kib", "acc_kib", "status", "macs", "gemmini_share", "ideal_cycles",
           "est_cycles", "utilization", "dram_bytes", "baseline_dram_bytes", "weight_bytes", "activation_bytes",
           "cpu_steps", "pareto", "error")


def parse_grid(specs) -> dict[str, list[int]]:
    """`dim=8,16,32` strings -> {"dim": [8, 16, 32]} (each field at most once, positive integers)."""
    grid: dict[str, list[int]] = {}
    for spec in specs or ():
        field, sep, values = str(spec).partition("=")
        field = field.strip()
        if not sep or field not in GRID_FIELDS:
            raise UsageError(f"--grid '{spec}': expected FIELD=V1,V2,... with FIELD one of {', '.join(GRID_FIELDS)}")
        if field in grid:
            raise UsageError(f"--grid: {field} given twice")
        parts = [v.strip() for v in values.split(",") if v.strip()]
        if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise UsageError(f"--grid '{spec}': values must be positive integers, comma-separated")
        grid[field] = list(dict.fromkeys(int(p) for p in parts))
    return grid


def expand_configs(names, grid: dict[str, list[int]]) -> list[GemminiConfig]:
    """Every base configuration (preset name or JSON file) with every combination of the grid's values,
    validated; a grid point no Gemmini can have is a usage error naming it."""
    bases = [load_config(n) for n in names]
    if not bases:
        raise UsageError("--config: give at least one configuration")
    configs = []
    fields = list(grid)
    for base in bases:
        for values in itertools.product(*(grid[f] for f in fields)) if fields else [()]:
            changes = dict(zip(fields, values))
            name = base.name + "".join(f"+{f}={v}" for f, v in changes.items())
            configs.append(dataclasses.replace(base, name=name, **changes).validate())
    names_seen = [c.name for c in configs]
    if len(set(names_seen)) != len(names_seen):
        raise UsageError("--config: the same configuration is listed twice")
    return configs


def _planner(options: dict):
    """parallel.map_ordered's setup: compile one (model, configuration) pair and summarize its report."""
    from .compiler import compile as compile_model
    from .emit.report import build_report

    def plan_pair(pair: tuple[str, GemminiConfig]) -> dict:
        model, config = pair
        row = {"model": model, "config": config.name, "dim": config.dim, "sp_kib": config.sp_kib,
               "acc_kib": config.acc_kib}
        try:
            compiled = compile_model(model, config=config, **options)
        except UnsupportedError as exc:  # this configuration cannot take the model; bad input ends the sweep
            return {**row, "status": "error", "error": str(exc)}
        report = build_report(compiled, compiled.timing)
        t = report["totals"]
        cpu = sum(1 for layer in report["layers"] if layer["target"] == "cpu")
        return {**row, "status": "ok", "macs": t["macs"],
                "gemmini_share": t["macs_on_gemmini"] / t["macs"] if t["macs"] else 1.0,
                "ideal_cycles": t["ideal_cycles"], "est_cycles": t["est_cycles"], "utilization": t["utilization"],
                "dram_bytes": t["dram_bytes"], "baseline_dram_bytes": t["baseline_dram_bytes"],
                "weight_bytes": t.get("weight_bytes"), "activation_bytes": t.get("activation_bytes"),
                "cpu_steps": cpu}

    return plan_pair


def run_sweep(models, configs: list[GemminiConfig], options: dict, workers: int | None = 1,
              ray: str | None = None, progress=None) -> dict:
    """Plan every model on every configuration: {"rows": [...], "pareto": {model: [config, ...]}}.

    `options`: o2g.compile keyword arguments shared by every pair (calib, num_calib, tiling, ...)."""
    pairs = [(str(m), c) for m in models for c in configs]
    report = None if progress is None else (lambda n: progress(n, len(pairs)))
    rows = list(map_ordered(_planner, options, pairs, workers, ray, chunk=1, progress=report))
    pareto = mark_pareto(rows)
    return {"rows": rows, "pareto": pareto}


def mark_pareto(rows: list[dict]) -> dict[str, list[str]]:
    """Per model, the configurations no other one beats: none with at most its on-chip memory
    (scratchpad + accumulator), estimated cycles and DRAM bytes, and less of one of them. Sets each
    row's `pareto` flag."""
    front: dict[str, list[str]] = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        ok = [r for r in rows if r["model"] == model and r["status"] == "ok" and r["est_cycles"] is not None]
        for r in ok:
            key = _costs(r)
            r["pareto"] = not any(all(a <= b for a, b in zip(_costs(o), key)) and _costs(o) != key for o in ok)
        front[model] = [r["config"] for r in ok if r["pareto"]]
    for r in rows:
        r.setdefault("pareto", False)
        for column in COLUMNS:
            r.setdefault(column, None)
    return front


def _costs(row: dict) -> tuple:
    return (row["sp_kib"] + row["acc_kib"], row["est_cycles"], row["dram_bytes"])


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r[k]) for k in COLUMNS})
    return buf.getvalue()


def pareto_svg(rows: list[dict]) -> str:
    """pareto_figure as inline SVG text (emit/plots.py: deterministic, no fonts needed to view it)."""
    from .emit.plots import to_svg

    return to_svg(pareto_figure(rows), "pareto")


def pareto_figure(rows: list[dict]):
    """Estimated cycles and DRAM bytes against on-chip memory (scratchpad + accumulator KiB), one series
    per model, the Pareto-optimal configurations joined and ringed. Models are numbered, never named
    (no model-provided text reaches the SVG; the table maps numbers to models)."""
    import matplotlib

    from .emit.plots import RC, _figure

    fig, (cycles_ax, dram_ax) = _figure(panels=2, height=3.0, width=7.5)
    models = list(dict.fromkeys(r["model"] for r in rows))
    with matplotlib.rc_context(RC):
        for i, model in enumerate(models):
            ok = sorted((r for r in rows if r["model"] == model and r["status"] == "ok"), key=_costs)
            for ax, key in ((cycles_ax, "est_cycles"), (dram_ax, "dram_bytes")):
                pts = [(r["sp_kib"] + r["acc_kib"], r[key]) for r in ok if r[key] is not None]
                if not pts:
                    continue
                line = ax.scatter(*zip(*pts), s=14, alpha=0.55, label=f"model {i + 1}")
                front = [(r["sp_kib"] + r["acc_kib"], r[key]) for r in ok if r["pareto"] and r[key] is not None]
                if front:
                    ax.plot(*zip(*front), "-o", color=line.get_facecolor()[0], markerfacecolor="none", lw=1)
        for ax, label in ((cycles_ax, "estimated cycles"), (dram_ax, "DRAM bytes")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("on-chip memory: scratchpad + accumulator (KiB)")
            ax.set_ylabel(label)
            if models:
                ax.legend(fontsize=7, loc="best")
        cycles_ax.set_title("Pareto front (rings): fewest cycles and DRAM bytes for the memory", fontsize=9)
    return fig


def format_table(result: dict) -> str:
    lines = [f"{'#':>3} {'config':28} {'DIM':>4} {'spad KiB':>8} {'acc KiB':>7} {'est. cycles':>13} {'util':>6} "
             f"{'DRAM B':>13} {'Pareto':>6}"]
    models = list(dict.fromkeys(r["model"] for r in result["rows"]))
    for i, model in enumerate(models):
        lines.append(f"model {i + 1}: {model}")
        for r in (r for r in result["rows"] if r["model"] == model):
            if r["status"] != "ok":
                lines.append(f"{i + 1:>3} {r['config'][:28]:28} {r['dim']:>4} {r['sp_kib']:>8} {r['acc_kib']:>7} "
                             f"error: {r['error']}")
                continue
            util = "-" if r["utilization"] is None else f"{r['utilization']:.1%}"
            cycles = "-" if r["est_cycles"] is None else f"{int(r['est_cycles']):,}"
            lines.append(f"{i + 1:>3} {r['config'][:28]:28} {r['dim']:>4} {r['sp_kib']:>8} {r['acc_kib']:>7} "
                         f"{cycles:>13} {util:>6} {int(r['dram_bytes']):>13,} {'*' if r['pareto'] else '':>6}")
    return "\n".join(lines)


def write_results(result: dict, tree: Path) -> None:
    """sweep.csv, sweep.json and pareto.svg into `tree`."""
    tree.mkdir(parents=True, exist_ok=True)
    (tree / "sweep.csv").write_text(to_csv(result["rows"]))
    (tree / "sweep.json").write_text(json.dumps(result, indent=2, default=float) + "\n")
    (tree / "pareto.svg").write_text(pareto_svg(result["rows"]))
