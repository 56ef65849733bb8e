"""The C back end: OUT/c/, a program that runs the Plan with the gemmini.h API.

Targets gemmini.h of ucb-bar/gemmini-rocc-tests, branch dev, commit 180c468 (2023-10-07): model.c is a
straight-line sequence of its calls (tiled_matmul_auto / tiled_matmul, tiled_conv_auto / tiled_conv,
tiled_conv_dw_auto, tiled_resadd_auto, tiled_global_average_auto) with that version's exact signatures
(spec/gemmini.md §3), one per plan step (explicit-tile entry points when the step carries tiles), and
CPU steps calling the o2g_runtime kernels (emit/c_kernels.py prints their calls from the cpu/ table).

Why it looks the way it does:
* weights leave as binary data (weights.bin, pulled in by weights.S with .incbin, one 64-byte-aligned
  symbol per tensor), so even ResNet-50 builds in seconds;
* memory is static: weights const, activations in one int8 arena whose offsets come from memory.py,
  the float model inputs in their own buffers; views alias their base;
* the same model.c builds for the host (bundled host/gemmini.h), for RISC-V + picolibc on Spike, and
  bare-metal against the real gemmini.h (Makefile targets, see runtime/templates/Makefile.in);
* the self-test (selftest.c) checks, after the steps it names, the step's output against the emulator's
  and then puts the emulator's values in place, so every step is checked on the emulator's own inputs
  and no tolerance propagates (O2G_STEP_DONE; `make ... CHECK_LAYERS=1` checks every step);
* output is a pure function of the Plan and the self-test's sample and expected values (computed by the
  caller): byte-identical files every time.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..cpu.abi import DTYPE_CTYPE
from ..errors import UnsupportedError
from ..memory import ALIGN, align_up, plan_memory
from ..normalizer import SOFTMAX
from ..stream import StreamCase
from ..plan import RELU, Conv, ConvDw, CpuOp, GlobalAverage, Matmul, Plan, Resadd, Step
from ..tolerance import EXACT
from .banner import banner_lines
from .c_kernels import CpuPrinter, c_float
from .checks import Check, layer_checks, layers_title, selftest_checks
from .names import c_comment, c_identifier, c_string, makefile_comment, unique_identifiers

GEMMINI_VERSION = "ucb-bar/gemmini-rocc-tests branch dev, commit 180c468 (2023-10-07)"
RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
RUNTIME_FILES = {"o2g_runtime.h": "o2g_runtime.h", "o2g_runtime.c": "o2g_runtime.c", "o2g_selftest.h":
                 "o2g_selftest.h", "o2g_htif.c": "o2g_htif.c", "host/gemmini.h": "host/gemmini.h"}
MATMUL_TILES = ("tile_I", "tile_J", "tile_K")
CONV_TILES = ("batches", "porows", "pocols", "pochs", "krows", "kcols", "kchs")


def write_c(plan: Plan, out_dir: Path, sample: dict[str, np.ndarray], expected: dict[str, np.ndarray],
            command: str = "", prefix: str | None = None, stream: StreamCase | None = None) -> Path:
    """Write OUT/c/ for `plan`. The self-test runs `sample` (float inputs by ONNX name) and compares with
    `expected` (int8 value of every tensor a step writes, by tensor id: the emulator's, see
    run/selftest.py). With `stream` (a streaming model: run/selftest.StreamCase), model.h gains the stream
    API and the self-test first runs the warm-up steps, carrying the state into `sample`'s step."""
    out_dir = Path(out_dir)
    for name, data in c_files(plan, sample, expected, command, prefix, stream).items():
        path = out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return out_dir


def c_files(plan: Plan, sample: dict[str, np.ndarray], expected: dict[str, np.ndarray], command: str = "",
            prefix: str | None = None, stream: StreamCase | None = None) -> dict[str, bytes]:
    """Every file of OUT/c/ by relative path, as bytes."""
    files = CProgram(plan, command, prefix, stream).files(sample, expected)
    for dest, src in RUNTIME_FILES.items():
        files[dest] = (RUNTIME / src).read_bytes()
    return dict(sorted(files.items()))


def c_prefix(plan: Plan, prefix: str | None = None) -> str:
    """The prefix of the generated C symbols: `prefix` as an identifier, else o2g_<model name>."""
    return c_identifier(prefix) if prefix else "o2g_" + c_identifier(plan.model_name).lower()


# --- literals ------------------------------------------------------------------------------------

def block_comment(lines: list[str], indent: str = "") -> list[str]:
    body = [f"{indent} * {c_comment(line)}".rstrip() for line in lines]
    return [f"{indent}/*"] + body + [f"{indent} */"]


def dims(shape) -> str:
    return "x".join(str(d) for d in shape)


# --- binary blobs with an assembler wrapper --------------------------------------------------------

def blob(arrays: list[tuple[str, np.ndarray]]) -> tuple[bytes, list[tuple[str, int, int]]]:
    """Concatenate little-endian arrays, each at a 64-byte-aligned offset: (bytes, [(symbol, offset, size)])."""
    data = bytearray()
    table = []
    for symbol, array in arrays:
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        data += bytes(align_up(len(data), ALIGN) - len(data))
        table.append((symbol, len(data), len(raw)))
        data += raw
    return bytes(data), table


