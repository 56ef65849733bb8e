"""model.mlir: the Plan as one buddy-mlir module (docs/mlir.md).

* `func.func @forward(float inputs in ONNX layout..., int8 (or float32) outputs in ONNX layout...)`, static
  shapes; the outputs are written in place (out-parameters), nothing is returned.
* Gemmini steps become `gemmini.tile_matmul` / `gemmini.tile_conv` in generic form, with the layouts
  buddy-mlir's lowering reads (spec/buddy-mlir.md §1.3): dense identity-layout memrefs, conv input NHWC,
  weights [KH*KW*IC][OC], bias [OC] i32 (zeros when absent), output [N*OH*OW][OC]; dims as
  `arith.constant : i64` right before the op; multipliers as `f32` attributes.
* Everything else (quantize, resadd, global average, CPU ops, convs the lowering would get wrong) is a
  `func.call` into the C runtime (emit/mlir_runtime.py), with unranked memref arguments.
* Views between shapes are `memref.reshape` of the whole buffer (offset 0), lowered by
  finalize-memref-to-llvm, which -lower-gemmini includes; no subviews, no strided layouts.
* Each step is a private function `@step_<k>` that @forward calls with the buffers it touches: the
  lowering gives every runtime call's memref descriptors a stack slot of the function making the call, so
  with every step inline @forward's frame grew with the model (136 KB for a 400-step text recognizer, beyond
  gemmini-rocc-tests' 128 KB bare-metal stack); per step, a frame holds one step's descriptors.
* Weights are `memref.global "private" constant`, hex `dense` data, 64-byte aligned, printed after @forward.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from ..errors import UnsupportedError
from ..normalizer import SOFTMAX
from ..plan import Conv, Matmul, Plan, Step
from ..slices import densify
from .banner import banner_lines
from .checks import Check, layer_checks, selftest_checks
from .names import mlir_comment
from .mlir_runtime import Arg, Array, RuntimeCall, runtime_calls
from .mlir_text import (NUMPY_TYPES, SsaNames, bool_attr, dense, element_type, f32_attr,
                        f32_literal, i64_attr, literal, memref_type, shape_tag, unranked_type)

ALIGN = 64
BUDDY_BANK_NUM = 4       # Transform.h constants of buddy-mlir: changing them needs a rebuild of buddy-opt
BUDDY_MAX_BYTES = 64
ENTRY = "forward"
_VALUE = re.compile(r"%[A-Za-z0-9_.$-]+")
_DEFINITION = re.compile(r"\s*(%[A-Za-z0-9_.$-]+) = ")
C_IFACE = "attributes {llvm.emit_c_interface}"


def lower_gemmini_options(config) -> str:
    """The -lower-gemmini options matching `config` (elem_t/acc_t keep their int8/int32 defaults)."""
    return f"dim={config.dim} acc_rows={config.acc_rows} bank_rows={config.bank_rows} addr_len=32"


def check_config(config) -> None:
    problems = []
    if config.sp_banks != BUDDY_BANK_NUM:
        problems.append(f"{config.sp_banks} scratchpad banks (buddy-mlir hard-codes {BUDDY_BANK_NUM})")
    if config.dma_max_bytes != BUDDY_MAX_BYTES:
        problems.append(f"dma_max_bytes {config.dma_max_bytes} (buddy-mlir hard-codes {BUDDY_MAX_BYTES})")
    if problems:
        raise UnsupportedError(f"--emit mlir: config {config.name} has {' and '.join(problems)}; "
                               "use a 4-bank, 64-byte-DMA config or leave mlir out of --emit")


def conv_needs_runtime(step: Conv) -> str:
    """Why `gemmini.tile_conv` would compute this conv wrongly ('' when it is fine)."""
    if step.heuristic_hazard:
        return f"{step.heuristic_hazard}; tile_conv's lowering tiles as gemmini.h does"
    rect = step.in_row_dim != step.in_col_dim or step.out_row_dim != step.out_col_dim
    if rect and step.pool_stride:
        return "non-square map with a fused pool: buddy-mlir's rect-conv path drops pooling"
    if step.input_dilation != 1 or step.kernel_dilation != 1:
        return "dilation: tile_conv's lowering handles dilation 1 only"
    return ""


def emit_mlir(plan: Plan, command: str = "", check_steps: bool = False) -> str:
    """The module text. The tile ops take dense memrefs, so channel slices become copies here.

    `check_steps`: after every step, `func.call @o2g_rt_check(k, tensor)` for each check k of
    `step_checks(plan)`, so a test harness compares each step's output with the emulator's and puts the
    emulator's values in place (no difference propagates); not for deployment."""
    check_config(plan.config)
    dense = densify(plan)
    return _Module(dense, step_checks(plan) if check_steps else []).text(command)


