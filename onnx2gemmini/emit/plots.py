"""The figures of report.html, drawn by matplotlib from report.json alone, as SVG text.

Why SVG through matplotlib: vector figures that live inside the page (no files, no network, no script)
from a well-kept plotting library. Deterministic: a fixed hash salt for matplotlib's ids, no date in the
metadata; text stays text (selectable, and drawn in the browser's sans-serif). Figures never print model text:
layers are the step numbers of the report's table (`#`), so no model-provided string reaches an SVG.
"""
from __future__ import annotations

import io
import re

import matplotlib
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

GEMMINI, CPU, BASELINE, ROOF = "#1f6fb4", "#e07b1a", "#9aa5b1", "#444444"
RC = {"svg.hashsalt": "onnx2gemmini", "svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9,
      "axes.spines.top": False, "axes.spines.right": False, "text.usetex": False, "axes.unicode_minus": False}
_HEADER = re.compile(r"\A.*?(?=<svg)", re.S)
_IDS = re.compile(r'(\bid="|href="#|url\(#)([^")]+)')


def to_svg(fig: Figure, prefix: str) -> str:
    """The figure as an inline <svg> element; ids carry `prefix` so several figures share one page."""
    buf = io.StringIO()
    with matplotlib.rc_context(RC):
        FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None})
    svg = _HEADER.sub("", buf.getvalue())
    return _IDS.sub(lambda m: m.group(1) + prefix + "-" + m.group(2), svg)


def _figure(panels: int = 1, height: float = 2.6, width: float = 9.0) -> tuple[Figure, list]:
    """Panels stacked with fixed margins in inches (a layout engine would cost most of the drawing time)."""
    total = height * panels
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, total))
        fig.subplots_adjust(left=0.85 / width, right=1 - 0.25 / width, top=1 - 0.35 / total, bottom=0.5 / total,
                            hspace=0.9 / (height - 0.85))
        axes = fig.subplots(panels, 1, squeeze=False)[:, 0].tolist()
    return fig, axes


def _log(ax, axis: str) -> None:
    """A log axis with plain tick labels (1, 10, 1e+03): mathtext labels would cost a third of a figure."""
    getattr(ax, f"set_{axis}scale")("log")
    scale = getattr(ax, f"{axis}axis")
    scale.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    scale.set_minor_formatter(NullFormatter())


def _steps_axis(ax, count: int) -> None:
    ax.set_xlim(-0.7, count - 0.3)
    ax.set_xlabel("step # (the layer table below)")
    if count <= 40:
        ax.set_xticks(range(count))


def quality(report: dict) -> Figure | None:
    """SQNR against the float model per layer and, from a diff, mismatches against onnxruntime's QDQ."""
    q = report["quality"]
    rows = _quality_rows(report)
    if not rows:
        return None
    with matplotlib.rc_context(RC):
        with_mismatches = q["source"] == "diff"
        fig, axes = _figure(2 if with_mismatches else 1)
        ax = axes[0]
        finite = [r["sqnr_db"] for _, r in rows if r["sqnr_db"] is not None]
        top = (max(finite) if finite else 0.0) + 10.0
        xs = [i for i, _ in rows]
        heights = [top if r["sqnr_db"] is None else r["sqnr_db"] for _, r in rows]
        bars = ax.bar(xs, heights, color=[_target_color(report, i) for i in xs], width=0.8)
        for bar, (_, r) in zip(bars, rows):
            if r["sqnr_db"] is None:
                bar.set_hatch("//")
                bar.set_alpha(0.5)
        ax.set_ylabel("SQNR vs fp32 (dB)")
        where = "diff data" if with_mismatches else f"{q['samples']} calibration samples"
        ax.set_title(f"Per-layer SQNR, int8 vs fp32 ({where}; hatched: exact)", loc="left")
        _steps_axis(ax, len(report["layers"]))
        if with_mismatches:
            ax = axes[1]
            rates = [100.0 * (r["mismatch_rate"] or 0.0) for _, r in rows]
            ax.bar(xs, rates, color=[CPU if r["mismatches"] else GEMMINI for _, r in rows], width=0.8)
            allowed = [(x, 100.0 * r["allowed_mismatches"] / r["compared"]) for x, (_, r) in zip(xs, rows)
                       if r.get("allowed_mismatches") and r["compared"]]
            if allowed:
                ax.scatter([x for x, _ in allowed], [a for _, a in allowed], marker="_", s=400, color=ROOF,
                           label="allowed by the layer's stated tolerance")
                ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)
            ax.set_ylabel("values differing (%)")
            ax.set_title("Mismatches vs onnxruntime's QDQ model", loc="left")
            ax.set_ylim(0, max(rates + [a for _, a in allowed] + [1.0]) * 1.15)
            _steps_axis(ax, len(report["layers"]))
    return fig