def incbin_source(banner: list[str], what: str, bin_name: str, table) -> str:
    """A .S file giving each blob slice its own global, aligned, sized symbol (x86-64 and RISC-V gas)."""
    lines = block_comment(banner + ["", f"{what}: {bin_name} as one 64-byte-aligned symbol per array."])
    lines += ["", "\t.section .rodata", ""]
    for symbol, offset, size in table:
        lines += [f"\t.balign {ALIGN}", f"\t.globl {symbol}", f"\t.type {symbol}, @object",
                  f"\t.size {symbol}, {size}", f"{symbol}:", f'\t.incbin "{bin_name}", {offset}, {size}', ""]
    lines += ['\t.section .note.GNU-stack,"",@progbits', ""]
    return "\n".join(lines)


# --- the program -------------------------------------------------------------------------------

C_TYPES = {"int8": "elem_t", "int32": "acc_t", "float32": "float"}


def c_type(dtype, what: str) -> str:
    try:
        return C_TYPES[str(dtype)]
    except KeyError:
        raise UnsupportedError(f"C back end: {what} has dtype {dtype} (int8, int32 or float32 only)") from None


class CProgram:
    """Names every buffer and prints model.h, model.c, model_config.h, weights.*, the self-test data,
    main.c, selftest.c and the Makefile for one plan."""

    def __init__(self, plan: Plan, command: str = "", prefix: str | None = None, stream: StreamCase | None = None):
        self.plan = plan
        self.stream = stream
        self.p = c_prefix(plan, prefix)
        self.P = self.p.upper()
        self.banner = banner_lines(plan, command) + [f"gemmini.h: {GEMMINI_VERSION}"]
        self.memory = plan_memory(plan)
        tensor_names = unique_identifiers(plan.tensors)
        const_names = unique_identifiers(plan.constants)
        self.const_sym = {cid: f"{self.p}_w_{const_names[cid]}" for cid in plan.constants}
        self.input_sym = {tid: f"{self.p}_in_{tensor_names[tid]}" for tid in plan.inputs}
        self.tensor_sym = {tid: f"{self.p}_t_{tensor_names[tid]}" for tid in plan.tensors}
        self.cpu_printer = CpuPrinter(plan, self.ptr, self.p)

    # -- naming ----------------------------------------------------------------------------
    def ptr(self, tid: str) -> str:
        """The C expression for a buffer: weight symbol, float input buffer, or arena macro."""
        if tid in self.plan.constants:
            return self.const_sym[tid]
        base = self.plan.base(tid)
        if base.id in self.input_sym:
            return self.input_sym[base.id]
        return self.tensor_sym[tid]

    def elems(self, tid: str) -> int:
        return int(np.prod(self.plan.tensors[tid].shape, dtype=np.int64))

    def replace(self, template: str) -> str:
        return template.replace("@P@", self.p).replace("@PU@", self.P).replace("@GEMMINI_VERSION@", GEMMINI_VERSION)

    def c_banner(self) -> list[str]:
        return block_comment(self.banner)

    # -- files -----------------------------------------------------------------------------
    def files(self, sample: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> dict[str, bytes]:
        plan = self.plan
        weights, wtable = blob([(self.const_sym[c], a) for c, a in plan.constants.items()])
        text = {
            "model.h": self.model_h(),
            "model_config.h": self.config_h(),
            "model.c": self.model_c(wtable),
            "weights.S": incbin_source(self.banner, "weights.S: the model's constant data", "weights.bin",
                                       wtable),
            "main.c": self.template("main.c.in", "\n".join(self.c_banner())),
            "selftest.c": self.template("selftest.c.in", "\n".join(self.c_banner())),
            "Makefile": self.template("Makefile.in", "\n".join("# " + makefile_comment(line)
                                                               for line in self.banner)),
        }
        files = {name: body.encode() for name, body in text.items()}
        files["weights.bin"] = weights
        files.update(self.selftest_files(sample, expected))
        return files

    def template(self, name: str, banner: str) -> str:
        return self.replace((RUNTIME / "templates" / name).read_text()).replace("@BANNER@", banner)

    def config_h(self) -> str:
        cfg, guard = self.plan.config, f"{self.P}_MODEL_CONFIG_H"
        lines = self.c_banner() + [
            f"#ifndef {guard}", f"#define {guard}", "",
            f"/* The Gemmini configuration '{c_comment(cfg.name)}' this model was compiled for: the",
            " * gemmini_params.h it is built against must agree (model.c checks), and the host build",
            " * configures host/gemmini.h with these values. */",
            f"#define {self.P}_DIM {cfg.dim}",
            f"#define {self.P}_BANK_NUM {cfg.sp_banks}",
            f"#define {self.P}_BANK_ROWS {cfg.bank_rows}",
            f"#define {self.P}_ACC_ROWS {cfg.acc_rows}",
            "", f"#endif /* {guard} */", ""]
        return "\n".join(lines)

    def model_h(self) -> str:
        plan, p, P = self.plan, self.p, self.P
        guard = f"{P}_MODEL_H"
        lines = self.c_banner() + [
            f"#ifndef {guard}", f"#define {guard}", "",
            "#include <stddef.h>", "#include <stdint.h>", "",
            "/*",
            f" * {c_comment(plan.model_name)} for Gemmini. Write every float32 input (ONNX layout) into",
            f" * {p}_inputs[i] (an input with {p}_input_is_integer[i] holds integer ids instead: int64_t, or",
            f" * int32_t where {p}_input_elem_bytes[i] == 4, written through a cast of the pointer), call",
            f" * {p}_run(), read the int8 outputs (ONNX layout) from {p}_outputs[i]",
            f" * (real value = int8 * {p}_output_scales[i], or per index: see {p}_output_scale_axis); an output",
            f" * with {p}_output_elem_bytes[i] == 4 holds float32 real values instead (scale 1).",
            " * Static memory only; not reentrant.",
            " */",
            f"#define {P}_NUM_INPUTS {len(plan.inputs)}",
            f"#define {P}_NUM_OUTPUTS {len(plan.outputs)}",
            f"#define {P}_NUM_LAYERS {len(plan.steps)}",
            f"#define {P}_ARENA_BYTES {self.arena_size()} /* activations; lower bound "
            f"{self.memory.lower_bound_bytes} */",
            f"#define {P}_WEIGHT_BYTES {sum(int(a.nbytes) for a in plan.constants.values())}",
            ""]
        for i, tid in enumerate(plan.inputs):
            t = plan.tensors[tid]
            what = "float32" if t.dtype == "float32" else f"{t.dtype} ids"
            lines.append(f"/* input {i}: '{c_comment(t.onnx_name)}' {what} {list(t.shape)} */")
        for i, tid in enumerate(plan.outputs):
            t = plan.tensors[tid]
            scale = (f"scale {c_float(t.scale or 1.0)}" if t.scale_axis is None else
                     f"scales per index along axis {t.scale_axis}: "
                     + ", ".join(f"{n} x {c_float(v)}" for n, v in t.scale_runs()))
            if t.dtype == "float32":
                scale = "real values"
            lines.append(f"/* output {i}: '{c_comment(t.onnx_name)}' {t.dtype} {list(t.onnx_shape)}, {scale} */")
        lines += [
            "",
            f"extern float *const {p}_inputs[{P}_NUM_INPUTS];",
            f"extern const size_t {p}_input_sizes[{P}_NUM_INPUTS]; /* values */",
            f"extern const size_t {p}_input_elem_bytes[{P}_NUM_INPUTS]; /* 4: float32 or int32, 8: int64 */",
            f"extern const int {p}_input_is_integer[{P}_NUM_INPUTS]; /* 1: integer ids (embedding lookups) */",
            f"extern const char *const {p}_input_names[{P}_NUM_INPUTS];",
            f"extern const int8_t *const {p}_outputs[{P}_NUM_OUTPUTS];",
            f"extern const size_t {p}_output_sizes[{P}_NUM_OUTPUTS]; /* values */",
            f"extern const size_t {p}_output_elem_bytes[{P}_NUM_OUTPUTS]; /* 1: int8, 4: float32 */",
            f"extern const float {p}_output_scales[{P}_NUM_OUTPUTS];",
            "/* An output that joins ranges keeps one scale per index along one axis (ONNX layout): then",
            f"   {p}_output_scale_axis[i] >= 0, value j along it has scale {p}_output_axis_scales[i][j], and",
            f"   {p}_output_scales[i] is the largest; otherwise the axis is -1 and the pointer 0. */",
            f"extern const int {p}_output_scale_axis[{P}_NUM_OUTPUTS];",
            f"extern const float *const {p}_output_axis_scales[{P}_NUM_OUTPUTS];",
            f"extern const char *const {p}_output_names[{P}_NUM_OUTPUTS];",
            "",
            "/* One entry per plan step: the ONNX node name and the cycles of the last run (read_cycles()). */",
            f"extern const char *const {p}_layer_names[{P}_NUM_LAYERS];",
            f"extern uint64_t {p}_layer_cycles[{P}_NUM_LAYERS];",
            "",
            "/* Runs the model once: quantizes the inputs, then every layer in order. */",
            f"void {p}_run(void);"] + self.stream_h() + ["", f"#endif /* {guard} */", ""]
        return "\n".join(lines)

    def stream_h(self) -> list[str]:
        """A streaming model's API (--state): the outputs fed back as inputs, and the calls that carry them."""
        if self.stream is None:
            return []
        p, P, t = self.p, self.P, self.plan.tensors
        pairs = [f"output {o} '{c_comment(t[self.plan.outputs[o]].onnx_name)}' -> input {i} "
                 f"'{c_comment(t[self.plan.inputs[i]].onnx_name)}'" for o, i in self.stream.pairs]
        return ["", "/*", " * A streaming model (--state): each call takes one step of the stream, and these outputs are",
                " * fed back as these inputs at the next call: " + "; ".join(pairs) + ".",
                f" * {p}_stream_reset() zeroes the state inputs (the start of a stream); {p}_stream_step() runs",
                f" * the model once, then writes each state output's real values (int8 times its scale, in float32)",
                f" * into its input for the next call. Write the other inputs before each {p}_stream_step().",
                " */",
                f"#define {P}_NUM_STATES {len(self.stream.pairs)}",
                f"extern const int {p}_state_outputs[{P}_NUM_STATES];",
                f"extern const int {p}_state_inputs[{P}_NUM_STATES];",
                f"void {p}_stream_reset(void);", f"void {p}_stream_step(void);"]

    def stream_c(self) -> list[str]:
        """model.c's side of the stream API (stream_h)."""
        if self.stream is None:
            return []
        p, P, plan = self.p, self.P, self.plan
        shape = {o: plan.tensors[plan.outputs[o]].onnx_shape for o, _ in self.stream.pairs}
        axis = {o: plan.tensors[plan.outputs[o]].scale_axis for o, _ in self.stream.pairs}
        geometry = []
        for o, i in self.stream.pairs:
            a = axis[o]
            inner = int(np.prod(shape[o][a + 1:], dtype=np.int64)) if a is not None else 1
            dim = shape[o][a] if a is not None else 1
            geometry.append(f"{{{o}, {i}, {self.elems(plan.outputs[o])}, {inner}, {dim}}}")
        return ["", "#include <string.h>", "", "/* The stream API (model.h): each state output's real values into its input. */",
                "static const struct { int output, input; size_t count, inner, dim; } "
                f"{p}_states[{P}_NUM_STATES] = {{", "    " + ", ".join(geometry), "};",
                f"const int {p}_state_outputs[{P}_NUM_STATES] = {{"
                + ", ".join(str(o) for o, _ in self.stream.pairs) + "};",
                f"const int {p}_state_inputs[{P}_NUM_STATES] = {{"
                + ", ".join(str(i) for _, i in self.stream.pairs) + "};", "",
                f"void {p}_stream_reset(void)", "{", "    int k;", f"    for (k = 0; k < {P}_NUM_STATES; k++)",
                f"        memset({p}_inputs[{p}_states[k].input], 0, {p}_states[k].count * sizeof(float));", "}", "",
                f"void {p}_stream_step(void)", "{", "    int k;", "    size_t j;", f"    {p}_run();",
                f"    for (k = 0; k < {P}_NUM_STATES; k++) {{",
                f"        const int o = {p}_states[k].output;",
                f"        float *x = {p}_inputs[{p}_states[k].input];",
                f"        if ({p}_output_elem_bytes[o] == 4) {{ /* a float32 output: its values as they are */",
                f"            memcpy(x, {p}_outputs[o], {p}_states[k].count * sizeof(float));",
                "            continue;", "        }",
                f"        for (j = 0; j < {p}_states[k].count; j++) {{ /* as DequantizeLinear: one float32 product */",
                f"            const float scale = {p}_output_scale_axis[o] < 0 ? {p}_output_scales[o] :",
                f"                {p}_output_axis_scales[o][(j / {p}_states[k].inner) % {p}_states[k].dim];",
                f"            x[j] = (float){p}_outputs[o][j] * scale;", "        }", "    }", "}"]

    def arena_size(self) -> int:
        return max(self.memory.arena_bytes, ALIGN)

    def model_c(self, wtable) -> str:
        plan, p, P = self.plan, self.p, self.P
        lines = self.c_banner() + [
            "/*",
            " * model.c: the forward pass, one gemmini.h call (or o2g_runtime CPU kernel) per plan step.",
            f" * gemmini.h API: {GEMMINI_VERSION}.",
            " */",
            '#include "model.h"', '#include "model_config.h"', "",
            "#ifdef O2G_HOST /* the bundled host implementation takes its parameters from the config */",
            f"#define DIM {P}_DIM", f"#define BANK_NUM {P}_BANK_NUM", f"#define BANK_ROWS {P}_BANK_ROWS",
            f"#define ACC_ROWS {P}_ACC_ROWS", "#endif",
            '#include "gemmini.h"',
            "#ifndef GEMMINI_HOST",
            '#include "include/gemmini_testutils.h" /* read_cycles() */',
            "#endif",
            '#include "o2g_runtime.h"', "",
            "#ifdef O2G_SELFTEST /* the self-test checks (and resynchronizes) tensors after some steps */",
            '#include "o2g_selftest.h"', "#define O2G_STEP_DONE(step) o2g_step_done(step)", "#else",
            "#define O2G_STEP_DONE(step) ((void)0)", "#endif", "",
            f"#if DIM != {P}_DIM || BANK_NUM != {P}_BANK_NUM || BANK_ROWS != {P}_BANK_ROWS || "
            f"ACC_ROWS != {P}_ACC_ROWS",
            '#error "gemmini_params.h does not match the Gemmini configuration this model was compiled '
            'for (model_config.h)"',
            "#endif", ""]
        lines += ["/* Constant data: weights.bin, pulled in by weights.S (64-byte aligned). */"]
        sizes = {sym: size for sym, _, size in wtable}
        for cid, array in plan.constants.items():
            sym = self.const_sym[cid]
            ctype = c_type(array.dtype, f"constant {cid}")
            lines.append(f"extern const {ctype} {sym}[{array.size}]; /* {array.dtype} {dims(array.shape)}, "
                         f"{sizes[sym]} bytes */")
        lines += ["", f"/* Activations: one static arena ({self.memory.arena_bytes} bytes; the largest set of "
                      f"simultaneously live", f" * buffers needs {self.memory.lower_bound_bytes}), offsets from "
                      f"onnx2gemmini/memory.py. Views share their base's bytes. */",
                  f"static elem_t {p}_arena[{P}_ARENA_BYTES] __attribute__((aligned({ALIGN})));"]
        for tid in plan.tensors:
            if tid in self.memory.offsets:
                t = plan.tensors[tid]
                ctype = c_type(t.dtype, f"tensor {tid}")
                expr = f"({p}_arena + {self.memory.offsets[tid]})"
                if ctype != "elem_t":
                    expr = f"(({ctype} *)(void *){expr})"
                view = (f", view of {plan.base(tid).id}" if t.view_of else
                        f", channels {t.offset}.. of {t.slice_of} (rows {plan.row_stride(tid)} apart)"
                        if t.slice_of else "")
                lines.append(f"#define {self.tensor_sym[tid]} {expr} /* {t.dtype} {dims(t.shape)} {t.layout}"
                             f"{c_comment(view)} */")
        lines += ["", "/* Model inputs in ONNX layout: float32, or integer ids. */"]
        for tid in plan.inputs:
            ctype = DTYPE_CTYPE[plan.tensors[tid].dtype]
            lines.append(f"static {ctype} {self.input_sym[tid]}[{self.elems(tid)}] __attribute__((aligned({ALIGN})));")
        run = self.run_function()  # first: it collects the CPU kernels' constant tables
        if self.cpu_printer.tables:
            lines += ["", "/* Constant tables of the CPU kernels. */"] + self.cpu_printer.tables
        lines += [""] + self.tables() + [""] + run
        return "\n".join(lines) + "\n"

    def tables(self) -> list[str]:
        plan, p, P = self.plan, self.p, self.P
        ins, outs = plan.inputs, plan.outputs
        t = plan.tensors

        def table(decl: str, items: list[str]) -> list[str]:
            return [f"{decl} = {{"] + [f"    {item}," for item in items] + ["};"]
        return (table(f"float *const {p}_inputs[{P}_NUM_INPUTS]",
                      [self.input_sym[i] if t[i].dtype == "float32" else f"(float *)(void *){self.input_sym[i]}"
                       for i in ins])
                + table(f"const size_t {p}_input_sizes[{P}_NUM_INPUTS]", [str(self.elems(i)) for i in ins])
                + table(f"const size_t {p}_input_elem_bytes[{P}_NUM_INPUTS]",
                        [str(np.dtype(t[i].dtype).itemsize) for i in ins])
                + table(f"const int {p}_input_is_integer[{P}_NUM_INPUTS]",
                        [str(int(t[i].dtype != "float32")) for i in ins])
                + table(f"const char *const {p}_input_names[{P}_NUM_INPUTS]", [c_string(t[i].onnx_name) for i in ins])
                + table(f"const int8_t *const {p}_outputs[{P}_NUM_OUTPUTS]",
                        [self.ptr(o) if t[o].dtype == "int8" else f"(const int8_t *)(const void *){self.ptr(o)}"
                         for o in outs])
                + table(f"const size_t {p}_output_sizes[{P}_NUM_OUTPUTS]", [str(self.elems(o)) for o in outs])
                + table(f"const size_t {p}_output_elem_bytes[{P}_NUM_OUTPUTS]",
                        [str(np.dtype(t[o].dtype).itemsize) for o in outs])
                + table(f"const float {p}_output_scales[{P}_NUM_OUTPUTS]", [c_float(t[o].scale or 1.0) for o in outs])
                + [line for k, o in enumerate(outs) if t[o].scale_axis is not None
                   for line in table(f"static const float {p}_output{k}_axis_scales[{len(t[o].axis_scales)}]",
                                     [c_float(v) for v in t[o].axis_scales])]
                + table(f"const int {p}_output_scale_axis[{P}_NUM_OUTPUTS]",
                        [str(-1 if t[o].scale_axis is None else t[o].scale_axis) for o in outs])
                + table(f"const float *const {p}_output_axis_scales[{P}_NUM_OUTPUTS]",
                        ["0" if t[o].scale_axis is None else f"{p}_output{k}_axis_scales" for k, o in enumerate(outs)])
                + table(f"const char *const {p}_output_names[{P}_NUM_OUTPUTS]",
                        [c_string(t[o].onnx_name) for o in outs])
                + table(f"const char *const {p}_layer_names[{P}_NUM_LAYERS]",
                        [c_string(s.node) for s in plan.steps])
                + [f"uint64_t {p}_layer_cycles[{P}_NUM_LAYERS];"])

    def run_function(self) -> list[str]:
        p = self.p
        lines = [f"void {p}_run(void)", "{", "    uint64_t start;", "", "    gemmini_flush(0);"]
        for i, step in enumerate(self.plan.steps):
            on_gemmini = step.target == "gemmini"
            head, call = self.print_step(step)
            lines += [""] + block_comment([f"layer {i}: '{step.node}'"] + head, "    ")
            lines += ["    start = read_cycles();"] + ["    " + c for c in call]
            if on_gemmini:
                lines.append("    gemmini_fence(); /* Gemmini is done before the CPU reads the result */")
            lines.append(f"    {p}_layer_cycles[{i}] = read_cycles() - start;")
            lines.append(f"    O2G_STEP_DONE({i});")
        return lines + ["}"] + self.stream_c() + ["", "#ifdef O2G_SELFTEST", '#include "selftest_checks.inc"',
                                                 "#endif"]

    # -- one printer per step kind: (comment lines, C lines) ---------------------------------------------
    def print_step(self, step: Step) -> tuple[list[str], list[str]]:
        printers = {Matmul: self.matmul, Conv: self.conv, ConvDw: self.conv_dw,
                    Resadd: self.resadd, GlobalAverage: self.global_average, CpuOp: self.cpu}
        printer = next((f for cls, f in printers.items() if isinstance(step, cls)), None)
        if printer is None:
            raise UnsupportedError(f"C back end: no printer for plan step {type(step).__name__} ({step.node})")
        return printer(step)

    def call(self, name: str, args: list[tuple[str, str]]) -> list[str]:
        """name(args...); one argument group per line, each with a comment naming the parameters."""
        out = [f"{name}("]
        for i, (value, what) in enumerate(args):
            sep = "," if i < len(args) - 1 else ");"
            out.append(f"    {value}{sep} /* {what} */")
        return out

    @staticmethod
    def tiles(step, names: tuple[str, ...]) -> str:
        missing = [n for n in names if n not in step.tiles]
        if missing:
            raise UnsupportedError(f"C back end: {step.node}: tiles lack {', '.join(missing)}")
        return ", ".join(str(int(step.tiles[n])) for n in names)

    def matmul(self, s: Matmul):
        act = {RELU: "RELU", SOFTMAX: "SOFTMAX"}.get(s.act, "NO_ACTIVATION")
        head = [f"matmul I={s.I} J={s.J} K={s.K}, {'bias' if s.D else 'no bias'}, {act}, "
                f"scale {c_float(s.scale)} ({s.scale:.9g})"]
        mvin = [c_float(f) if f != 1.0 else "MVIN_SCALE_IDENTITY" for f in (s.A_scale_factor, s.B_scale_factor)]
        bert = c_float(s.bert_scale) if s.act == SOFTMAX else "ACC_SCALE_IDENTITY"
        if s.act == SOFTMAX:
            head.append(f"Gemmini's normalizer: each row's softmax, bert_scale {s.bert_scale:.9g}; A and B pass "
                        f"the mvin scaler at {s.A_scale_factor:.9g} (config has_normalizations)")
        args = [(f"{s.I}, {s.J}, {s.K}", "dim_I, dim_J, dim_K"),
                (f"{self.ptr(s.A)}, {self.ptr(s.B)}, {self.ptr(s.D) if s.D else 'NULL'}, {self.ptr(s.C)}",
                 "A, B, D, C"),
                (f"{s.stride_A}, {s.stride_B}, {s.stride_D}, {s.stride_C}", "stride_A, stride_B, stride_D, stride_C"),
                (f"{mvin[0]}, {mvin[1]}, (scale_acc_t)MVIN_SCALE_IDENTITY",
                 "A_scale_factor, B_scale_factor, D_scale_factor"),
                (f"{act}, {c_float(s.scale)}, {bert}", "act, scale, bert_scale"),
                (c_bool(s.repeating_bias), "repeating_bias")]
        if s.tiles:
            head.append(f"tiles (DIM blocks): {s.tiles}")
            args.append((self.tiles(s, MATMUL_TILES), "tile_I, tile_J, tile_K"))
        if s.heuristic_hazard:
            head.append(s.heuristic_hazard)
        if s.full_C:
            head.append("full_C: C receives the int32 accumulators (no scale, no activation)")
        args += [(f"false, false, {c_bool(s.full_C)}, false, 0", "transpose_A, transpose_B, full_C, low_D, weightA"),
                 ("WS", "tiled_matmul_type")]
        call = self.call("tiled_matmul" if s.tiles else "tiled_matmul_auto", args)
        if s.act == SOFTMAX:  # Gemmini's functional model keeps SOFTMAX through a later config_st with act 0
            call.append("gemmini_extended_config_st(0, RELU, ACC_SCALE_IDENTITY); /* clears the SOFTMAX read-out */")
        return head, call

    @staticmethod
    def conv_head(s, what: str, in_channels: int, out_channels: int) -> tuple[str, list[str]]:
        """The activation name and the comment lines shared by conv and depthwise-conv calls."""
        act = "RELU" if s.act == RELU else "NO_ACTIVATION"
        pool = (f", max-pool {s.pool_size}/{s.pool_stride}/{s.pool_padding} -> {dims(s.pool_out_dims)}"
                if s.pool_stride else "")
        return act, [f"{what} {s.kernel_dim}x{s.kernel_dim} stride {s.stride} padding {s.padding}: "
                     f"{s.batch_size}x{s.in_row_dim}x{s.in_col_dim}x{in_channels} (NHWC) -> "
                     f"{s.batch_size}x{s.out_row_dim}x{s.out_col_dim}x{out_channels}{pool}",
                     f"{'bias' if s.bias else 'no bias'}, {act}, scale {c_float(s.scale)} ({s.scale:.9g})"]

    def conv(self, s: Conv):
        act, head = self.conv_head(s, "conv", s.in_channels, s.out_channels)
        bias = self.ptr(s.bias) if s.bias else "NULL"
        tail = [(f"{act}, {c_float(s.scale)}", "act, scale"),
                (f"{s.pool_size}, {s.pool_stride}, {s.pool_padding}", "pool_size, pool_stride, pool_padding"),
                ("WS", "tiled_conv_type")]
        if s.tiles:
            head.append(f"tiles: {s.tiles}")
        if s.heuristic_hazard:
            head.append(s.heuristic_hazard)
        args = [(f"{s.batch_size}, {s.in_row_dim}, {s.in_col_dim}, {s.in_channels}",
                 "batch_size, in_row_dim, in_col_dim, in_channels"),
                (f"{s.out_channels}, {s.out_row_dim}, {s.out_col_dim}", "out_channels, out_row_dim, out_col_dim"),
                (f"{s.stride}, {s.input_dilation}, {s.kernel_dilation}, {s.padding}, {s.kernel_dim}",
                 "stride, input_dilation, kernel_dilation, padding, kernel_dim")]
        strided = (s.in_stride, s.out_stride) != (s.in_channels, s.out_channels)
        if s.tiles or strided:
            args.append((f"{s.in_stride}, {s.out_channels}, {s.out_stride}", "in_stride, weight_stride, out_stride"))
        if strided:
            head.append(f"channel slices: input pixels {s.in_stride} apart, output pixels {s.out_stride} apart")
        args.append(("false, false, false, false, false",
                     "wrot180, trans_output_1203, trans_input_3120, trans_weight_1203, trans_weight_0132"))
        if s.tiles:
            args.append((self.tiles(s, CONV_TILES), ", ".join(CONV_TILES)))
        args.append((f"{self.ptr(s.input)}, {self.ptr(s.weights)}, {bias}, {self.ptr(s.output)}",
                     "input, weights, bias, output"))
        name = "tiled_conv" if s.tiles else "tiled_conv_stride_auto" if strided else "tiled_conv_auto"
        return head, self.call(name, args + tail)

    def conv_dw(self, s: ConvDw):
        act, head = self.conv_head(s, "depthwise conv", s.channels, s.channels)
        bias = f"(acc_t *){self.ptr(s.bias)}" if s.bias else "NULL"
        # gemmini.h declares these pointers without const; the call does not write the weights or bias.
        return head, self.call("tiled_conv_dw_auto", [
            (f"{s.batch_size}, {s.in_row_dim}, {s.in_col_dim}, {s.channels}",
             "batch_size, in_row_dim, in_col_dim, channels"),
            (f"{s.out_row_dim}, {s.out_col_dim}", "out_row_dim, out_col_dim"),
            (f"{s.stride}, {s.padding}, {s.kernel_dim}", "stride, padding, kernel_dim"),
            (f"{self.ptr(s.input)}, (elem_t *){self.ptr(s.weights)}, {bias}, {self.ptr(s.output)}",
             "input, weights, bias, output"),
            (f"{act}, {c_float(s.scale)}", "act, scale"),
            (f"{s.pool_size}, {s.pool_stride}, {s.pool_padding}", "pool_size, pool_stride, pool_padding"),
            ("WS", "tiled_conv_type")])

    def resadd(self, s: Resadd):
        head = [f"resadd I={s.I} J={s.J}: A*{c_float(s.A_scale)} + B*{c_float(s.B_scale)}, "
                f"then *{c_float(s.C_scale)} ({s.C_scale:.9g}){', relu' if s.relu else ''}"]
        return head, self.call("tiled_resadd_auto", [
            (f"{s.I}, {s.J}", "I, J"),
            (f"{c_float(s.A_scale)}, {c_float(s.B_scale)}, {c_float(s.C_scale)}", "A_scale, B_scale, C_scale"),
            (f"{self.ptr(s.A)}, {self.ptr(s.B)}, {self.ptr(s.C)}", "A, B, C"),
            (c_bool(s.relu), "relu"), ("WS", "matadd_type")])

    def global_average(self, s: GlobalAverage):
        head = [f"global average: {s.batches}x{s.dim}x{s.dim}x{s.channels} (NHWC) -> {s.batches}x{s.channels}, "
                f"round half to even"]
        return head, self.call("tiled_global_average_auto", [
            (f"{self.ptr(s.input)}, {self.ptr(s.output)}", "input, output"),
            (f"{s.batches}, {s.channels}, {s.dim}", "batches, channels, dim"), ("WS", "type")])

    def cpu(self, s: CpuOp):
        shapes = " + ".join(dims(self.plan.operand(t).shape) for t in s.inputs)
        head = [f"CPU {s.op}: {shapes} -> {dims(self.plan.tensors[s.outputs[0]].shape)}", f"why: {s.reason}"]
        tol = s.params.c_exactness
        if tol != EXACT:
            head.append(f"float32 kernel: within {tol.lsb} LSB of the emulator ({tol.why})")
        return head, self.cpu_printer.print(s)

    # -- the self-test -----------------------------------------------------------------------------------
    def selftest_files(self, sample: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> dict[str, bytes]:
        """selftest_data.{bin,S,c} (the sample and the default checks' values), selftest_layers.{bin,S} (every
        step's, for CHECK_LAYERS=1) and selftest_checks.inc (the check tables, compiled into model.c)."""
        plan, p = self.plan, self.p
        inputs = [(f"{p}_sample_input_{i}", sample_input(plan, tid, sample)) for i, tid in enumerate(plan.inputs)]
        default, every = selftest_checks(plan, False), selftest_checks(plan, True)
        layers = layer_checks(plan, every)

        def values(prefix: str, checks: list[Check]):
            return [(f"{p}_{prefix}_{k}", np.asarray(expected[c.tensor], check_dtype(plan, c)).reshape(-1))
                    for k, c in enumerate(checks)]
        warmup = [] if self.stream is None else [
            (f"{p}_warmup_input_{s}_{i}", sample_input(plan, tid, step))
            for s, step in enumerate(self.stream.warmup) for i, tid in enumerate(plan.inputs)
            if i not in self.stream.state_inputs()]
        data, dtable = blob(inputs + values("expect", default) + warmup)
        layer_data, ltable = blob(values("layer_expect", layers))
        return {
            "selftest_data.bin": data,
            "selftest_data.S": incbin_source(self.banner, "selftest_data.S: the self-test's sample and the "
                                             "emulator's values of the checked tensors", "selftest_data.bin",
                                             dtable).encode(),
            "selftest_layers.bin": layer_data,
            "selftest_layers.S": incbin_source(self.banner, layers_title(every, layers), "selftest_layers.bin",
                                               ltable).encode(),
            "selftest_data.c": self.selftest_data_c(dtable[:len(inputs)],
                                                    dtable[len(dtable) - len(warmup):] if warmup else []).encode(),
            "selftest_checks.inc": self.checks_inc(default, dtable[len(inputs):len(dtable) - len(warmup)], layers,
                                                   ltable).encode(),
        }

    def selftest_data_c(self, input_table, warmup_table=()) -> str:
        p, P = self.p, self.P
        lines = self.c_banner() + [
            "/* selftest_data.c: the self-test's sample input (selftest_data.bin, pulled in by selftest_data.S). */",
            "#include <stdint.h>", "", '#include "model.h"', ""]
        types = [DTYPE_CTYPE[self.plan.tensors[tid].dtype] for tid in self.plan.inputs]
        lines += [f"extern const {ctype} {sym}[{size // (8 if ctype == 'int64_t' else 4)}];"
                  for ctype, (sym, _, size) in zip(types, input_table)]
        lines += ["", f"const float *const {p}_sample_inputs[{P}_NUM_INPUTS] = {{"]
        lines += [f"    {sym}," if ctype == "float" else f"    (const float *)(const void *){sym},"
                  for ctype, (sym, _, _) in zip(types, input_table)] + ["};", ""]
        if self.stream is not None:
            lines += self.warmup_c(types, warmup_table)
        return "\n".join(lines)

    def warmup_c(self, types: list[str], table) -> list[str]:
        """The warm-up steps' inputs of a streaming model's self-test (0 for a state input: carried)."""
        p, P = self.p, self.P
        states, entries = self.stream.state_inputs(), iter(table)
        lines = [f"/* The {len(self.stream.warmup)} steps of the stream before the checked one. */"]
        rows = []
        for _ in self.stream.warmup:
            row = []
            for i, ctype in enumerate(types):
                if i in states:
                    row.append("0")
                    continue
                sym, _, size = next(entries)
                lines.append(f"extern const {ctype} {sym}[{size // (8 if ctype == 'int64_t' else 4)}];")
                row.append(sym if ctype == "float" else f"(const float *)(const void *){sym}")
            rows.append("    {" + ", ".join(row) + "},")
        lines += ["", f"const float *const {p}_warmup_inputs[][{P}_NUM_INPUTS] = {{"]
        lines += rows or ["    {0},"]
        lines += ["};", f"const size_t {p}_warmup_steps = {len(self.stream.warmup)};", ""]
        return lines

    def checks_inc(self, default: list[Check], dtable, layers: list[Check], ltable) -> str:
        """`{p}_checks`: per checked tensor its step, name, bytes (rows row_stride apart), the emulator's
        values, the tolerance (largest difference, differing values allowed) and whether it is a model output."""
        lines = self.c_banner() + [
            "/* selftest_checks.inc: what the self-test compares after which step (included by model.c",
            " * under O2G_SELFTEST; CHECK_LAYERS=1 selects the table of every step). */"]
        outputs = set(self.plan.outputs)
        for flag, checks, table in (("#if O2G_CHECK_LAYERS", layers, ltable), ("#else", default, dtable)):
            lines += [flag] + [f"extern const int8_t {sym}[{size}];" for sym, _, size in table]
            lines.append(f"const struct o2g_check {self.p}_checks[] = {{")
            for check, (sym, _, _) in zip(checks, table):
                t = self.plan.tensors[check.tensor]
                check_dtype(self.plan, check)
                width = t.shape[-1] if t.shape else 1
                rows = int(np.prod(t.shape, dtype=np.int64)) // max(width, 1)
                tol = check.tolerance
                data = self.ptr(t.id) if t.dtype == "int8" else f"(int8_t *)(void *){self.ptr(t.id)}"
                lines.append(f"    {{{check.step}, {c_string(t.onnx_name or t.id)}, {data}, {rows}, {width}, "
                             f"{self.plan.row_stride(t.id) if t.shape else 1}, {sym}, {tol.lsb}, "
                             f"{tol.allowed(rows * width)}, {int(check.tensor in outputs)}, "
                             f"{np.dtype(t.dtype).itemsize}}},")
            lines.append("};")
        lines += ["#endif", f"const size_t {self.p}_num_checks = sizeof {self.p}_checks / sizeof {self.p}_checks[0];",
                  ""]
        return "\n".join(lines)


def check_dtype(plan, check: Check) -> np.dtype:
    """The element type of a checked tensor: int8, or float32 (a model output kept float), which selftest.c
    compares for equality only: its kernel must state no tolerance against the emulator."""
    t = plan.tensors[check.tensor]
    if t.dtype not in ("int8", "float32"):
        raise UnsupportedError(f"C back end: self-test check of {t.dtype} tensor {t.id}")
    if t.dtype == "float32" and check.tolerance != EXACT:
        raise UnsupportedError(f"C back end: float32 tensor {t.id} checked with a tolerance ({check.tolerance.why})")
    return np.dtype(t.dtype)


def c_bool(v) -> str:
    return "true" if v else "false"


def sample_input(plan: Plan, tid: str, sample: dict[str, np.ndarray]) -> np.ndarray:
    """A model input of the self-test's sample, flat, in the input's own type (float32, or integer ids)."""
    t = plan.tensors[tid]
    return np.asarray(sample[t.onnx_name], np.dtype(t.dtype)).reshape(-1)
