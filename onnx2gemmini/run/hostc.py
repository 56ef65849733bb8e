"""Build the emitted C program (OUT/c/) with make and run it on this host: the third execution of a plan.

`./model INPUT.bin OUTPUT.bin` reads the float32 (or integer id) inputs and writes the int8 outputs, float32
where an output is kept float (CONTRACTS.md); this module writes INPUT.bin, runs it and reads OUTPUT.bin
back, so tests and `diff` can hold the C program's bytes against the emulator's.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..errors import O2GError
from ..plan import Plan


class HostCError(O2GError):
    """The emitted C program could not be built or run here (exit code 1: a check could not pass)."""

    exit_code = 1


class ToolMissing(HostCError):
    """make or the C compiler is not installed."""


class BuildFailed(HostCError):
    """make failed: the message carries the end of the compiler's output."""


class RunFailed(HostCError):
    """The program exited with an error or wrote output of the wrong size."""


def _tail(text: str, lines: int = 15) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-lines:] if line.strip())


def build(c_dir: "str | Path", targets: tuple[str, ...] = ("model",), jobs: int = 2,
          make_vars: dict[str, str] | None = None, timeout: float = 600) -> Path:
    """`make -jN targets` in OUT/c; returns the directory. Raises ToolMissing / BuildFailed."""
    c_dir = Path(c_dir)
    if shutil.which("make") is None:
        raise ToolMissing("cannot build the C program: 'make' is not installed (e.g. apt-get install make gcc)")
    cc = (make_vars or {}).get("CC") or os.environ.get("CC") or "cc"
    if "model" in targets and shutil.which(cc.split()[0]) is None:
        raise ToolMissing(f"cannot build the C program: C compiler '{cc}' not found (set CC or install gcc)")
    if not (c_dir / "Makefile").is_file():
        raise BuildFailed(f"{c_dir}: no Makefile (was the C back end emitted there?)")
    make_vars = {"CC": cc, **(make_vars or {})}
    cmd = ["make", "-C", str(c_dir), f"-j{jobs}", *targets] + [f"{k}={v}" for k, v in make_vars.items()]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildFailed(f"{c_dir}: make {' '.join(targets)} took longer than {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise BuildFailed(f"{c_dir}: make {' '.join(targets)} failed: {_tail(proc.stderr + proc.stdout)}")
    return c_dir


def input_bytes(plan: Plan, inputs: dict[str, np.ndarray]) -> bytes:
    """INPUT.bin: every model input as little-endian float32 (integer ids as int64 or int32), ONNX layout, input
    order."""
    parts = []
    for tid in plan.inputs:
        t = plan.tensors[tid]
        if t.onnx_name not in inputs:
            raise RunFailed(f"missing model input '{t.onnx_name}'")
        dtype = np.dtype(t.dtype)
        x = np.asarray(inputs[t.onnx_name], dtype)
        if x.size * dtype.itemsize != t.nbytes:
            raise RunFailed(f"input '{t.onnx_name}' has {x.size} values, the model takes {list(t.shape)}")
        parts.append(x.astype(dtype.newbyteorder("<")).tobytes())
    return b"".join(parts)


def split_outputs(plan: Plan, data: bytes) -> dict[str, np.ndarray]:
    """OUTPUT.bin -> arrays by output tensor id (int8, or float32 where the output is kept float), each in its
    storage shape."""
    expected = sum(plan.tensors[t].nbytes for t in plan.outputs)
    if len(data) != expected:
        raise RunFailed(f"OUTPUT.bin has {len(data)} bytes, expected {expected}")
    result, offset = {}, 0
    for tid in plan.outputs:
        t = plan.tensors[tid]
        dtype = np.dtype(t.dtype).newbyteorder("<")
        result[tid] = np.frombuffer(data, dtype, int(np.prod(t.shape)), offset).reshape(t.shape).copy()
        offset += t.nbytes
    return result


def run(c_dir: "str | Path", plan: Plan, inputs: dict[str, np.ndarray], timeout: float = 600) -> dict[str, np.ndarray]:
    """Run the built ./model on one sample: float inputs by ONNX name -> int8 outputs by tensor id."""
    exe = Path(c_dir) / "model"
    if not exe.is_file():
        raise RunFailed(f"{exe}: not built (call build() first)")
    with tempfile.TemporaryDirectory(prefix="o2g-hostc-") as tmp:
        inp, out = Path(tmp) / "INPUT.bin", Path(tmp) / "OUTPUT.bin"
        inp.write_bytes(input_bytes(plan, inputs))
        try:
            proc = subprocess.run([str(exe.resolve()), str(inp), str(out)], capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"{exe}: no result after {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise RunFailed(f"{exe} exited with status {proc.returncode}: {_tail(proc.stderr + proc.stdout)}")
        return split_outputs(plan, out.read_bytes())


def run_int8(c_dir: "str | Path", plan: Plan, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Like Compiled.run_int8, but executed by the C program: int8 outputs by ONNX output name."""
    out = run(c_dir, plan, inputs)
    return {plan.tensors[t].onnx_name: out[t] for t in plan.outputs}
