"""Write the output directory atomically: everything goes to a temporary sibling, renamed at the end.

A failure at any point leaves no half-written directory behind.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import onnx

from ..errors import OutputError, UsageError
from .report import build_report, report_json, report_markdown

EMITTERS = ("c", "mlir", "qdq")  # extended as back ends land; see `available_emitters`


def available_emitters() -> tuple[str, ...]:
    return EMITTERS


def parse_emit(value: "str | tuple | list | None") -> tuple[str, ...]:
    if value is None:
        return available_emitters()
    items = [v.strip() for v in (value.split(",") if isinstance(value, str) else value) if v.strip()]
    unknown = [v for v in items if v not in ("c", "mlir", "qdq")]
    if unknown or not items:
        raise UsageError(f"--emit: unknown artifact(s) {', '.join(unknown) or '(none)'}; choose from c, mlir, qdq")
    missing = [v for v in items if v not in available_emitters()]
    if missing:
        raise UsageError(f"--emit: {', '.join(missing)} not available in this version")
    return tuple(dict.fromkeys(items))


def check_output_dir(out: Path, force: bool) -> None:
    """Refuse a non-empty directory (unless forced) or a path that is a file, before any work is done."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise OutputError(f"{out}: directory is not empty (use --force to replace it)")
    parent = out.resolve().parent
    if not parent.exists():
        raise OutputError(f"{out}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{out}: cannot write in {parent} (permission denied)")


def write_outputs(compiled, out: Path, emit=None, force: bool = False) -> Path:
    emit = parse_emit(emit)
    check_output_dir(out, force)
    parent = out.resolve().parent
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    except OSError as exc:
        raise OutputError(f"{out}: cannot create a directory in {parent}: {exc.strerror}") from None
    try:
        timing = dict(compiled.timing)
        t = time.perf_counter()
        if "qdq" in emit:
            from ..golden import build_qdq
            onnx.save(build_qdq(compiled.graph, compiled.quant, compiled.plan.model_name), tmp / "model.qdq.onnx")
        if "c" in emit:
            from .c import write_c
            from ..run.selftest import selftest_case
            write_c(compiled.plan, tmp / "c", *selftest_case(compiled.plan), compiled.command)
        if "mlir" in emit:
            from .mlir import write_mlir
            write_mlir(compiled.plan, tmp / "model.mlir", compiled.command)
        timing["emit_s"] = time.perf_counter() - t
        report = build_report(compiled, timing)
        (tmp / "report.json").write_text(report_json(report))
        (tmp / "report.md").write_text(report_markdown(report))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"{out}: cannot write output: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
