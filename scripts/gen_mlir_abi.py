"""Regenerate onnx2gemmini/runtime/o2g_mlir_cpu_abi.inc, the MLIR ABI wrappers of the CPU kernels, from the
CPU-kernel table (onnx2gemmini/cpu/). The only way that file changes; tests/emit/test_mlir.py checks it."""
from pathlib import Path

from onnx2gemmini.emit.mlir_runtime import cpu_wrappers

if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "onnx2gemmini" / "runtime" / "o2g_mlir_cpu_abi.inc"
    target.write_text(cpu_wrappers())
    print(f"wrote {target}")
