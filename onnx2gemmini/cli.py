"""The command line: compile (default), diff, inspect, ops. The only place that maps errors to exit codes."""
from __future__ import annotations

import json
import logging
import shlex
import sys
import traceback
from pathlib import Path

import click

from . import limits
from .quant.calibrate import POOLED_SHARE
from .quant.selection import AUTO, FEW_SAMPLES, METHODS
from .compiler import DEFAULT_WEIGHT_SCALES, WEIGHT_SCALES
from .emit.names import ascii_text
from .errors import CheckFailed, O2GError
from .version import __version__

log = logging.getLogger("onnx2gemmini")


class _DefaultGroup(click.Group):
    """`onnx2gemmini MODEL.onnx ...` means `onnx2gemmini compile MODEL.onnx ...`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["compile"] + list(args)
        return super().parse_args(ctx, args)


def _common(f):
    """Options shared by compile, diff and inspect (defined once)."""
    options = [
        click.argument("model", type=click.Path(dir_okay=True, path_type=Path)),
        click.option("--calib", type=click.Path(path_type=Path), help="Calibration data (.npz, .npy or a "
                     "test_data_set_* directory); without it: deterministic random data and a warning."),
        click.option("--num-calib", type=click.IntRange(min=1), help="Use at most N calibration samples."),
        click.option("--calib-method", type=click.Choice(list(METHODS)), default=AUTO,
                     show_default=True, help="Range estimator. auto: of mse, minmax, entropy and percentile, the one "
                     "whose whole-model int8 output is closest to float on calibration samples it was not fitted on "
                     "(a lead within its standard error keeps the preferred one: mse, or minmax below "
                     f"{FEW_SAMPLES} samples; the report says which and by how much). mse: the clip of least int8 "
                     "error, but where a "
                     f"max-pool reads, not below the level {POOLED_SHARE:.0%} of the samples reach; entropy: "
                     "KL divergence, as onnxruntime's; output: of mse, percentile and minmax, the one that disturbs "
                     "each tensor's consumers least."),
        click.option("--config", "config", default="default", show_default=True,
                     help="Gemmini configuration: a preset name or a JSON file."),
        click.option("--input-shape", multiple=True, metavar="NAME=1x3x224x224",
                     help="Fix a dynamic input dimension (repeatable)."),
        click.option("--input-value", "input_value", multiple=True, metavar="NAME=V[,V...]",
                     help="Freeze an input to a constant before simplification, so branches on it fold (a sample "
                     "rate, a flag; repeatable); diff feeds the original model the same value."),
        click.option("--state", "state", multiple=True, metavar="OUTPUT=INPUT",
                     help="A streaming model's output fed back as an input at the next step (repeatable): the "
                     "data's samples are then consecutive steps, each state carried from the step before."),
        click.option("--tiling", type=click.Choice(["search", "auto"]), default="search", show_default=True,
                     help="search: choose every matmul/conv tile (explicit-tile calls); auto: gemmini.h's *_auto."),
        click.option("--equalize/--no-equalize", default=True, show_default=True,
                     help="Cross-layer equalization of conv -> ReLU -> conv pairs before quantization."),
        click.option("--bias-correction/--no-bias-correction", default=True, show_default=True,
                     help="Correct biases for the mean error of int8 weights (uses the calibration data)."),
        click.option("--weight-scales", type=click.Choice(WEIGHT_SCALES), default=DEFAULT_WEIGHT_SCALES,
                     show_default=True, help="sorted: one weight scale per layer, except convs whose channel "
                     "ranges differ 4x or more between runs of DIM channels sorted by range (one scale per run); "
                     "tensor: one per layer; groups: one per DIM output channels; channel: one per output "
                     "channel (each group is its own Gemmini call)."),
        click.option("--adaround", is_flag=True, help="Round each conv/matmul weight up or down to minimise the "
                     "layer's output error on the calibration data (AdaRound) instead of to nearest; slower."),
        click.option("--keep-float", "keep_float", multiple=True, metavar="LAYER[,LAYER...]",
                     help="Run these Conv/ConvTranspose/Gemm/MatMul layers (node names, as `diff --sensitivity` "
                     "lists them) in float on the CPU with float32 weights: more accurate, slower (repeatable)."),
        click.option("--limit", "limit", multiple=True, metavar="NAME=VALUE",
                     help="Raise or lower a size limit (repeatable; VALUE like 4096, 512M, 2G or none). "
                     + limits.describe() + "."),
        click.option("--json", "as_json", is_flag=True, help="Machine-readable summary on stdout."),
        click.option("-v", "--verbose", count=True, help="More output."),
        click.option("-q", "--quiet", is_flag=True, help="Less output."),
        click.option("--debug", is_flag=True, help="Show tracebacks."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LowerFormatter())
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


class _LowerFormatter(logging.Formatter):
    """`warning: ...` lines; model names in them reach the terminal escaped, as error lines do."""

    def format(self, record):
        return f"{record.levelname.lower()}: {ascii_text(record.getMessage())}"


def _command_line() -> str:
    return "onnx2gemmini " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _emit_json(document: dict) -> None:
    click.echo(json.dumps(document, indent=2, default=float))


@click.group(cls=_DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="onnx2gemmini")
def cli():
    """Compile ONNX models to int8 code for the Gemmini accelerator.

    `onnx2gemmini MODEL.onnx` compiles (same as `onnx2gemmini compile MODEL.onnx`).
    """


@cli.command("compile")
@_common
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Output directory (default ./<model stem>_gemmini); refused if non-empty unless --force.")
@click.option("--force", is_flag=True, help="Replace a non-empty output directory.")
@click.option("--emit", default=None, help="Artifacts to write, comma-separated: c,mlir,qdq (default: all).")
def compile_cmd(model, calib, num_calib, calib_method, config, input_shape, input_value, state, tiling, equalize,
                bias_correction, weight_scales, adaround, keep_float, limit,
                as_json, verbose, quiet, debug, output, force, emit):
    """Compile MODEL for Gemmini and write the output directory."""
    from .compiler import compile as compile_model
    from .outdir import check_output_dir
    from .output import parse_emit

    _setup_logging(verbose, quiet)
    out = Path(f"./{model.stem}_gemmini") if output is None else output
    emit_set = parse_emit(emit)
    with limits.applied(limit):
        check_output_dir(out, force, _input_files(model, calib, config, out, force))
    with _PhaseProgress(not (quiet or as_json)) as progress:
        with limits.applied(limit):
            compiled = compile_model(model, calib=calib, config=config, input_shape=input_shape,
                                     num_calib=num_calib, calib_method=calib_method, command=_command_line(),
                                     tiling=tiling, equalize=equalize, bias_correction=bias_correction,
                                     weight_scales=weight_scales, progress=progress, keep_float=keep_float,
                                     adaround=adaround, input_values=input_value, states=state)
        progress("write", 0, 1)
        compiled.write(out, emit_set, force)
        progress("write", 1, 1)
    for w in compiled.warnings:
        log.warning(w)
    for change in compiled.changes:
        log.info(change)
    report = json.loads((out / "report.json").read_text())
    totals = report["totals"]
    share = totals["macs_on_gemmini"] / totals["macs"] if totals["macs"] else 1.0
    if as_json:
        _emit_json({"output": str(out), "artifacts": sorted(p.relative_to(out).as_posix()
                                                             for p in out.rglob("*") if p.is_file()),
                    "layers": len(report["layers"]), "totals": totals, "timing": report["timing"]})
    elif not quiet:
        cpu = [r for r in report["layers"] if r["target"] == "cpu"]
        click.echo(f"wrote {out}/ ({len(report['layers'])} steps, {share:.1%} of {totals['macs']:,} MACs on "
                   f"Gemmini, {len(cpu)} CPU steps) in {report['timing']['total_s']:.2f} s")
        if report["kept_float"]["layers"]:
            click.echo(ascii_text(format_kept_float(report["kept_float"])))
        for line in report["cpu_steps"]:
            if verbose:
                click.echo(ascii_text(line))


def format_kept_float(kept: dict) -> str:
    """One line: the layers run in float on the CPU (--keep-float) and what they cost."""
    return (f"kept float on the CPU: {', '.join(r['name'] for r in kept['layers'])} ({kept['macs']:,} MACs, "
            f"an estimated {kept['est_cycles']:,} CPU cycles, {kept['weight_bytes']:,} B of float32 weights)")


def _input_files(model: Path, calib, config: str, out: Path, force: bool) -> list:
    """The files the compile will read, which OUT must not be or contain (it would delete them).

    The model's external-data files are listed only when --force is to replace a non-empty OUT: the one case
    where they could be lost, and worth a second parse of the model.
    """
    from .config import PRESETS
    from .load import external_data_files

    files = [model, calib] + ([] if config in PRESETS else [Path(config)])
    if force and out.is_dir() and any(out.iterdir()) and model.is_file():
        files += external_data_files(model)
    return files


def _parallel(f):
    """--workers and --ray, shared by diff and sweep."""
    f = click.option("--ray", "ray_address", metavar="ADDRESS|auto",
                     help="Run the workers as actors on a Ray cluster (pip install 'onnx2gemmini[ray]'): its "
                     "address (HOST:PORT of its head), or 'auto' for the cluster running on this machine.")(f)
    return click.option("--workers", type=click.IntRange(min=1), default=None,
                        help="Parallel workers: local processes (default: every core), or Ray actors with --ray "
                        "(default: every CPU of the cluster). Results do not depend on it.")(f)


class _Progress:
    """A progress bar on stderr, drawn from the first report on (click draws it on a terminal only, so logs
    and --json's stdout stay clean); called as progress(done_now, total)."""

    def __init__(self, label: str, enabled: bool):
        self.label, self.enabled, self.bar = label, enabled and sys.stderr.isatty(), None

    def __enter__(self):
        return self

    def __call__(self, n: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(n)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)


class _PhaseProgress(_Progress):
    """The compile's bar: one stretch per phase (calibration advancing per sample), the phase's name beside
    it; called as progress(phase, done, total)."""

    PHASES = ("load", "calibrate", "quantize", "plan", "tiling", "write")
    UNITS = 100

    def __init__(self, enabled: bool):
        super().__init__("compile", enabled)
        self.position = 0

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled or phase not in self.PHASES:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=len(self.PHASES) * self.UNITS, label=self.label, file=sys.stderr,
                                         item_show_func=lambda item: item)
            self.bar.__enter__()
        target = self.PHASES.index(phase) * self.UNITS + (self.UNITS * done) // max(total, 1)
        if target > self.position:
            self.bar.update(target - self.position, phase)
            self.position = target


