"""Run an emitted model.mlir natively: upstream MLIR lowering + the real C runtime ABI.

The two gemmini tile ops cannot be lowered here (that needs buddy-opt and its LLVM fork), so each is
rewritten into a call of tests/emit/host_tile_ops.c (buddy's lowering semantics on the host gemmini.h).
Everything else is the emitted module as written: memref.global/get_global/alloc/dealloc/reshape/cast/
copy go through finalize-memref-to-llvm (the conversion -lower-gemmini runs too), the runtime calls
through func-to-llvm's C interface into onnx2gemmini/runtime/o2g_mlir_abi.c and o2g_runtime.c.
"""
from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from torch_mlir import ir, passmanager
from torch_mlir.execution_engine import ExecutionEngine
from torch_mlir.runtime import get_ranked_memref_descriptor

HERE = Path(__file__).resolve().parent
RUNTIME = HERE.parent.parent / "onnx2gemmini" / "runtime"
SOURCES = [RUNTIME / "o2g_mlir_abi.c", RUNTIME / "o2g_runtime.c", HERE / "host_tile_ops.c", HERE / "host_checks.c"]
CC = os.environ.get("CC", "cc")
CFLAGS = ["-std=gnu99", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME / 'host'}", f"-I{RUNTIME}"]
PIPELINE = ("builtin.module(finalize-memref-to-llvm,convert-func-to-llvm,convert-arith-to-llvm,"
            "reconcile-unrealized-casts)")

SHIMS = """\
  func.func private @o2g_test_tile_matmul(memref<*xi8>, memref<*xi8>, memref<*xi8>, memref<*xi32>, f32, i64, i64, f32, f32, f32) attributes {llvm.emit_c_interface}
  func.func private @o2g_test_tile_matmul_full(memref<*xi8>, memref<*xi8>, memref<*xi32>, memref<*xi32>, f32, i64, i64, f32, f32, f32) attributes {llvm.emit_c_interface}
  func.func private @o2g_test_tile_conv(memref<*xi8>, memref<*xi8>, memref<*xi32>, memref<*xi8>, i64, i64, i64, f32, i64, i64, i64, i64, i64, i64) attributes {llvm.emit_c_interface}
"""
OP = re.compile(r'^(\s*)"gemmini\.(tile_matmul|tile_conv|flush|config_st)"\((.*?)\)(?: \{(.*?)\})? : \((.*?)\) -> \(\)$')
ATTR = re.compile(r"(\w+) = ([^,]+?)(?: : (\w+))?(?:,|$)")
MATMUL_ATTRS = (("accScale", "f32", "1.0"), ("act", "i64", "0"), ("repeatingBias", "i64", "false"),
                ("bertScale", "f32", "0.0"), ("aScaleFactor", "f32", "1.0"), ("bScaleFactor", "f32", "1.0"))
CONV_ATTRS = (("scale", "f32", "1.0"), ("stride", "i64", "1"), ("padding", "i64", "0"), ("act", "i64", "0"),
              ("poolSize", "i64", "0"), ("poolStride", "i64", "0"), ("poolPadding", "i64", "0"))


def missing_symbols(text: str, lib: Path) -> list[str]:
    """Runtime functions the module calls that the built C adapter does not define."""
    so = ctypes.CDLL(str(lib))
    declared = re.findall(r"func\.func private @(o2g_rt_\w+)\(", text)
    return sorted(sym for sym in set(declared) if not hasattr(so, "_mlir_ciface_" + sym))


_OBJECTS: dict[tuple, Path] = {}
_OBJECT_DIR = tempfile.TemporaryDirectory(prefix="o2g_objects_")


def compiled(source: Path, *flags: str) -> Path:
    """`source` compiled alone (-c) with CFLAGS + `flags`, once per process for the same text, the same
    headers beside it and the same flags: the runtime is the same for every module, and compiling it is
    most of a program's build (a compiler cache such as ccache also shares it across processes)."""
    text, todo, seen = hashlib.sha256(), [source], set()
    while todo:  # the source and the files beside it that it #includes, and theirs
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        data = path.read_bytes()
        text.update(path.name.encode() + data)
        todo += [path.parent / name.decode() for name in re.findall(rb'#include "([^"]+)"', data)]
    key = (text.hexdigest(), source.name, flags)
    if key not in _OBJECTS:
        obj = Path(_OBJECT_DIR.name) / f"{len(_OBJECTS)}_{source.stem}.o"
        subprocess.run([CC, *CFLAGS, *flags, "-c", str(source), "-o", str(obj)], check=True, capture_output=True,
                       text=True)
        _OBJECTS[key] = obj
    return _OBJECTS[key]


def build_runtime(out_dir: Path) -> Path:
    """The C side as a shared library: the MLIR ABI adapter, the CPU runtime, the host tile ops."""
    lib = out_dir / "libo2g_mlir_host.so"
    subprocess.run([CC, *CFLAGS, "-shared", *(str(compiled(s, "-fPIC")) for s in SOURCES), "-lm", "-o", str(lib)],
                   check=True, capture_output=True, text=True)
    return lib