def _quality_rows(report: dict) -> list[tuple[int, dict]]:
    """Quality rows placed at the step number of their node's last step (the one writing its output)."""
    last = {r["name"]: i for i, r in enumerate(report["layers"])}
    return [(last[r["name"]], r) for r in report["quality"]["layers"] if r["name"] in last]


def sensitivity(report: dict, top: int = 20) -> Figure | None:
    """The `top` most costly layers of a `diff --sensitivity` ranking, largest cost on top; each bar is
    labelled with its step number in the layer table (the node's last step), never with model text."""
    last = {r["name"]: i for i, r in enumerate(report["layers"])}
    rows = [(last[r["name"]], r) for r in (report.get("sensitivity") or [])[:top] if r["name"] in last]
    if not rows:
        return None
    with matplotlib.rc_context(RC):
        fig, (ax,) = _figure(1, 0.9 + 0.22 * len(rows))
        ys = range(len(rows))[::-1]
        costs = [r["sqnr_db_cost"] for _, r in rows]
        ax.barh(list(ys), costs, color=[_target_color(report, i) for i, _ in rows], height=0.7)
        ax.set_yticks(list(ys), [f"#{i}" for i, _ in rows])
        for y, (_, r) in zip(ys, rows):
            if r.get("sqnr_db") is not None:
                ax.text(r["sqnr_db_cost"], y, f" {r['sqnr_db']:.1f} dB alone", va="center", fontsize=7)
        ax.set_xlim(0, max(costs + [0.01]) * 1.3)
        ax.set_xlabel("cost (dB): 10 log10(1 + layer noise / whole int8 model noise)")
        ax.set_title("Sensitivity: each layer quantized alone, output SQNR it costs", loc="left")
    return fig


def _target_color(report: dict, step: int) -> str:
    return GEMMINI if report["layers"][step]["target"] == "gemmini" else CPU


def cycles(report: dict) -> Figure | None:
    """Estimated cycles and utilization of every Gemmini step (CPU steps have no estimate, except the layers
    kept float, whose CPU estimate is drawn in the CPU colour)."""
    layers = report["layers"]
    known = [(i, r) for i, r in enumerate(layers) if r["est_cycles"] is not None]
    if not known:
        return None
    with matplotlib.rc_context(RC):
        fig, (ax, ax2) = _figure(2)
        ax.bar([i for i, _ in known], [r["est_cycles"] for _, r in known], width=0.8,
               color=[_target_color(report, i) for i, _ in known])
        cpu = [i for i, r in enumerate(layers) if r["target"] == "cpu" and r["est_cycles"] is None]
        ax.plot(cpu, [0] * len(cpu), linestyle="none", marker="x", color=CPU, label="CPU step (no estimate)")
        values = [r["est_cycles"] for _, r in known if r["est_cycles"] > 0]
        if values and max(values) > 100 * min(values):
            _log(ax, "y")
        ax.set_ylabel("estimated cycles")
        ax.set_title("Estimated cycles per step (cost model, not a measurement)", loc="left")
        if cpu:
            ax.legend(loc="upper right", frameon=False)
        _steps_axis(ax, len(layers))
        util = [(i, r) for i, r in known if r["utilization"] is not None and r["macs"]]
        ax2.bar([i for i, _ in util], [100.0 * r["utilization"] for _, r in util], width=0.8, color=GEMMINI)
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("utilization (%)")
        ax2.set_title("Estimated utilization (ideal cycles / estimated cycles) of steps with MACs", loc="left")
        _steps_axis(ax2, len(layers))
    return fig


def dram(report: dict) -> Figure | None:
    """DRAM bytes of each Gemmini step under the chosen tiles against gemmini.h's own tiling."""
    rows = [(i, r) for i, r in enumerate(report["layers"])
            if r["dram_bytes"] is not None and r["baseline_dram_bytes"] is not None]
    if not rows:
        return None
    with matplotlib.rc_context(RC):
        fig, (ax,) = _figure(1, 3.0)
        xs = [i for i, _ in rows]
        ax.bar([x - 0.2 for x in xs], [r["dram_bytes"] for _, r in rows], width=0.4, color=GEMMINI,
               label="chosen tiles")
        ax.bar([x + 0.2 for x in xs], [r["baseline_dram_bytes"] for _, r in rows], width=0.4, color=BASELINE,
               label="gemmini.h *_auto tiles")
        ax.set_ylabel("DRAM bytes (exact)")
        t = report["totals"]
        ratio = f"; total {t['dram_bytes'] / t['baseline_dram_bytes']:.3f}x" if t["dram_bytes"] and \
            t["baseline_dram_bytes"] else ""
        ax.set_title(f"DRAM traffic per step against gemmini.h's baseline{ratio}", loc="left")
        ax.legend(loc="upper right", frameon=False)
        _steps_axis(ax, len(report["layers"]))
    return fig