@cli.command("diff")
@_common
@click.option("--data", type=click.Path(path_type=Path),
              help="Evaluation data; with a `labels` array, accuracy is reported. Default: the calibration data.")
@click.option("--num-samples", type=click.IntRange(min=1), help="Compare at most N samples.")
@click.option("--atol", multiple=True, metavar="[OUTPUT=]VALUE",
              help="Check every output value: |ref - int8| <= atol + rtol*|ref|, ref the --load-outputs file or "
              "else fp32 (repeatable; OUTPUT= for one output).")
@click.option("--rtol", multiple=True, metavar="[OUTPUT=]VALUE", help="The relative part of that check.")
@click.option("--save-outputs", type=click.Path(dir_okay=False, path_type=Path),
              help="Save the int8 outputs (dequantized, .npz) for a later --load-outputs.")
@click.option("--load-outputs", type=click.Path(dir_okay=False, path_type=Path),
              help="Compare the int8 outputs with saved ones (exact unless --atol/--rtol).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Samples emulated together (default: up to 8, fewer for a model whose float values would pass "
              "the activation_bytes limit). More is faster on small layers and holds more memory; results do "
              "not depend on it.")
@click.option("--sensitivity", is_flag=True,
              help="Also quantize one layer at a time (the rest fp32) and rank layers by the output SQNR they cost.")