def host_module(text: str) -> str:
    """The emitted module with its gemmini ops replaced by calls of the host tile ops."""
    out, counter = [], 0
    for line in text.splitlines():
        m = OP.match(line)
        if line == "module {":
            out += [line, SHIMS.rstrip("\n")]
            continue
        if not m:
            out.append(line)
            continue
        indent, op, operands, attrs, types = m.groups()
        if op in ("flush", "config_st"):  # the host tile ops take their whole configuration per call
            continue
        values = {k: v.strip() for k, v, _ in ATTR.findall(attrs or "")}
        operands = [o.strip() for o in operands.split(",")]
        types = [t.strip() for t in types.split(",")]
        args, arg_types = [], []
        for value, ty in zip(operands, types):
            if ty.startswith("memref<"):
                counter += 1
                elem = ty.rsplit("x", 1)[1].rstrip(">")
                out.append(f"{indent}%host{counter} = memref.cast {value} : {ty} to memref<*x{elem}>")
                args.append(f"%host{counter}")
                arg_types.append(f"memref<*x{elem}>")
            else:
                args.append(value)
                arg_types.append(ty)
        for name, ty, default in (MATMUL_ATTRS if op == "tile_matmul" else CONV_ATTRS):
            value = values.get(name, default)
            value = {"true": "1", "false": "0"}.get(value, value)
            counter += 1
            out.append(f"{indent}%host{counter} = arith.constant {value} : {ty}")
            args.append(f"%host{counter}")
            arg_types.append(ty)
        shim = op + ("_full" if values.get("fullC") == "true" else "")  # fullC: C receives acc_t
        out.append(f"{indent}func.call @o2g_test_{shim}({', '.join(args)}) : ({', '.join(arg_types)}) -> ()")
    return "\n".join(out) + "\n"


def lower(text: str) -> ir.Module:
    ctx = ir.Context()
    module = ir.Module.parse(host_module(text), ctx)
    passmanager.PassManager.parse(PIPELINE, ctx).run(module.operation)
    return module


class Jit:
    """@forward compiled once; each call passes float (or integer id) inputs and int8 out-parameters through its C
    interface (`_mlir_ciface_forward`). With `expected` (one int8 array per @o2g_rt_check hook of a module
    emitted with check_steps), a call also returns per hook (values differing, largest difference, reached)."""

    def __init__(self, text: str, lib: Path, output_shapes: list[tuple], output_dtypes: list[str] | None = None):
        self.engine = ExecutionEngine(lower(text), opt_level=2, shared_libs=[str(lib)])
        self.lib = ctypes.CDLL(str(lib))
        self.output_shapes = output_shapes
        self.output_dtypes = output_dtypes or ["int8"] * len(output_shapes)  # float32: an output kept float

    def __call__(self, inputs: list[np.ndarray], expected: list[np.ndarray] | None = None):
        results = [np.full(shape, 0x5B, dtype) for shape, dtype in zip(self.output_shapes, self.output_dtypes)]
        arrays = [np.ascontiguousarray(x, None if np.asarray(x).dtype.kind in "iu" else np.float32)  # ids as they are
                  for x in inputs] + results
        args = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in arrays]
        expected = [np.ascontiguousarray(e, np.int8).reshape(-1) for e in expected or []]
        self.lib.o2g_test_set_checks(ctypes.c_int64(len(expected)))
        for k, e in enumerate(expected):
            self.lib.o2g_test_set_check(ctypes.c_int64(k), e.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(e.size))
        self.engine.invoke("forward", *args)
        checks = []
        for k in range(len(expected)):
            differing, largest, done = ctypes.c_int64(), ctypes.c_int(), ctypes.c_int()
            self.lib.o2g_test_check_result(ctypes.c_int64(k), ctypes.byref(differing), ctypes.byref(largest),
                                           ctypes.byref(done))
            checks.append((differing.value, largest.value, bool(done.value)))
        return (results, checks) if expected else results