def step_checks(plan: Plan, bounded: bool = True) -> list[Check]:
    """The checks of a module emitted with check_steps, in hook order: every step's outputs (steps and
    tensor ids of the densified plan, whose expected values the harness needs), within the
    `layer_check_bytes` limit unless not `bounded` (checks.layer_checks). The hooks pass int8 memrefs: a
    float32 model output is checked where @forward returns it."""
    dense = densify(plan)
    every = [c for c in selftest_checks(dense, every_step=True) if dense.tensors[c.tensor].dtype == "int8"]
    return layer_checks(dense, every) if bounded else every


def write_mlir(plan: Plan, path: "str | Path", command: str = "") -> None:
    Path(path).write_text(emit_mlir(plan, command))


class _Module:
    """Module-level symbols (runtime declarations, globals) collected while @forward is printed."""

    def __init__(self, plan: Plan, checks: list[Check]):
        self.plan, self.checks = plan, checks
        self.decls: dict[str, tuple[str, ...]] = {}
        self.globals: dict[str, str] = {}              # symbol -> full line
        self.global_data: dict[str, np.ndarray] = {}
        self.const_type: dict[str, tuple] = {}        # constant id -> (symbol, shape) of its global
        self.functions: list[list[str]] = []           # the step functions, printed after @forward

    def declare(self, sym: str, types: tuple[str, ...]) -> None:
        if self.decls.setdefault(sym, types) != types:
            raise UnsupportedError(f"--emit mlir: runtime function @{sym} is called with two signatures "
                                   f"({', '.join(self.decls[sym])}) and ({', '.join(types)}); give it an "
                                   "explicit ABI in emit/mlir_runtime.py")

    def global_for(self, key: str, shape: tuple[int, ...], elem: str, data: np.ndarray, note: str = "") -> str:
        """The symbol of a private constant global (created on first request)."""
        sym = key
        if sym not in self.globals:
            comment = f"  // {mlir_comment(note)}" if note else ""
            self.globals[sym] = (f'memref.global "private" constant @{sym} : {memref_type(shape, elem)} = '
                                 f"{dense(data)} {{alignment = {ALIGN} : i64}}{comment}")
            self.global_data[sym] = data
        elif not np.array_equal(self.global_data[sym], data):
            raise AssertionError(f"global @{sym} requested with two contents")
        return sym

    def text(self, command: str) -> str:
        body = _Forward(self.plan, self).lines()
        plan, cfg = self.plan, self.plan.config
        out = [f"// {mlir_comment(line)}" for line in banner_lines(plan, command)]
        out += [
            "// buddy-mlir gemmini-dialect module (gemmini ops in generic form); ABI and pipeline: docs/mlir.md",
            f"//   buddy-opt model.mlir -llvm-request-c-wrappers -lower-gemmini=\"{lower_gemmini_options(cfg)}\"",
            "//   | buddy-translate -buddy-to-llvmir",
            "//   | llc -O2 -mtriple=riscv64 -mattr=+m,+a,+f,+d,+c -target-abi=lp64d -code-model=medium -filetype=obj "
            "-o model.o",
            "//   (Buddy's LLVM fork: -mattr=...,+xgemmini; an upstream llc: link mlir/o2g_gemmini_intrinsics.c)",
            "//   then link model.o with onnx2gemmini/runtime/o2g_mlir_abi.c (+ gemmini.h, the C runtime) and a main;",
            "//   make -C OUT/mlir BUDDY_OPT=... BUDDY_TRANSLATE=... LLC=... GEMMINI=... does it all, with a self-test",
            f"// @{ENTRY}: float inputs (integer ids: i64/i32; ONNX layout), then int8 outputs (float32 where kept "
            "float; ONNX layout, written in place)",
        ]
        for tid in plan.inputs:
            t = plan.tensors[tid]
            out.append(f"//   input  %{tid}: '{mlir_comment(t.onnx_name)}' {shape_tag(t.shape)} {t.dtype}")
        for tid in plan.outputs:
            t = plan.tensors[tid]
            scale = (f"scale {f32_literal(t.scale or 1.0)}" if t.scale_axis is None else
                     f"scales per index along axis {t.scale_axis}: "
                     + ", ".join(f"{n} x {f32_literal(v)}" for n, v in t.scale_runs()))
            if t.dtype == "float32":
                scale = "real values"
            out.append(f"//   output %{tid}: '{mlir_comment(t.onnx_name)}' {shape_tag(t.shape)} {t.dtype}, {scale}")
        out.append("module {")
        for sym, types in sorted(self.decls.items()):
            out.append(f"  func.func private @{sym}({', '.join(types)}) {C_IFACE}")
        out += ["  " + line if line else "" for line in body]
        for function in self.functions:
            out += [""] + ["  " + line if line else "" for line in function]
        order = {"shape": 0, "zero": 1}
        syms = sorted(self.globals, key=lambda sym: order.get(sym.split(".")[0], 2))  # stable within a kind
        out += ["  " + self.globals[sym] for sym in syms]
        out.append("}")
        return "\n".join(out) + "\n"