def roofline(report: dict) -> Figure | None:
    """Gemmini steps with MACs on the config's roofline: DIM x DIM MACs per cycle, dma_bus_bits per cycle."""
    rows = [(i, r) for i, r in enumerate(report["layers"])
            if r["target"] == "gemmini" and r["macs"] and r["dram_bytes"] and r["est_cycles"]]
    if not rows:
        return None
    cfg = report["config"]
    peak, bandwidth = cfg["dim"] ** 2, cfg["dma_bus_bits"] / 8
    xs = [r["macs"] / r["dram_bytes"] for _, r in rows]
    ys = [r["macs"] / r["est_cycles"] for _, r in rows]
    with matplotlib.rc_context(RC):
        fig, (ax,) = _figure(1, 3.6)
        lo, hi = min(xs + [peak / bandwidth]) / 4, max(xs + [peak / bandwidth]) * 4
        ridge = peak / bandwidth
        ax.plot([lo, ridge, hi], [lo * bandwidth, peak, peak], color=ROOF, linewidth=1.5,
                label=f"roof: {peak} MACs/cycle, {bandwidth:g} B/cycle DMA")
        ax.scatter(xs, ys, color=GEMMINI, s=18, zorder=3, label="Gemmini steps (estimated)")
        if len(rows) <= 30:
            for (i, _), x, y in zip(rows, xs, ys):
                ax.annotate(str(i), (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
        _log(ax, "x")
        _log(ax, "y")
        ax.set_xlabel("operational intensity (MACs per DRAM byte)")
        ax.set_ylabel("MACs per cycle")
        ax.set_title(f"Roofline of a {_int(cfg['dim'])}x{_int(cfg['dim'])} array", loc="left")
        ax.legend(loc="lower right", frameon=False)
    return fig


def _int(value) -> str:
    """A config number in a title (the config's name is user text and stays out of figures)."""
    return str(int(value))


def arena(report: dict) -> Figure | None:
    """The activation arena over the steps: each buffer's bytes while it is live."""
    buffers = report["memory"].get("buffers") or []
    if not buffers:
        return None
    steps = len(report["layers"])
    with matplotlib.rc_context(RC):
        fig, (ax,) = _figure(1, 3.2)
        palette = [GEMMINI, CPU, "#2a9d8f", "#8e6bbf", "#c9573f", "#6c8f2f"]
        for k, b in enumerate(buffers):
            ax.broken_barh([(b["first_step"] - 0.45, b["last_step"] - b["first_step"] + 0.9)],
                           (b["offset"], b["bytes"]), facecolors=palette[k % len(palette)], alpha=0.75,
                           edgecolor="white", linewidth=0.5)
        ax.axhline(report["memory"]["arena_bytes"], color=ROOF, linewidth=1, linestyle="--",
                   label=f"arena {report['memory']['arena_bytes']:,} B "
                         f"(lower bound {report['memory']['lower_bound_bytes']:,} B)")
        ax.set_ylim(0, report["memory"]["arena_bytes"] * 1.12 or 1)
        ax.set_ylabel("arena offset (bytes)")
        ax.set_title("Activation arena over time: each buffer's bytes while it is live", loc="left")
        ax.legend(loc="upper right", frameon=False)
        _steps_axis(ax, steps + 1)
    return fig


def share(report: dict) -> Figure:
    """Where the work runs: MACs and steps on Gemmini against the CPU."""
    layers, t = report["layers"], report["totals"]
    gemmini_steps = sum(r["target"] == "gemmini" for r in layers)
    bars = [("MACs", t["macs_on_gemmini"], t["macs"] - t["macs_on_gemmini"]),
            ("steps", gemmini_steps, len(layers) - gemmini_steps)]
    with matplotlib.rc_context(RC):
        fig, (ax,) = _figure(1, 1.8)
        for y, (label, on, off) in enumerate(bars):
            total = (on + off) or 1
            ax.barh(y, 100.0 * on / total, color=GEMMINI, label="Gemmini" if y == 0 else None)
            ax.barh(y, 100.0 * off / total, left=100.0 * on / total, color=CPU, label="CPU" if y == 0 else None)
            ax.text(101, y, f"{_short(on)} of {_short(on + off)}", va="center")
        ax.set_yticks(range(len(bars)), [b[0] for b in bars])
        ax.set_xlim(0, 125)
        ax.set_xlabel("share (%)")
        ax.set_title("CPU vs Gemmini", loc="left")
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, frameon=False)
    return fig


def _short(n: int) -> str:
    """A count in three significant digits with a K/M/G suffix (a bar label must fit beside the bar)."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if n >= 10 * factor:
            return f"{n / factor:.3g}{suffix}"
    return f"{n:,}"


FIGURES = (("quality", "Accuracy per layer", quality), ("cycles", "Cycles and utilization", cycles),
           ("dram", "DRAM traffic", dram), ("roofline", "Roofline", roofline),
           ("arena", "Activation memory", arena), ("share", "CPU vs Gemmini", share))
