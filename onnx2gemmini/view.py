"""`onnx2gemmini view OUT`: open OUT/model.annotated.onnx in Netron, the model viewer, when it is installed.

Why a module of its own: Netron (PyPI `netron`) is optional, and the command line only needs one call.
Netron serves the model on localhost and opens a browser on it; the annotations are each node's
description and metadata (emit/annotated.py).
"""
from __future__ import annotations

from pathlib import Path

from .errors import UsageError

ANNOTATED = "model.annotated.onnx"


def annotated_path(out_dir: "str | Path") -> Path:
    """OUT/model.annotated.onnx, or a UsageError saying what OUT lacks."""
    out = Path(out_dir)
    if not out.is_dir():
        raise UsageError(f"view: {out}: not a directory (pass the output directory of a compile)")
    path = out / ANNOTATED
    if not path.is_file():
        raise UsageError(f"view: {path}: no annotated model (compile into {out} with this version of onnx2gemmini)")
    return path


def view(out_dir: "str | Path", port: int | None = None, browse: bool = True, wait: bool = True):
    """Serve OUT's annotated model with Netron on localhost and open a browser (unless `browse` is false).

    Blocks until interrupted when `wait`; otherwise returns Netron's (host, port) and leaves the server
    running (netron.stop() ends it). A missing Netron is one UsageError naming the install command.
    """
    path = annotated_path(out_dir)
    try:
        import netron
    except ImportError:
        raise UsageError(f"view: Netron is not installed (pip install netron); the annotated model is {path}") \
            from None
    try:
        address = netron.start(str(path), ("localhost", port) if port else None, browse=browse)
    except OSError as exc:  # the port is taken, or no socket can be opened
        raise UsageError(f"view: Netron cannot serve on localhost{f' port {port}' if port else ''}: "
                         f"{exc.strerror or exc}") from None
    if wait:
        netron.wait()
    return address