class _Forward:
    """The body of @forward: buffers, views and one printer per step kind."""

    def __init__(self, plan: Plan, module: _Module):
        self.plan, self.module = plan, module
        self.names = SsaNames()
        self.body: list[str] = []
        self.storage: dict[str, str] = {}        # base tensor id -> SSA value of its whole buffer
        self.allocated: set[str] = set()
        self.views: dict[tuple, str] = {}        # (base id | @global, shape) -> SSA value
        self.types: dict[str, str] = {}          # @forward's memref values -> their types
        self.local: list[str] | None = None     # the lines of the step function being printed

    # --- values -----------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        """A line of @forward: buffers, views and weights (what several steps share)."""
        self.body.append("  " + line)

    def emit_local(self, line: str) -> None:
        """A line of the current step's function: its constants, casts, Gemmini op and runtime calls."""
        self.local.append("  " + line)

    def define(self, value: str, ty: str) -> str:
        self.types[value] = ty
        return value

    def elem_of(self, tid: str) -> str:
        if tid in self.plan.constants:
            return element_type(self.plan.constants[tid].dtype)
        return element_type(self.plan.base(tid).dtype)

    def reshape(self, key, source: str, src_shape, shape, elem: str, hint: str) -> str:
        """A dense view of `source` with another shape: memref.reshape of the whole buffer."""
        if tuple(src_shape) == tuple(shape):
            return source
        if (key, shape) not in self.views:
            shp = self.module.global_for(f"shape.{shape_tag(shape)}", (len(shape),), "i64",
                                         np.asarray(shape, np.int64))
            sv = self.names.fresh(f"shape.{shape_tag(shape)}")
            v = self.names.fresh(f"{hint}.{shape_tag(shape)}")
            self.emit(f"{sv} = memref.get_global @{shp} : {memref_type((len(shape),), 'i64')}")
            self.emit(f"{v} = memref.reshape {source}({sv}) : ({memref_type(src_shape, elem)}, "
                      f"{memref_type((len(shape),), 'i64')}) -> {memref_type(shape, elem)}")
            self.views[(key, shape)] = self.define(v, memref_type(shape, elem))
        return self.views[(key, shape)]

    def tensor(self, tid: str, shape: tuple[int, ...], write: bool = False) -> str:
        """The SSA memref of an activation's bytes seen with `shape` (allocated on first write)."""
        base = self.plan.base(tid)
        if int(np.prod(shape)) != int(np.prod(base.shape)):
            raise AssertionError(f"tensor {tid}: {shape_tag(shape)} is not a view of {shape_tag(base.shape)}")
        elem = element_type(base.dtype)
        if base.id not in self.storage:
            if not write:
                raise AssertionError(f"tensor {tid} is read before any step writes it")
            v = self.names.fresh(base.id)
            self.emit(f"{v} = memref.alloc() {{alignment = {ALIGN} : i64}} : {memref_type(base.shape, elem)}")
            self.storage[base.id] = self.define(v, memref_type(base.shape, elem))
            self.allocated.add(base.id)
        return self.reshape(base.id, self.storage[base.id], base.shape, tuple(shape), elem, base.id)

    def constant(self, cid: str | None, shape: tuple[int, ...], elem: str = "i32") -> str:
        """A weight or bias global seen with `shape`; `cid=None` is an all-zero bias."""
        if cid is None:
            sym = self.module.global_for(f"zero.{elem}.{shape_tag(shape)}", shape, elem,
                                         np.zeros(shape, NUMPY_TYPES[elem]), "no bias")
            gshape = shape
        else:
            data = self.plan.constants[cid]
            elem = element_type(data.dtype)
            if cid not in self.module.const_type:     # the global takes the shape of its first use
                gshape = tuple(shape) if int(np.prod(shape)) == data.size else data.shape
                sym = self.module.global_for(f"c.{cid}", gshape, elem, data.reshape(gshape),
                                             f"{data.dtype} {shape_tag(gshape)}")
                self.module.const_type[cid] = (sym, gshape)
            sym, gshape = self.module.const_type[cid]
            if int(np.prod(shape)) != data.size:
                raise AssertionError(f"constant {cid} has {data.size} elements, used as {shape_tag(shape)}")
        key = "@" + sym
        if (key, gshape) not in self.views:
            v = self.names.fresh(sym)
            self.emit(f"{v} = memref.get_global @{sym} : {memref_type(gshape, elem)}")
            self.views[(key, gshape)] = self.define(v, memref_type(gshape, elem))
        return self.reshape(key, self.views[(key, gshape)], gshape, tuple(shape), elem, sym)

    def repeated_bias(self, cid: str | None, cols: int) -> str:
        """A repeating bias as DIM identical rows. Buddy's tile_matmul lowering loads D with D's own row stride
        even when the bias repeats (gemmini.h loads it with stride 0), so each DIM-row block reads DIM rows of
        D: a one-row bias would give the bias to the block's first row only (docs/mlir.md, Buddy behaviours)."""
        rows = self.plan.config.dim
        if cid is None:
            return self.constant(None, (rows, cols))
        data = np.tile(self.plan.constants[cid].reshape(1, cols), (rows, 1))
        sym = self.module.global_for(f"c.{cid}.rows{rows}", data.shape, element_type(data.dtype), data,
                                     f"{data.dtype} bias of {cols}, repeated on {rows} rows for Buddy's lowering")
        key = "@" + sym
        if (key, data.shape) not in self.views:
            v = self.names.fresh(sym)
            ty = memref_type(data.shape, element_type(data.dtype))
            self.emit(f"{v} = memref.get_global @{sym} : {ty}")
            self.views[(key, data.shape)] = self.define(v, ty)
        return self.views[(key, data.shape)]

    def value(self, tid: str | None, shape: tuple[int, ...]) -> str:
        """A step operand read with `shape`: a constant, an activation, or (None) a zero bias."""
        if tid is None or tid in self.plan.constants:
            return self.constant(tid, shape)
        return self.tensor(tid, shape)

    def i64(self, value: int, hint: str) -> str:
        v = self.names.fresh(hint)
        (self.emit_local if self.local is not None else self.emit)(f"{v} = arith.constant {int(value)} : i64")
        return v

    # --- the function -----------------------------------------------------------------------------
    def lines(self) -> list[str]:
        plan = self.plan
        params, copies = [], []
        for tid in plan.inputs:
            v = self.names.fresh(tid)
            ty = memref_type(plan.tensors[tid].shape, element_type(plan.tensors[tid].dtype))
            params.append(f"{v}: {ty}")
            self.storage[tid] = self.define(v, ty)
        claimed = {}
        for tid in plan.outputs:
            t, base = plan.tensors[tid], plan.base(tid)
            v = self.define(self.names.fresh(tid), memref_type(t.shape, element_type(t.dtype)))
            params.append(f"{v}: {memref_type(t.shape, element_type(t.dtype))}")
            if base.id in claimed or base.id in self.storage:
                copies.append((tid, v))
            else:
                claimed[base.id] = (v, t.shape)
        for base_id, (v, shape) in claimed.items():
            base = plan.tensors[base_id]
            self.storage[base_id] = self.reshape(base_id, v, shape, base.shape, element_type(base.dtype), base_id)
        c0 = self.i64(0, "c0")
        self.emit(f'"gemmini.flush"({c0}) : (i64) -> ()')
        last = self._last_uses()
        for index, step in enumerate(plan.steps):
            self.body.append("")
            self._outlined(index, step)
            for base_id in last.get(index, ()):
                if base_id in self.allocated:
                    base = plan.tensors[base_id]
                    self.emit(f"memref.dealloc {self.storage[base_id]} : "
                              f"{memref_type(base.shape, element_type(base.dtype))}")
        for tid, v in copies:
            t = plan.tensors[tid]
            ty = memref_type(t.shape, element_type(t.dtype))
            self.emit(f"memref.copy {self.tensor(tid, t.shape)}, {v} : {ty} to {ty}")
        head = f"func.func @{ENTRY}({', '.join(params)}) {C_IFACE} {{"
        return [head] + self.body + ["  return", "}"]

    def _outlined(self, index: int, step: Step) -> None:
        """Step `index` as the private function @step_<index>, called by @forward with the buffers it uses."""
        self.local, start = [], len(self.body)
        self._step(index, step)
        self._checks(index)
        lines, self.local = self.local, None
        defined = {m.group(1) for m in (_DEFINITION.match(line) for line in lines) if m}
        used = list(dict.fromkeys(v for line in lines for v in _VALUE.findall(line.split("//")[0])))
        params = [v for v in used if v not in defined]
        missing = [v for v in params if v not in self.types]
        if missing:
            raise AssertionError(f"step {index} uses {missing} of @forward, which are not memrefs")
        types = ", ".join(self.types[v] for v in params)
        name = f"step_{index}"
        comment = [line for line in lines if line.strip().startswith("// [")]
        self.body[start:start] = comment
        self.emit(f"func.call @{name}({', '.join(params)}) : ({types}) -> ()")
        head = f"func.func private @{name}({', '.join(f'{v}: {self.types[v]}' for v in params)}) {{"
        self.module.functions.append([head] + [line for line in lines if line not in comment] +
                                     ["  return", "}"])

    def _checks(self, index: int) -> None:
        """The test hooks after step `index` (emit_mlir's check_steps)."""
        for k, check in enumerate(self.module.checks):
            if check.step != index:
                continue
            t = self.plan.tensors[check.tensor]
            v = self.tensor(t.id, t.shape)
            u = self.names.fresh("check.u")
            self.emit_local(f"{u} = memref.cast {v} : {memref_type(t.shape, 'i8')} to {unranked_type('i8')}")
            self.module.declare("o2g_rt_check", ("i64", unranked_type("i8")))
            self.emit_local(f"func.call @o2g_rt_check({self.i64(k, 'check')}, {u}) : (i64, {unranked_type('i8')}) -> ()")

    def _last_uses(self) -> dict[int, list[str]]:
        last: dict[str, int] = {}
        for index, step in enumerate(self.plan.steps):
            for tid in step.reads() + step.writes():
                if tid in self.plan.tensors:
                    last[self.plan.base(tid).id] = index
        by_step: dict[int, list[str]] = {}
        for base_id, index in last.items():
            by_step.setdefault(index, []).append(base_id)
        return by_step

    def _step(self, index: int, step: Step) -> None:
        what = f"[{index}] {step.kind} '{mlir_comment(step.node)}'"
        if isinstance(step, Matmul):
            if step.heuristic_hazard:
                raise UnsupportedError(f"--emit mlir: matmul '{step.node}': {step.heuristic_hazard}, and "
                                       "tile_matmul's lowering tiles as gemmini.h does")
            self.emit_local(f"// {what}: gemmini.tile_matmul")
            return self._matmul(step)
        if isinstance(step, Conv) and not conv_needs_runtime(step):
            self.emit_local(f"// {what}: gemmini.tile_conv")
            return self._conv(step)
        calls = runtime_calls(step, self.plan)
        why = getattr(step, "reason", "") or (conv_needs_runtime(step) if isinstance(step, Conv) else "")
        self.emit_local(f"// {what}: @{calls[0].symbol}" + (f" ({mlir_comment(why)})" if why else ""))
        for call in calls:
            self._call(index, step, call)

    def _tiles(self, step) -> None:
        if step.tiles:
            tiles = " ".join(f"{k}={v}" for k, v in step.tiles.items())
            self.emit_local(f"// tiles chosen by onnx2gemmini: {mlir_comment(tiles)} (the tile ops take none; "
                      "-lower-gemmini tiles by its own heuristic)")

    def _matmul(self, s: Matmul) -> None:
        dense_strides = (s.stride_A, s.stride_B, s.stride_C) == (s.K, s.J, s.J) and (not s.D or s.stride_D == s.J)
        if not dense_strides:
            raise UnsupportedError(f"--emit mlir: matmul '{s.node}' uses row strides; tile_matmul reads dense "
                                   "rows only")
        d_shape = (self.plan.config.dim, s.J) if s.repeating_bias else (s.I, s.J)
        a = self.value(s.A, (s.I, s.K))
        b = self.value(s.B, (s.K, s.J))    # weights, or an activation (batched attention matmuls)
        d = self.repeated_bias(s.D, s.J) if s.repeating_bias else self.value(s.D, d_shape)
        c = self.tensor(s.C, (s.I, s.J), write=True)
        types = (memref_type((s.I, s.K), self.elem_of(s.A)), memref_type((s.K, s.J), self.elem_of(s.B)),
                 memref_type((s.I, s.J), self.elem_of(s.C)), memref_type(d_shape, "i32"))
        attrs = (f"accScale = {f32_attr(s.scale)}, act = {i64_attr(s.act)}, dataflow = {i64_attr(1)}, "
                 + ("fullC = true, " if s.full_C else "") + f"repeatingBias = {bool_attr(s.repeating_bias)}")
        if s.act == SOFTMAX:  # Gemmini's normalizer: its constants' scale, and the operands' mvin scale
            attrs += (f", bertScale = {f32_attr(s.bert_scale)}, aScaleFactor = {f32_attr(s.A_scale_factor)}, "
                      f"bScaleFactor = {f32_attr(s.B_scale_factor)}")
        self._tiles(s)
        self.emit_local(f'"gemmini.tile_matmul"({a}, {b}, {c}, {d}) {{{attrs}}} : ({", ".join(types)}) -> ()')
        if s.act == SOFTMAX:  # Gemmini's functional model keeps SOFTMAX through a later config_st with act 0
            zero = self.i64(0, "c0")
            self.emit_local(f'"gemmini.config_st"({zero}) {{activation = {i64_attr(1)}, scale = {f32_attr(1.0)}}} '
                            ": (i64) -> ()")

    def _conv(self, s: Conv) -> None:
        poh, pow_ = s.pool_out_dims
        in_shape = (s.batch_size, s.in_row_dim, s.in_col_dim, s.in_channels)
        w_shape = (s.kernel_dim * s.kernel_dim * s.in_channels, s.out_channels)
        out_shape = (s.batch_size * poh * pow_, s.out_channels)
        x = self.value(s.input, in_shape)
        w = self.value(s.weights, w_shape)
        b = self.value(s.bias, (s.out_channels,))
        y = self.tensor(s.output, out_shape, write=True)
        hint = self.plan.base(s.output).id
        dims = [self.i64(s.out_row_dim, f"{hint}.out_rows"), self.i64(s.out_col_dim, f"{hint}.out_cols"),
                self.i64(s.kernel_dim, f"{hint}.kernel")]
        types = (memref_type(in_shape, "i8"), memref_type(w_shape, "i8"), memref_type((s.out_channels,), "i32"),
                 memref_type(out_shape, "i8"), "i64", "i64", "i64")
        attrs = (f"act = {i64_attr(s.act)}, padding = {i64_attr(s.padding)}, "
                 f"poolPadding = {i64_attr(s.pool_padding)}, poolSize = {i64_attr(s.pool_size)}, "
                 f"poolStride = {i64_attr(s.pool_stride)}, scale = {f32_attr(s.scale)}, "
                 f"stride = {i64_attr(s.stride)}")
        self._tiles(s)
        self.emit_local(f'"gemmini.tile_conv"({x}, {w}, {b}, {y}, {", ".join(dims)}) {{{attrs}}} : '
                  f'({", ".join(types)}) -> ()')

    def _call(self, index: int, step: Step, call: RuntimeCall) -> None:
        writes = set(step.writes())
        operands, types = [], []
        for op in call.operands:
            if isinstance(op, Arg):
                v, elem = self._arg(op, op.tensor in writes)
                u = self.names.fresh(f"{op.name}.u")
                self.emit_local(f"{u} = memref.cast {v} : {memref_type(op.shape, elem)} to {unranked_type(elem)}")
                operands.append(u)
                types.append(unranked_type(elem))
            elif isinstance(op, Array):
                operands.append(self._array(op))
                types.append(unranked_type(op.type))
            else:
                v = self.names.fresh(op.name)
                self.emit_local(f"{v} = arith.constant {literal(op.value, op.type)} : {op.type}")
                operands.append(v)
                types.append(op.type)
        self.module.declare(call.symbol, tuple(types))
        self.emit_local(f"func.call @{call.symbol}({', '.join(operands)}) {{o2g.step = {index} : i64}} : "
                  f"({', '.join(types)}) -> ()")

    def _array(self, param: Array) -> str:
        """A constant parameter list as an unranked memref (one global per distinct list)."""
        data = np.asarray(param.values, NUMPY_TYPES[param.type])
        if param.type == "i64" and len(param.values) <= 8:
            tag = "_".join(str(v).replace("-", "m") for v in param.values) or "empty"
        else:
            tag = hashlib.sha256(data.tobytes()).hexdigest()[:16]
        shape = (len(data),)
        sym = self.module.global_for(f"{param.type}s.{tag}", shape, param.type, data)
        v = self.names.fresh(param.name)
        u = self.names.fresh(f"{param.name}.u")
        self.emit_local(f"{v} = memref.get_global @{sym} : {memref_type(shape, param.type)}")
        self.emit_local(f"{u} = memref.cast {v} : {memref_type(shape, param.type)} to {unranked_type(param.type)}")
        return u

    def _arg(self, arg: Arg, write: bool) -> tuple[str, str]:
        if arg.tensor is None:
            return self.constant(None, arg.shape, arg.elem), arg.elem
        if write:
            return self.tensor(arg.tensor, arg.shape, write=True), self.elem_of(arg.tensor)
        return self.value(arg.tensor, arg.shape), self.elem_of(arg.tensor)