@click.option("--min-sqnr", multiple=True, metavar="[OUTPUT=]DB",
              help="Floor on the int8 output's SQNR against the original model (default 10 dB for maps, "
              "regressions and each part of a joined detector output; 'none' drops it). Below: ACCURACY FAILED.")
@click.option("--min-cosine", multiple=True, metavar="[OUTPUT=]V",
              help="Floor on the mean per-sample cosine against the original (default 0.99 for embeddings).")
@click.option("--min-top1", multiple=True, metavar="[OUTPUT=]V",
              help="Floor on top-1 agreement with the original (default 0.95 for classifiers; fails only beyond "
              "sampling noise).")
@click.option("--reference", is_flag=True,
              help="Also quantize the original model with onnxruntime's own quantize_static (our activation scales "
              "given) and print its SQNR against the original beside ours.")
@_parallel
def diff_cmd(model, calib, num_calib, calib_method, config, input_shape, input_value, state, tiling, equalize,
             bias_correction, weight_scales, adaround, keep_float, limit, as_json,
             verbose, quiet, debug, data, num_samples, atol, rtol, save_outputs, load_outputs, batch_size,
             sensitivity, min_sqnr, min_cosine, min_top1, reference, workers, ray_address):
    """Compare the Gemmini int8 result with onnxruntime (fp32 and the QDQ golden), per output and layer."""
    from . import diff as run

    _setup_logging(verbose, quiet)
    with _Progress("diff", not (quiet or as_json)) as progress:
        result = run(model, data=data, calib=calib, config=config, input_shape=input_shape, num_calib=num_calib,
                     calib_method=calib_method, num_samples=num_samples, equalize=equalize, tiling=tiling,
                     bias_correction=bias_correction, weight_scales=weight_scales, limits=limit,
                     workers=workers, ray=ray_address, progress=progress, atol=atol or None, rtol=rtol or None,
                     load_outputs=load_outputs, save_outputs=save_outputs, sensitivity=sensitivity,
                     keep_float=keep_float, adaround=adaround, batch_size=batch_size,
                     min_sqnr=min_sqnr or None, min_cosine=min_cosine or None, min_top1=min_top1 or None,
                     input_values=input_value, states=state,
                     reference=reference)
    if as_json:
        _emit_json(result)
    elif not quiet:
        click.echo(format_diff(result))
    verdict = result["verdict"]
    if not verdict["passed"]:
        failures = verdict["failures"][:5] or verdict.get("accuracy_failures", [])[:5]
        kind = "diff" if verdict["failures"] else "diff: accuracy"
        raise CheckFailed(f"{kind}: " + "; ".join(failures))