def run_isolated(text: str, lib: Path, output_shapes: list[tuple], samples: list[list[np.ndarray]],
                 timeout: float = 300, expected: list[list[np.ndarray]] | None = None,
                 output_dtypes: list[str] | None = None) -> list:
    """Jit(...) over `samples` (with each sample's `expected` check values, see Jit) in a child process: the C
    adapter exits the process on a bad call, which must fail one test, not end the test run. The child is
    spawned, not forked: a fork of a test process that already runs threads (onnxruntime's pools, a pytest-xdist
    worker's) may abort in the child. The child's stdout is the error message."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    with tempfile.NamedTemporaryFile() as log:
        process = context.Process(target=_jit_child, args=(send, log.name, text, str(lib), output_shapes, samples,
                                                            expected, output_dtypes))
        process.start()
        send.close()
        try:
            results = receive.recv() if receive.poll(timeout) else None
        except EOFError:
            results = None
        process.join(timeout)
        if results is None or process.exitcode != 0:
            process.kill()
            log.seek(0)
            raise RuntimeError(f"the lowered module failed (exit {process.exitcode}): {log.read().decode().strip()}")
    return results


def _jit_child(send, log_path: str, text: str, lib: str, output_shapes, samples, expected, output_dtypes) -> None:
    with open(log_path, "wb") as log:
        os.dup2(log.fileno(), 1)
    jit = Jit(text, Path(lib), output_shapes, output_dtypes)
    send.send([jit(inputs, expected[i] if expected else None) for i, inputs in enumerate(samples)])


def main_c(input_shapes: list[tuple], output_shapes: list[tuple]) -> str:
    """A main program for model.mlir (docs/mlir.md): `./model INPUT.bin OUTPUT.bin` like the C back end's,
    float32 inputs in, int8 outputs out."""
    decls, calls, io_in, io_out = [], [], [], []
    for kind, shapes, ctype in (("in", input_shapes, "float"), ("out", output_shapes, "int8_t")):
        for i, shape in enumerate(shapes):
            n = int(np.prod(shape))
            dims = ", ".join(str(d) for d in shape)
            decls.append(f"typedef O2G_MEMREF({ctype}, {len(shape)}) {kind}{i}_t;\n"
                         f"static {ctype} {kind}{i}_data[{n}] __attribute__((aligned(64)));\n"
                         f"static {kind}{i}_t {kind}{i};")
            calls.append(f"    o2g_memref_init(&{kind}{i}, {kind}{i}_data, {len(shape)}, (const int64_t[]){{{dims}}});")
            io = io_in if kind == "in" else io_out
            verb = "fread" if kind == "in" else "fwrite"
            io.append(f"    ok &= {verb}({kind}{i}_data, sizeof({kind}{i}_data[0]), {n}, f) == {n};")
    params = ", ".join([f"in{i}_t *" for i in range(len(input_shapes))] +
                       [f"out{i}_t *" for i in range(len(output_shapes))])
    args = ", ".join([f"&in{i}" for i in range(len(input_shapes))] + [f"&out{i}" for i in range(len(output_shapes))])
    return "\n".join([
        "#include <stdio.h>", "#include <stdint.h>", '#include "gemmini.h"', '#include "o2g_mlir_abi.h"', "",
        *decls, "", f"void _mlir_ciface_forward({params});", "",
        "int main(int argc, char **argv)", "{", "    FILE *f;", "    int ok = 1;",
        "    if (argc != 3) {", '        fprintf(stderr, "usage: %s INPUT.bin OUTPUT.bin\\n", argv[0]);',
        "        return 2;", "    }", *calls,
        '    if (!(f = fopen(argv[1], "rb")))', "        return 1;", *io_in, "    fclose(f);",
        "    if (!ok)", "        return 1;",
        "    gemmini_flush(0);", f"    _mlir_ciface_forward({args});",
        '    if (!(f = fopen(argv[2], "wb")))', "        return 1;", *io_out, "    fclose(f);",
        "    return ok ? 0 : 1;", "}", ""])


def build_program(text: str, lib: Path, input_shapes, output_shapes, out_dir: Path) -> Path:
    """model.mlir + the runtime + a main -> a native executable (the object file comes from MLIR's JIT,
    which resolves the runtime symbols in `lib` while compiling; the linker resolves them again)."""
    obj = _object_file(text, lib, out_dir)
    main = out_dir / "main.c"
    main.write_text(main_c(input_shapes, output_shapes))
    exe = out_dir / "model"
    subprocess.run([CC, *CFLAGS, str(main), str(obj), *(str(compiled(s)) for s in SOURCES), "-lm", "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    return exe


def _object_file(text: str, lib: Path, out_dir: Path) -> Path:
    """The module lowered here, as out_dir/model.o (MLIR's JIT resolves the runtime symbols in `lib` while
    compiling; the linker resolves them again)."""
    obj = out_dir / "model.o"
    engine = ExecutionEngine(lower(text), opt_level=2, shared_libs=[str(lib)])
    engine.raw_lookup("forward")  # compiles the module: the object file holds what was compiled
    engine.dump_to_object_file(str(obj))
    return obj


def build_selftest(text: str, lib: Path, program_dir: Path, check_layers: bool) -> Path:
    """OUT/mlir's self-test program (o2g_mlir_selftest.c and the files mlir_program.py writes, as emitted) for
    this host: `text` (../model.mlir or model_checked.mlir, as its Makefile picks) lowered here with the host
    tile ops, linked with the emitted runtime copies in `program_dir`."""
    obj = _object_file(text, lib, program_dir)
    sources = ["o2g_mlir_selftest.c", "selftest_data.S"] + (["selftest_layers.S"] if check_layers else [])
    # the emitted runtime copies (they read no per-model file) and the host tile ops: compiled once per process
    shared = [compiled(program_dir / "o2g_mlir_abi.c"), compiled(program_dir / "o2g_runtime.c"),
              compiled(HERE / "host_tile_ops.c")]
    exe = program_dir / ("model-layers" if check_layers else "model")
    subprocess.run([CC, *CFLAGS, f"-DO2G_CHECK_LAYERS={int(check_layers)}", f"-I{program_dir}",
                    f"-Wa,-I,{program_dir}", *(str(program_dir / s) for s in sources), *map(str, shared),
                    str(obj), "-lm", "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def have_cc() -> bool:
    return shutil.which(CC) is not None
