"""OUT/mlir/: model.mlir built by Buddy-MLIR's own tools into a self-checking bare-metal program.

`make -C OUT/mlir BUDDY_OPT=... BUDDY_TRANSLATE=... LLC=... GEMMINI=<gemmini-rocc-tests>` lowers ../model.mlir
with -lower-gemmini, translates it to LLVM IR, compiles it for riscv64 and links it with the C runtime, a heap
(memref.alloc is malloc), Buddy's Gemmini intrinsics for an upstream llc (o2g_gemmini_intrinsics.c) and the
self-test (runtime/o2g_mlir_selftest.c), which prints the same PASS / FAIL lines as ../c's model-baremetal.
CHECK_LAYERS=1 builds model_checked.mlir instead: the module with a hook after every step (emit_mlir's
check_steps) that compares the step's output with the emulator's and puts the emulator's values in place.
A module whose C kernels may differ from the emulator by a stated tolerance (libm) needs those hooks in the
default build too, so that no difference propagates to the outputs; then the default build uses
model_checked.mlir with only those hooks active, as ../c's self-test checks only those steps.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..cpu.abi import DTYPE_CTYPE
from ..memory import align_up
from ..plan import Plan
from ..slices import densify
from ..stream import StreamCase
from ..tolerance import EXACT
from .banner import banner_lines
from .c import blob, block_comment, c_prefix, check_dtype, incbin_source, sample_input
from .c_kernels import c_float
from .checks import layer_checks, layers_title, selftest_checks
from .mlir import emit_mlir, lower_gemmini_options, step_checks
from .names import c_string, makefile_comment

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
RUNTIME_FILES = ("o2g_mlir_abi.c", "o2g_mlir_abi.h", "o2g_mlir_cpu_abi.inc", "o2g_runtime.c", "o2g_runtime.h",
                 "o2g_mlir_selftest.c", "o2g_heap.c", "o2g_gemmini_intrinsics.c")
ALLOC_SLACK = 128   # per memref.alloc: the lowering's malloc(size + alignment), and our 64-byte rounding


def write_mlir_program(plan: Plan, out_dir: "str | Path", sample: dict[str, np.ndarray],
                       expected: dict[str, np.ndarray], command: str = "", stream: StreamCase | None = None) -> Path:
    """Write OUT/mlir/ for `plan`; `expected` holds the emulator's value of every tensor of densify(plan)
    (run/selftest.py's expected_values) for `sample`. With `stream` (a streaming model), the self-test first
    runs the warm-up steps through o2g_stream_step, carrying the state into `sample`'s step."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in mlir_program_files(plan, sample, expected, command, stream).items():
        (out_dir / name).write_bytes(data)
    return out_dir


def mlir_program_files(plan: Plan, sample: dict[str, np.ndarray], expected: dict[str, np.ndarray],
                       command: str = "", stream: StreamCase | None = None) -> dict[str, bytes]:
    """Every file of OUT/mlir/ by name, as bytes."""
    files = _Program(plan, command, stream).files(sample, expected)
    for name in RUNTIME_FILES:
        files[name] = (RUNTIME / name).read_bytes()
    return dict(sorted(files.items()))


class _Program:
    def __init__(self, plan: Plan, command: str, stream: StreamCase | None = None):
        self.plan, self.command, self.stream = plan, command, stream
        self.dense = densify(plan)
        self.every = step_checks(plan, bounded=False)     # every step's check, before layer_check_bytes
        self.hooks = layer_checks(self.dense, self.every)  # every hook of model_checked.mlir, in k order
        self.default_hooks = [k for k, c in enumerate(self.hooks) if c.tolerance != EXACT]
        for check in selftest_checks(self.dense, False):  # outputs compared for equality when @forward returns
            if check.tensor in plan.outputs:
                check_dtype(self.dense, check)
        self.p = c_prefix(plan)
        self.banner = banner_lines(plan, command)

    def files(self, sample, expected) -> dict[str, bytes]:
        plan, p = self.plan, self.p
        inputs = [(f"{p}_sample_input_{i}", sample_input(plan, tid, sample)) for i, tid in enumerate(plan.inputs)]
        outputs = [(f"{p}_expect_output_{i}", np.asarray(expected[tid], plan.tensors[tid].dtype).ravel())
                   for i, tid in enumerate(plan.outputs)]
        hooks = [(f"{p}_expect_hook_{k}", np.asarray(expected[self.hooks[k].tensor], np.int8).ravel())
                 for k in self.default_hooks]
        layers = [(f"{p}_layer_expect_{k}", np.asarray(expected[c.tensor], np.int8).ravel())
                  for k, c in enumerate(self.hooks)]
        data, dtable = blob(inputs + outputs + hooks + self.warmup_arrays())
        layer_data, ltable = blob(layers)
        return {
            "Makefile": self.makefile().encode(),
            "model_checked.mlir": emit_mlir(plan, self.command, check_steps=True).encode(),
            "selftest_model.inc": self.model_inc().encode(),
            "selftest_data.bin": data,
            "selftest_data.S": incbin_source(self.banner, "selftest_data.S: the self-test's sample, the emulator's "
                                             "outputs for it and the values of the default checks",
                                             "selftest_data.bin", dtable).encode(),
            "selftest_layers.bin": layer_data,
            "selftest_layers.S": incbin_source(self.banner, layers_title(self.every, self.hooks),
                                               "selftest_layers.bin", ltable).encode(),
        }

    def warmup_arrays(self) -> list[tuple[str, np.ndarray]]:
        """A streaming model's warm-up steps: every input but the states, per step."""
        if self.stream is None:
            return []
        return [(f"{self.p}_warmup_input_{s}_{i}", sample_input(self.plan, tid, step))
                for s, step in enumerate(self.stream.warmup) for i, tid in enumerate(self.plan.inputs)
                if i not in self.stream.state_inputs()]

    def stream_inc(self) -> list[str]:
        """A streaming model's side of the self-test: the warm-up inputs and o2g_stream_reset/_step, which
        carry each state output's real values (int8 times its scale, in float32) into its input."""
        if self.stream is None:
            return []
        plan, p = self.plan, self.p
        states = self.stream.state_inputs()
        lines = [f"#define O2G_NUM_STATES {len(self.stream.pairs)}",
                 f"#define O2G_WARMUP_STEPS {len(self.stream.warmup)}"]
        rows = []
        for s, _ in enumerate(self.stream.warmup):
            row = []
            for i, tid in enumerate(plan.inputs):
                if i in states:
                    row.append("0")
                    continue
                elem, n = DTYPE_CTYPE[plan.tensors[tid].dtype], _count(plan.tensors[tid].shape)
                lines.append(f"extern const {elem} {p}_warmup_input_{s}_{i}[{n}];")
                row.append(f"{p}_warmup_input_{s}_{i}")
            rows.append("    {" + ", ".join(row) + "},")
        lines += [f"static const void *const o2g_warmup_inputs[{max(len(rows), 1)}][O2G_NUM_INPUTS] = {{"]
        lines += rows or ["    {0},"]
        lines += ["};", "", "static void o2g_stream_reset(void)", "{"]
        lines += [f"    memset(o2g_input_{i}, 0, sizeof o2g_input_{i});" for i in sorted(states)]
        lines += ["}", "", "/* @forward once, then each state output's real values into its input, as DequantizeLinear */",
                  "static void o2g_stream_step(void)", "{", "    unsigned long j;", "    o2g_call();"]
        for o, i in self.stream.pairs:
            t = plan.tensors[plan.outputs[o]]
            n = _count(t.shape)
            if t.dtype == "float32":
                lines.append(f"    memcpy(o2g_input_{i}, o2g_output_{o}, sizeof o2g_input_{i});")
                continue
            if t.scale_axis is None:
                scale = c_float(t.scale)
            else:
                inner = _count(t.onnx_shape[t.scale_axis + 1:])
                table = ", ".join(c_float(v) for v in t.axis_scales)
                lines.append(f"    static const float scales_{o}[{len(t.axis_scales)}] = {{{table}}};")
                scale = f"scales_{o}[(j / {inner}) % {len(t.axis_scales)}]"
            lines += [f"    for (j = 0; j < {n}; j++)",
                      f"        o2g_input_{i}[j] = (float)o2g_output_{o}[j] * {scale};"]
        lines += ["}", "", "static void o2g_warmup_inputs_of(int s)", "{"]
        lines += [f"    memcpy(o2g_input_{i}, o2g_warmup_inputs[s][{i}], sizeof o2g_input_{i});"
                  for i in range(len(plan.inputs)) if i not in states]
        lines += ["}", "", "/* the state the warm-up carried into the checked step must be the emulator's */",
                  "static const char *o2g_carried_state_differs(void)", "{"]
        lines += [f"    if (memcmp(o2g_input_{i}, {p}_sample_input_{i}, sizeof o2g_input_{i}))\n"
                  f"        return {c_string(plan.tensors[plan.inputs[i]].onnx_name)};" for i in sorted(states)]
        lines += ["    return 0;", "}", ""]
        return lines

    def heap_bytes(self) -> int:
        """Room for every buffer @forward allocates, all at once (o2g_heap.c frees only at the end)."""
        dense = self.dense
        bases = {dense.base(t).id for s in dense.steps for t in s.writes() if t in dense.tensors}
        total = sum(align_up(int(np.prod(dense.tensors[b].shape, dtype=np.int64))
                             * np.dtype(dense.tensors[b].dtype).itemsize, 64) + ALLOC_SLACK for b in bases)
        return align_up(total + (1 << 16), 1 << 12)

    def makefile(self) -> str:
        text = (RUNTIME / "templates" / "Makefile.mlir.in").read_text()
        banner = "\n".join("# " + makefile_comment(line) for line in self.banner)
        default = "model_checked.mlir" if self.default_hooks else "../model.mlir"
        return (text.replace("@BANNER@", banner).replace("@LOWER_GEMMINI@", lower_gemmini_options(self.plan.config))
                .replace("@DEFAULT_MLIR@", default).replace("@HEAP_BYTES@", str(self.heap_bytes())))

    def model_inc(self) -> str:
        """The model's side of o2g_mlir_selftest.c: its buffers, the call of @forward and the check tables."""
        plan, dense, p = self.plan, self.dense, self.p
        lines = block_comment(self.banner + ["", "selftest_model.inc: the model's buffers, @forward's call and the "
                                             "checks, included by o2g_mlir_selftest.c"])
        lines += ["", f"#define O2G_NUM_INPUTS {len(plan.inputs)}", f"#define O2G_NUM_OUTPUTS {len(plan.outputs)}",
                  f"#define O2G_NUM_LAYERS {len(dense.steps)}", ""]
        for i, tid in enumerate(plan.inputs):
            elem, n = DTYPE_CTYPE[plan.tensors[tid].dtype], _count(plan.tensors[tid].shape)
            lines += [f"extern const {elem} {p}_sample_input_{i}[{n}];",
                      f"static {elem} o2g_input_{i}[{n}] __attribute__((aligned(64)));"]
        for i, tid in enumerate(plan.outputs):
            t = plan.tensors[tid]
            elem, n = DTYPE_CTYPE[t.dtype], _count(t.shape)
            lines += [f"extern const {elem} {p}_expect_output_{i}[{n}];",
                      f"static {elem} o2g_output_{i}[{n}] __attribute__((aligned(64)));"]
        args = [f"&o2g_input_{i}_ref" for i in range(len(plan.inputs))]
        args += [f"&o2g_output_{i}_ref" for i in range(len(plan.outputs))]
        lines += ["", f"void _mlir_ciface_forward({', '.join(['void *'] * len(args))});", "",
                  "/* @forward's memrefs: dense, row-major, offset 0 (MLIR's StridedMemRefType) */",
                  "static void o2g_call(void)", "{"]
        refs = [(f"o2g_input_{i}", DTYPE_CTYPE[plan.tensors[tid].dtype], plan.tensors[tid].shape)
                for i, tid in enumerate(plan.inputs)]
        refs += [(f"o2g_output_{i}", DTYPE_CTYPE[plan.tensors[tid].dtype], plan.tensors[tid].shape)
                 for i, tid in enumerate(plan.outputs)]
        for name, elem, shape in refs:
            lines += _descriptor(name, elem, shape)
        lines += [f"    _mlir_ciface_forward({', '.join(args)});", "}", "",
                  "/* the embedded sample's inputs, then @forward (a streaming model's state inputs hold the state",
                  "   its warm-up steps carried) */",
                  "static void o2g_forward(void)", "{"]
        states = set() if self.stream is None else self.stream.state_inputs()
        lines += [f"    memcpy(o2g_input_{i}, {p}_sample_input_{i}, sizeof o2g_input_{i});"
                  for i in range(len(plan.inputs)) if i not in states]
        lines += ["    o2g_call();", "}", ""] + self.stream_inc()
        writer = {dense.base(t).id: k for k, s in enumerate(dense.steps) for t in s.writes() if t in dense.tensors}
        lines += ["static const struct o2g_output_check o2g_output_checks[O2G_NUM_OUTPUTS] = {"]
        for i, tid in enumerate(plan.outputs):
            t = plan.tensors[tid]
            lines.append(f"    {{{c_string(t.onnx_name or t.id)}, o2g_output_{i}, {p}_expect_output_{i}, "
                         f"{_count(t.shape)}, {np.dtype(t.dtype).itemsize}, "
                         f"{writer.get(dense.base(tid).id, -1) if tid in dense.tensors else -1}}},")
        lines += ["};", ""]
        outputs = {tid: i for i, tid in enumerate(plan.outputs)}
        for flag, ks, sym in (("#if O2G_CHECK_LAYERS", range(len(self.hooks)), "layer_expect"),
                              ("#else", self.default_hooks, "expect_hook")):
            ks = list(ks)
            lines += [flag] + [f"extern const int8_t {p}_{sym}_{k}[{_count(dense.tensors[self.hooks[k].tensor].shape)}];"
                               for k in ks]
            lines.append(f"static const struct o2g_hook_check o2g_hook_checks[{max(len(ks), 1)}] = {{")
            for k in ks:
                check = self.hooks[k]
                t = dense.tensors[check.tensor]
                n = _count(t.shape)
                lines.append(f"    {{{k}, {check.step}, {c_string(dense.steps[check.step].node)}, "
                             f"{c_string(t.onnx_name or t.id)}, {p}_{sym}_{k}, {n}, {check.tolerance.lsb}, "
                             f"{check.tolerance.allowed(n)}, {outputs.get(check.tensor, -1)}}},")
            if not ks:
                lines.append("    {-1, 0, \"\", \"\", 0, 0, 0, 0, -1}, /* none */")
            lines.append("};")
        lines += ["#endif", ""]
        return "\n".join(lines)


def _count(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _descriptor(name: str, elem: str, shape) -> list[str]:
    rank = len(shape)
    strides = [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(rank)]
    arrays = "" if rank == 0 else f" int64_t sizes[{rank}]; int64_t strides[{rank}];"
    values = "" if rank == 0 else (f", {{{', '.join(str(d) for d in shape)}}}, "
                                   f"{{{', '.join(str(s) for s in strides)}}}")
    return [f"    static struct {{ {elem} *allocated, *aligned; int64_t offset;{arrays} }} {name}_ref = "
            f"{{{name}, {name}, 0{values}}};"]