@cli.command("sweep")
@click.argument("models", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--config", "config", default="default", show_default=True,
              help="Configurations, comma-separated: preset names or JSON files.")
@click.option("--grid", multiple=True, metavar="FIELD=V1,V2,...",
              help="Vary a field over values for every --config (repeatable; every combination is planned): "
              "dim, sp_kib, acc_kib, sp_banks, acc_banks, dma_bus_bits, dma_max_bytes.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("sweep"), show_default=True,
              help="Output directory for sweep.csv, sweep.json and pareto.svg; refused if non-empty unless --force.")
@click.option("--force", is_flag=True, help="Replace a non-empty output directory.")
@click.option("--calib", type=click.Path(path_type=Path), help="Calibration data (as for compile); without it: "
              "deterministic random data (scales matter little for cycles and DRAM bytes).")
@click.option("--num-calib", type=click.IntRange(min=1), help="Use at most N calibration samples.")
@click.option("--input-shape", multiple=True, metavar="NAME=1x3x224x224", help="Fix a dynamic input dimension.")
@click.option("--tiling", type=click.Choice(["search", "auto"]), default="search", show_default=True,
              help="search: choose every matmul/conv tile; auto: gemmini.h's *_auto.")
@click.option("--weight-scales", type=click.Choice(WEIGHT_SCALES), default=DEFAULT_WEIGHT_SCALES,
              show_default=True, help="As for compile.")
