"""The output directory of a compile: every artifact the --emit list names, and the reports.

The emitters print the Plan; the QDQ golden and the self-test's expected values come from the compile
(golden.py, run/selftest.py); outdir.py makes the replacement of OUT safe and atomic. The reports
(report.json, report.md, report.html) and model.annotated.onnx are always written; their per-layer
quality figures come from a diff result when one is given, else from a few calibration samples
(quality.py).
"""
from __future__ import annotations

import time
from pathlib import Path

import onnx

from .errors import UsageError
from . import limits, quality
from .emit.report import build_report, report_json, report_markdown, timing_entry
from .outdir import check_output_dir, replace_dir

EMITTERS = ("c", "mlir", "qdq")


def available_emitters() -> tuple[str, ...]:
    return EMITTERS


def parse_emit(value: "str | tuple | list | None") -> tuple[str, ...]:
    if value is None:
        return available_emitters()
    if not isinstance(value, (str, tuple, list)):
        raise UsageError(f"emit: expected a comma-separated string or a list, got {type(value).__name__}")
    items = [str(v).strip() for v in (value.split(",") if isinstance(value, str) else value) if str(v).strip()]
    unknown = [v for v in items if v not in ("c", "mlir", "qdq")]
    if unknown or not items:
        raise UsageError(f"--emit: unknown artifact(s) {', '.join(unknown) or '(none)'}; choose from c, mlir, qdq")
    missing = [v for v in items if v not in available_emitters()]
    if missing:
        raise UsageError(f"--emit: {', '.join(missing)} not available in this version")
    return tuple(dict.fromkeys(items))


def write_outputs(compiled, out: Path, emit=None, force: bool = False, diff: dict | None = None) -> Path:
    """Emit every requested artifact and the reports into OUT (see outdir.py for how OUT is replaced)."""
    emit = parse_emit(emit)
    real = check_output_dir(out, force, compiled.input_files())
    return replace_dir(Path(out), real, force, lambda tree: _emit_all(compiled, tree, emit, diff))


def _emit_all(compiled, tree: Path, emit: tuple[str, ...], diff: dict | None = None) -> None:
    """Every requested artifact and the reports, into `tree` (the staging copy of OUT)."""
    timing = dict(compiled.timing)
    t = time.perf_counter()
    if "qdq" in emit:
        from .golden import build_qdq
        onnx.save(build_qdq(compiled.graph, compiled.quant, compiled.plan.model_name), tree / "model.qdq.onnx")
    with limits.applied(compiled.limits):  # layer_check_bytes bounds the self-tests' per-step values
        if "c" in emit:
            from .emit.c import write_c
            from .emit.checks import checked_tensors
            from .run.selftest import selftest_case
            plan = compiled.plan
            write_c(plan, tree / "c", *selftest_case(plan, compiled.selftest_sample, checked_tensors(plan)),
                    compiled.command, stream=compiled.selftest_stream)
        if "mlir" in emit:
            from .emit.mlir import step_checks, write_mlir
            from .emit.mlir_program import write_mlir_program
            from .run.selftest import selftest_case
            from .slices import densify
            write_mlir(compiled.plan, tree / "model.mlir", compiled.command)
            dense = densify(compiled.plan)
            wanted = {c.tensor for c in step_checks(compiled.plan)} | set(dense.outputs) | set(compiled.plan.outputs)
            sample, expected = selftest_case(dense, compiled.selftest_sample, wanted)
            write_mlir_program(compiled.plan, tree / "mlir", sample, expected, compiled.command,
                               compiled.selftest_stream)
    timing["emit_s"] = time.perf_counter() - t
    t = time.perf_counter()
    measured = quality.from_diff(diff) if diff is not None else quality.from_calibration(compiled,
                                                                                         compiled.calib_head)
    timing["quality_s"] = time.perf_counter() - t
    t = time.perf_counter()
    from .emit.annotated import annotated_model  # here, not at the top: matplotlib loads only to write
    from .emit.html_report import report_html
    report = build_report(compiled, timing, measured, (diff or {}).get("sensitivity"))
    (tree / "report.html").write_text(report_html(report))
    _save_model(annotated_model(compiled, report), tree / "model.annotated.onnx")
    timing["reports_s"] = time.perf_counter() - t
    report["timing"] = timing_entry(timing)  # the only part of the report that differs between runs
    (tree / "report.json").write_text(report_json(report))
    (tree / "report.md").write_text(report_markdown(report))


PROTOBUF_LIMIT = 2_000_000_000  # protobuf cannot serialize a message of 2 GiB or more


def _save_model(model: onnx.ModelProto, path: Path) -> None:
    """Save a model; one too large for a single protobuf keeps its weights in PATH.data beside it."""
    if model.ByteSize() < PROTOBUF_LIMIT:
        onnx.save(model, path)
    else:
        onnx.save(model, path, save_as_external_data=True, location=path.name + ".data")