@click.option("--limit", "limit", multiple=True, metavar="NAME=VALUE", help="Raise or lower a size limit.")
@_parallel
@click.option("--json", "as_json", is_flag=True, help="The table as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="Less output.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def sweep_cmd(models, config, grid, output, force, calib, num_calib, input_shape, tiling, weight_scales, limit,
              workers, ray_address, as_json, quiet, debug):
    """Plan every MODEL on every configuration; write a table (CSV, JSON) and a Pareto plot of estimated
    cycles and DRAM bytes against scratchpad + accumulator size."""
    from .errors import ModelError
    from .outdir import check_output_dir, replace_dir
    from .sweep import expand_configs, format_table, parse_grid, run_sweep, write_results

    _setup_logging(0, quiet)
    with limits.applied(limit):  # a malformed --limit is a usage error now, not one per plan
        pass
    configs = expand_configs([c.strip() for c in config.split(",") if c.strip()], parse_grid(grid))
    for m in models:
        if not m.is_file():
            raise ModelError(f"{m}: no such file")
    files = list(models) + ([calib] if calib else []) + [Path(c) for c in config.split(",") if c.endswith(".json")]
    real = check_output_dir(output, force, files)
    options = {"calib": None if calib is None else str(calib), "num_calib": num_calib, "tiling": tiling,
               "input_shape": input_shape, "weight_scales": weight_scales, "limits": limit}
    with _Progress("sweep", not (quiet or as_json)) as progress:
        result = run_sweep(models, configs, options, workers, ray_address, progress)
    replace_dir(output, real, force, lambda tree: write_results(result, tree))
    if as_json:
        _emit_json(result)
    elif not quiet:
        for line in format_table(result).splitlines():
            click.echo(ascii_text(line))
        click.echo(f"wrote {output}/sweep.csv, sweep.json, pareto.svg ({len(result['rows'])} plans); cycles are "
                   f"estimates (docs/cost_model.md), DRAM bytes exact for the chosen tiles")


def _fmt(value, spec=".2f"):
    return "exact" if value is None else format(value, spec)


def format_diff(result: dict) -> str:
    lines = [f"compared {result['samples']} samples", "",
             f"{'layer':48} {'op':18} {'SQNR dB':>8} {'cosine':>9} {'LSB vs QDQ':>10} {'tol':>4} {'mismatch':>9} "
             f"{'rate':>8} {'allowed':>8}"]
    for l in result["layers"]:
        lines.append(f"{ascii_text(l['name'])[-48:]:48} {ascii_text(l['op'])[:18]:18} {_fmt(l['sqnr_db']):>8} "
                     f"{l['cosine']:9.6f} {l['max_lsb_vs_ort_qdq']:>10} {l['tolerance_lsb']:>4} "
                     f"{l['mismatches_vs_ort_qdq']:>9} {l['mismatch_rate']:>8.3%} {l['allowed_mismatches']:>8}")
    lines.append("")
    for name, o in result["outputs"].items():
        f, q = o["fp32_vs_int8"], o["int8_vs_ort_qdq"]
        top1 = "n/a" if f["top1_agreement"] is None else f"{f['top1_agreement']:.2%}"
        rtol = "none (a reference value is 0)" if f["required_rtol"] is None else f"{f['required_rtol']:.4g}"
        name = ascii_text(name)
        lines.append(f"output {name}: fp32 vs int8: max_abs {f['max_abs']:.4g}, cosine {f['cosine']:.6f}, "
                     f"SQNR {_fmt(f['sqnr_db'])} dB, top-1 agreement {top1}; passes at atol {f['required_atol']:.4g} "
                     f"or rtol {rtol}")
        lines.append(f"output {name}: int8 vs onnxruntime QDQ: {q['mismatches']} mismatches in {q['compared']:,} "
                     f"values, max {q['max_lsb']} LSB")
        if "original_not_compared" in o:
            lines.append(f"output {name}: not compared with the original model: {ascii_text(o['original_not_compared'])}")
        if "int8_vs_original" in o:
            v, r = o["int8_vs_original"], o["fp32_vs_original"]
            lines.append(f"output {name}: int8 vs the original model: SQNR {_fmt(v['sqnr_db'])} dB, max_abs "
                         f"{v['max_abs']:.4g}; the rewritten graph's fp32 vs the original: SQNR {_fmt(r['sqnr_db'])} dB"
                         + ("" if r["min_sqnr_db"] is None else f" (at least {r['min_sqnr_db']:g})"))
        for seg in o.get("segments", []):
            lines.append(f"output {name}: [{seg['start']}:{seg['stop']}] on axis {seg['axis']} from "
                         f"{ascii_text(seg['input'])}: scale {seg['scale']:.4g}, SQNR {_fmt(seg['sqnr_db'])} dB, "
                         f"max_abs {seg['max_abs']:.4g}")
        if "int8_vs_saved" in o:
            v = o["int8_vs_saved"]
            lines.append(f"output {name}: int8 vs saved outputs: {v['mismatches']} of {v['compared']:,} values differ, "
                         f"max_abs {v['max_abs']:.4g}")
        if "tolerance_check" in o:
            c = o["tolerance_check"]
            lines.append(f"output {name}: within atol {c['atol']:g} + rtol {c['rtol']:g} of {c['reference']}: "
                         f"{c['compared'] - c['outside']:,} of {c['compared']:,} values"
                         + ("" if c["passed"] else f" ({c['outside']:,} outside)"))
    if "accuracy" in result:
        a = result["accuracy"]
        lines.append(f"accuracy: fp32 {a['fp32']:.2%}, int8 {a['int8']:.2%}")
    if result.get("sensitivity"):
        lines += ["", "sensitivity (each layer quantized alone, the rest fp32; most costly first):"]
        for r in result["sensitivity"][:20]:
            lines.append(f"  {ascii_text(r['name'])[-48:]:48} {ascii_text(r['op'])[:18]:18} "
                         f"SQNR {_fmt(r['sqnr_db']):>8} dB  cost {r['sqnr_db_cost']:6.3f} dB  "
                         f"noise share {r['noise_share']:7.1%}")
    if result.get("kept_float"):
        lines.append(f"kept float on the CPU (--keep-float): {ascii_text(', '.join(result['kept_float']))}")
    if result.get("stream"):
        st = result["stream"]
        carried = ", ".join(f"{p['output']} -> {p['input']}" for p in st["states"])
        lines.append(f"stream: {st['steps']:,} steps, state carried {ascii_text(carried)}; each step checked on the "
                     f"int8 stream's own inputs, fidelity judged against {st['judged_against']}")
    golden = result.get("golden")
    if golden and not golden["exact"]:
        lines.append(f"golden unavailable on this CPU for {', '.join(golden['inexact_ops'])}: onnxruntime's int8 "
                     f"kernels are not exact on {ascii_text(golden['cpu'])}; "
                     f"{len(golden['unverified_layers'])} layer(s) unverified, not compared")
    v = result["verdict"]
    first = v.get("first_divergent_layer")
    if first is not None:
        lsb = next(l["max_lsb_vs_ort_qdq"] for l in result["layers"] if l["name"] == first)
        lines.append(f"first layer differing from onnxruntime QDQ: {ascii_text(first)} ({lsb} LSB)")
    lines += format_fidelity(result)
    if v["failures"]:
        lines.append("FAILED: " + ascii_text("; ".join(v["failures"][:5])))
    if not v.get("accurate", True):
        lines.append("ACCURACY FAILED: " + ascii_text("; ".join(v["accuracy_failures"][:5])))
    if v["passed"]:
        lines.append("PASSED")
    return "\n".join(lines)


def format_fidelity(result: dict) -> list[str]:
    """Each output against the original model: its kind, figure, floor, and onnxruntime's reference; after an
    accuracy failure, the layers that lose the most and the remedies."""
    lines = []
    for name, f in result.get("fidelity", {}).items():
        v, name = f["vs_original"], ascii_text(name)
        figures = [f"SQNR {_fmt(v['sqnr_db'])} dB", f"cosine {v['cosine_mean']:.4f} mean / {v['cosine_worst']:.4f} "
                   "worst sample"]
        if v["top1_agreement"] is not None and f["kind"] == "classification":
            figures.append(f"top-1 agreement {v['top1_agreement']:.2%}")
        floors = ", ".join(f"{k} >= {x:g}" for k, x in f["floor"].items()) or "none"
        lines.append(f"fidelity {name} ({f['kind']}: {ascii_text(f['kind_why'])}): {', '.join(figures)} against "
                     f"{ascii_text(f['against'])}; floors {floors}: {'met' if f['passed'] else 'NOT MET'}")
        r = f["reference"]
        if r.get("made"):
            lines.append(f"fidelity {name}: onnxruntime's own quantization of the original (our activation scales "
                         f"on {r['overridden_scales']} tensors): SQNR {_fmt(r['sqnr_db'])} dB; ours "
                         f"{_fmt(r['ours_sqnr_db'])} dB")
        elif r["why"] != "not asked for (--reference)":
            lines.append(f"fidelity {name}: no onnxruntime reference: {ascii_text(r['why'])}")
    w = result.get("weights")
    if w is not None:
        worst = max((l["worst_steps"] for l in w["layers"]), default=0.0)
        lines.append(f"weights: {w['checked']} layers' int8 weights within their rounding of the float weights"
                     if not w["failures"] else f"weights: {len(w['failures'])} of {w['checked']} layers' int8 weights "
                     "beyond their rounding of the float weights")
        lines[-1] += f" (worst {worst:.3f} steps)" + (f"; {len(w['unchecked'])} not checked: " + ascii_text(
            "; ".join(f"{u['name']} ({u['why']})" for u in w["unchecked"][:3])) if w["unchecked"] else "")
    v = result["verdict"]
    if v.get("losing_layers"):
        lines.append("layers that lose the most (SQNR against fp32: drop from their inputs' -> their own):")
        for l in v["losing_layers"]:
            drop = "from the model inputs" if l["drop_db"] is None else f"drop {l['drop_db']:.2f} dB"
            lines.append(f"  {ascii_text(l['name'])[-48:]:48} {ascii_text(l['op'])[:18]:18} {drop}, "
                         f"SQNR {_fmt(l['sqnr_db'])} dB")
        lines.append("remedies: " + ascii_text("; ".join(v["remedies"])))
    return lines


@cli.command("inspect")
@_common
def inspect_cmd(model, calib, num_calib, calib_method, config, input_shape, input_value, state, tiling, equalize,
                bias_correction, weight_scales, adaround, keep_float, limit,
                as_json, verbose, quiet, debug):
    """Plan MODEL and print the per-layer table and totals; writes no code.

    --config A,B,... plans the model on several configurations side by side.
    """
    from .compiler import compile as compile_model
    from .emit.report import build_report

    _setup_logging(verbose, quiet)
    names = [c.strip() for c in config.split(",") if c.strip()] or ["default"]
    reports, plans = [], []
    for name in names:
        compiled = compile_model(model, calib=calib, config=name, input_shape=input_shape, num_calib=num_calib,
                                 calib_method=calib_method, command=_command_line(), tiling=tiling,
                                 equalize=equalize, bias_correction=bias_correction, weight_scales=weight_scales,
                                 limits=limit, keep_float=keep_float, adaround=adaround,
                                 input_values=input_value, states=state)
        reports.append(build_report(compiled, compiled.timing))
        plans.append(compiled.plan.to_dict())
    if as_json:
        _emit_json({"report": reports[0], "plan": plans[0]} if len(names) == 1 else
                   {"configs": [{"config": n, "report": r} for n, r in zip(names, reports)]})
        return
    if len(names) == 1 or verbose:
        for name, report in zip(names, reports):
            click.echo(format_layers(report))
    click.echo(format_totals(names, reports))
    click.echo("DRAM bytes are exact for the chosen tiles; cycles and utilization are estimates "
               "(docs/cost_model.md), not measurements.")


def format_layers(report: dict) -> str:
    lines = [f"config {ascii_text(report['config']['name'])} (DIM {report['config']['dim']})",
             f"{'#':>3} {'layer':34} {'op':10} {'call':22} {'MACs':>12} {'tiles':>22} {'DRAM B':>11} "
             f"{'gemmini.h B':>11} {'est.cyc':>10} {'util':>6}"]
    for i, r in enumerate(report["layers"]):
        tiles = ",".join(str(v) for v in r["tiles"].values()) if r["tiles"] else "-"
        lines.append(f"{i:>3} {ascii_text(r['name'])[-34:]:34} {ascii_text(r['op'])[:10]:10} {r['call'][:22]:22} "
                     f"{r['macs']:>12,} "
                     f"{tiles[-22:]:>22} {_n(r['dram_bytes']):>11} {_n(r['baseline_dram_bytes']):>11} "
                     f"{_n(r['est_cycles']):>10} {_p(r['utilization']):>6}")
    lines += [ascii_text(line) for line in report["cpu_steps"]]
    if report["kept_float"]["layers"]:
        lines.append(ascii_text(format_kept_float(report["kept_float"])))
    return "\n".join(lines)


def format_totals(names: list[str], reports: list[dict]) -> str:
    lines = [f"{'config':18} {'DIM':>4} {'spad KiB':>8} {'acc KiB':>7} {'MACs on Gemmini':>15} {'ideal cyc':>11} "
             f"{'est. cycles':>12} {'util':>6} {'DRAM B':>12} {'gemmini.h B':>12} {'ratio':>6}"]
    for name, r in zip(names, reports):
        t, c = r["totals"], r["config"]
        share = t["macs_on_gemmini"] / t["macs"] if t["macs"] else 1.0
        ratio = t["dram_bytes"] / t["baseline_dram_bytes"] if t["dram_bytes"] and t["baseline_dram_bytes"] else None
        lines.append(f"{name:18} {c['dim']:>4} {c['sp_kib']:>8} {c['acc_kib']:>7} {share:>15.1%} "
                     f"{t['ideal_cycles']:>11,} {_n(t['est_cycles']):>12} {_p(t['utilization']):>6} "
                     f"{_n(t['dram_bytes']):>12} {_n(t['baseline_dram_bytes']):>12} "
                     f"{'' if ratio is None else f'{ratio:.3f}':>6}")
    return "\n".join(lines)


def _n(value) -> str:
    return "-" if value is None else f"{int(value):,}"


def _p(value) -> str:
    return "-" if value is None else f"{value:.1%}"


@cli.command("view")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--port", type=click.IntRange(1, 65535), help="Port of Netron's local server (default: Netron's).")
@click.option("--no-browser", is_flag=True, help="Only serve the model; do not open a browser.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def view_cmd(out, port, no_browser, debug):
    """Open OUT/model.annotated.onnx in Netron (pip install netron): the plan drawn on the graph."""
    from .view import view

    view(out, port=port, browse=not no_browser)


@cli.command("ops")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable table.")
@click.option("--markdown", is_flag=True, help="The table as Markdown (docs/supported_ops.md).")
def ops_cmd(as_json, markdown):
    """List the supported ONNX ops with their Gemmini mapping and limits."""
    from .support import support_markdown, support_table

    table = support_table()
    if as_json:
        _emit_json({"ops": table})
    elif markdown:
        click.echo(support_markdown(), nl=False)
    else:
        for row in table:
            click.echo(f"{row['op']:20} since {row['since']:<3} {row['module']:22} {row['gemmini']}")
            if row["limits"]:
                click.echo(f"{'':20}           limits: {row['limits']}")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        cli.main(args=argv, prog_name="onnx2gemmini", standalone_mode=False)
        return 0
    except O2GError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {ascii_text(exc)}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        return 2
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        return 130
    except Exception as exc:  # a bug: still one line unless --debug
        if debug:
            traceback.print_exc()
        click.echo(f"error: internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
                   f"(rerun with --debug and report it)", err=True)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
