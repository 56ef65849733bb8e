"""A small interpreter and a checker for the MLIR that emit/mlir.py writes, on top of a real MLIR parser.

The module is parsed and verified by MLIR itself (torch_mlir.ir, unregistered dialects allowed); the
operations are then walked generically (op.name, operands, attributes) and executed with numpy:

* `gemmini.tile_matmul` as Buddy-MLIR's lowering turns it into Gemmini commands (its tile sizes, config words
  and loop_ws calls, transcribed from its source) and as libgemmini's loop_ws then computes (gemmini_lowering.py):
  with `repeatingBias` D is still read with its own row stride, DIM rows per block, so output row i gets D's
  row i mod DIM and a D with fewer rows is read past its end (gemmini.h would give every row D's row 0);
  `gemmini.tile_conv` with the semantics of spec/buddy-mlir.md §1.3, computed by onnx2gemmini.kernels;
* `func.call @o2g_rt_*` of a CPU kernel: the plan step it belongs to (its `o2g.step` attribute) is run
  with the CPU-kernel table's NumPy semantics (cpu/), after checking that the call passes exactly the
  arguments the table prescribes (symbol, scalars, lists, memref shapes and element types); the Gemmini
  calls without a dialect op run Python models of gemmini.h's functions; `@o2g_rt_check` (emit_mlir's
  check_steps) hands a step's output to the test's `check` callback;
* memref.alloc / dealloc / get_global / reshape / cast / copy / collapse_shape / expand_shape, arith.constant.

Buffers are numpy arrays; views share memory, so a reshape that would not alias in the lowered code
would not alias here either. Fresh allocations are filled with garbage and constants are read-only;
use after dealloc is an error.

`check_gemmini_ops` checks every gemmini op against buddy-mlir's op definitions (Gemmini.td: operand
count, memref ranks, i64 operands, attribute kinds) and its lowering's requirements (element types,
static dense identity layouts, tile_conv dims from `arith.constant : i64` in the same block, shape
consistency).
"""
from __future__ import annotations

import numpy as np
from torch_mlir import ir

from onnx2gemmini.emit.mlir_runtime import Arg, Array, cpu_call
from onnx2gemmini import kernels
from tests.emit import gemmini_lowering

GARBAGE = 0x5B  # fills fresh allocations: a buffer read before it is written shows up as a mismatch

DTYPES = {"i8": np.int8, "i32": np.int32, "i64": np.int64, "f32": np.float32}

F32, I64, BOOL = "f32", "i64", "bool"
# Gemmini.td: operand kinds ("memref<rank>" or "i64") and attribute kinds of the ops we may emit.
OP_DEFS = {
    "gemmini.flush": (("i64",), {}),
    "gemmini.tile_matmul": (("memref2",) * 4, {
        "aScaleFactor": F32, "bScaleFactor": F32, "dScaleFactor": F32, "act": I64, "accScale": F32,
        "bertScale": F32, "repeatingBias": BOOL, "aTranspose": BOOL, "bTranspose": BOOL, "fullC": BOOL,
        "lowD": BOOL, "weightA": I64, "dataflow": I64}),
    "gemmini.tile_conv": (("memref4", "memref2", "memref1", "memref2", "i64", "i64", "i64"), {
        "scale": F32, "stride": I64, "inputDilation": I64, "kernelDilation": I64, "padding": I64,
        "wrot180": BOOL, "transOutput1203": BOOL, "transInput3120": BOOL, "transWeight1203": BOOL,
        "transWeight0132": BOOL, "act": I64, "poolSize": I64, "poolStride": I64, "poolPadding": I64}),
}
DEFAULTS = {"aScaleFactor": 1.0, "bScaleFactor": 1.0, "dScaleFactor": 1.0, "act": 0, "accScale": 1.0,
            "bertScale": 0.0, "repeatingBias": False, "aTranspose": False, "bTranspose": False,
            "fullC": False, "lowD": False, "weightA": 0, "dataflow": 1, "scale": 1.0, "stride": 1,
            "inputDilation": 1, "kernelDilation": 1, "padding": 0, "wrot180": False,
            "transOutput1203": False, "transInput3120": False, "transWeight1203": False,
            "transWeight0132": False, "poolSize": 0, "poolStride": 0, "poolPadding": 0}


class InterpError(Exception):
    pass


def parse(text: str) -> ir.Module:
    """Parse and verify with MLIR's own parser (gemmini ops are unregistered, hence generic form)."""
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    module = ir.Module.parse(text, ctx)
    if not module.operation.verify():
        raise InterpError("module does not verify")
    return module


def ops_of(module: ir.Module):
    """Every operation, depth first."""
    def walk(op):
        yield op
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    yield from walk(inner.operation)
    for op in module.body.operations:
        yield from walk(op.operation)


def function(module: ir.Module, name: str):
    for op in module.body.operations:
        if op.operation.name == "func.func" and op.attributes["sym_name"].value == name:
            return op
    raise InterpError(f"no function @{name}")


def shape_of(t) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def attr_value(a):
    """A Python value for the attribute kinds we emit (and their kind name)."""
    if isinstance(a, ir.BoolAttr):
        return a.value, BOOL
    if isinstance(a, ir.IntegerAttr):
        return a.value, str(a.type)
    if isinstance(a, ir.FloatAttr):
        return a.value, str(a.type)
    return a, type(a).__name__


def gemmini_attrs(op) -> dict:
    values = dict(DEFAULTS)
    for name in op.attributes:
        values[name] = attr_value(op.attributes[name])[0]
    return values


def defining_op_name(value) -> str:
    owner = value.owner
    return "block-argument" if isinstance(owner, ir.Block) else owner.operation.name


# --- checker ------------------------------------------------------------------------------------------

def check_gemmini_ops(module: ir.Module, dim: int = 16) -> list[str]:
    """Problems buddy-opt would reject or mis-lower for a Gemmini of `dim` (empty: every gemmini op is fine)."""
    problems = []
    for op in ops_of(module):
        if not op.name.startswith("gemmini."):
            continue
        where = f"{op.name} #{len(problems)}"
        if op.name not in OP_DEFS:
            problems.append(f"{where}: not an op onnx2gemmini emits")
            continue
        kinds, attr_kinds = OP_DEFS[op.name]
        operands = list(op.operands)
        if len(operands) != len(kinds) or len(op.results):
            problems.append(f"{where}: {len(operands)} operands / {len(op.results)} results")
            continue
        for i, (v, kind) in enumerate(zip(operands, kinds)):
            t = v.type
            if kind == "i64":
                if str(t) != "i64":
                    problems.append(f"{where}: operand {i} is {t}, expected i64")
            elif not isinstance(t, ir.MemRefType) or t.rank != int(kind[-1]):
                problems.append(f"{where}: operand {i} is {t}, expected a rank-{kind[-1]} memref")
            elif not t.has_static_shape or "," in str(t):
                problems.append(f"{where}: operand {i} {t} is not a static identity-layout memref")
            elif defining_op_name(v) not in ("memref.alloc", "memref.get_global", "memref.reshape",
                                             "block-argument"):
                problems.append(f"{where}: operand {i} comes from {defining_op_name(v)} (offsets are ignored)")
        for name in op.attributes:
            if name not in attr_kinds:
                problems.append(f"{where}: unknown attribute {name}")
                continue
            kind = attr_value(op.attributes[name])[1]
            if kind != attr_kinds[name]:
                problems.append(f"{where}: attribute {name} is {kind}, expected {attr_kinds[name]}")
        if not problems:
            if op.name == "gemmini.tile_matmul":
                problems += [f"{where}: {p}" for p in _check_matmul(op, dim)]
            elif op.name == "gemmini.tile_conv":
                problems += [f"{where}: {p}" for p in _check_conv(op)]
    return problems


def _elem(v) -> str:
    return str(v.type.element_type)


def _check_matmul(op, dim: int = 16) -> list[str]:
    a, b, c, d = (shape_of(v.type) for v in op.operands)
    at = gemmini_attrs(op)
    problems = []
    c_elem = "i32" if at["fullC"] else "i8"  # fullC: C is acc_t, the raw accumulators
    if [_elem(v) for v in op.operands] != ["i8", "i8", c_elem, "i32"]:
        problems.append(f"element types {[_elem(v) for v in op.operands]}, expected i8 i8 {c_elem} i32")
    if b[0] != a[1] or c != (a[0], b[1]):
        problems.append(f"C = A.B shapes: A {a} B {b} C {c}")
    if at["repeatingBias"]:  # Buddy loads it with D's row stride (gemmini_lowering): DIM rows, one per block row
        if d[1] != b[1] or d[0] < min(a[0], dim):
            problems.append(f"D {d} for C {c} (repeatingBias=true): Buddy's lowering reads min(I, DIM) = "
                            f"{min(a[0], dim)} rows of D with its row stride")
    elif d != c:
        problems.append(f"D {d} for C {c} (repeatingBias=false)")
    if at["dataflow"] != 1 or at["act"] not in (0, 1):
        problems.append(f"dataflow {at['dataflow']} / act {at['act']}: WS with no activation or ReLU only")
    for flag in ("aTranspose", "bTranspose", "lowD"):
        if at[flag]:
            problems.append(f"{flag} set")
    if not at["accScale"] > 0:
        problems.append("accScale must be positive")
    return problems


def conv_geometry(op, dims) -> dict:
    """Shapes of a tile_conv as the lowering reads them."""
    x, w, bias, y = (shape_of(v.type) for v in list(op.operands)[:4])
    at = gemmini_attrs(op)
    orow, ocol, k = dims
    pool = at["poolSize"] > 0
    poh, pow_ = ((o + 2 * at["poolPadding"] - at["poolSize"]) // at["poolStride"] + 1 if pool else o
                 for o in (orow, ocol))
    return {"x": x, "w": w, "bias": bias, "y": y, "attrs": at, "orow": orow, "ocol": ocol, "k": k,
            "pool": pool, "pooled": (poh, pow_)}


def _check_conv(op) -> list[str]:
    operands = list(op.operands)
    problems = []
    dims = []
    for v in operands[4:]:
        owner = v.owner
        if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
            problems.append(f"dim operand comes from {defining_op_name(v)}, not arith.constant")
            return problems
        if owner.operation.block != op.block:
            problems.append("dim constant defined in another block")
        dims.append(owner.attributes["value"].value)
    g = conv_geometry(op, dims)
    x, w, bias, y, at, k = g["x"], g["w"], g["bias"], g["y"], g["attrs"], g["k"]
    if [_elem(v) for v in operands[:4]] != ["i8", "i8", "i32", "i8"]:
        problems.append(f"element types {[_elem(v) for v in operands[:4]]}, expected i8 i8 i32 i8")
    n, h, wd, ic = x
    oc = bias[0]
    if w != (k * k * ic, oc):
        problems.append(f"weights {w}, expected [K*K*IC, OC] = {(k * k * ic, oc)}")
    s, p = at["stride"], at["padding"]
    expect = ((h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1)
    if (g["orow"], g["ocol"]) != expect:
        problems.append(f"out dims {(g['orow'], g['ocol'])}, expected {expect} from the input, stride, padding")
    if y != (n * g["pooled"][0] * g["pooled"][1], oc):
        problems.append(f"output {y}, expected [N*OH*OW, OC] = {(n * g['pooled'][0] * g['pooled'][1], oc)}")
    if not 0 <= p < k or s < 1 or at["act"] not in (0, 1):
        problems.append(f"padding {p} / stride {s} / act {at['act']}")
    if at["inputDilation"] != 1 or at["kernelDilation"] != 1 or any(
            at[f] for f in ("wrot180", "transOutput1203", "transInput3120", "transWeight1203", "transWeight0132")):
        problems.append("dilation or transposition flags set")
    if g["pool"]:
        if not (1 <= at["poolStride"] <= 3 and at["poolSize"] <= 3 and 0 <= at["poolPadding"] <= 3):
            problems.append("pool fields beyond the 2-bit hardware fields")
        if h != wd or g["orow"] != g["ocol"]:
            problems.append("pooling on a non-square conv: the lowering's rect path drops it")
    if not at["scale"] > 0:
        problems.append("scale must be positive")
    return problems


# --- interpreter --------------------------------------------------------------------------------------

def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a, np.ndarray) and a.base is not None and isinstance(a.base, np.ndarray):
        a = a.base
    return a


class Interpreter:
    """Runs a module emitted for `plan` (the densified plan emit_mlir printed); `check(k, array)` receives
    the tensor of every `@o2g_rt_check` hook."""

    def __init__(self, module: ir.Module, plan, check=None):
        self.module, self.plan, self.check = module, plan, check
        self.pending: dict[int, list] = {}   # step index -> the calls seen so far (operands)
        self.globals = {}
        for op in module.body.operations:
            if op.operation.name == "memref.global":
                t = op.attributes["type"].value
                data = np.array(op.attributes["initial_value"]).reshape(shape_of(t))
                data = np.ascontiguousarray(data, DTYPES[str(t.element_type)])
                data.flags.writeable = False
                self.globals[op.attributes["sym_name"].value] = data
        self.freed: set[int] = set()   # ids of deallocated root arrays (all kept alive by the env)
        self.defined = {op.attributes["sym_name"].value for op in module.body.operations
                        if op.operation.name == "func.func" and len(op.regions[0].blocks)}

    def call(self, name: str, args: list) -> None:
        """A function of the module (a step's), on these operands: its memrefs are the caller's buffers."""
        block = function(self.module, name).regions[0].blocks[0]
        env = dict(zip(block.arguments, args))
        for op in block.operations:
            if self.step(op.operation, env) == "return":
                return
        raise InterpError(f"@{name} has no return")

    def run(self, inputs: list[np.ndarray], entry: str = "forward") -> list[np.ndarray]:
        """Call @entry with float inputs; returns the out-parameters (int8 outputs) it wrote."""
        func = function(self.module, entry)
        block = func.regions[0].blocks[0]
        args = list(block.arguments)
        if len(inputs) > len(args):
            raise InterpError("too many inputs")
        env = {}
        outputs = []
        self.freed = set()
        for i, a in enumerate(args):
            t = a.type
            if i < len(inputs):
                env[a] = np.ascontiguousarray(inputs[i], DTYPES[str(t.element_type)]).reshape(shape_of(t))
            else:
                env[a] = np.full(shape_of(t), GARBAGE, DTYPES[str(t.element_type)])
                outputs.append(env[a])
        for op in block.operations:
            if self.step(op.operation, env) == "return":
                return outputs
        raise InterpError("no return")

    def get(self, env, v):
        value = env[v]
        if isinstance(value, np.ndarray) and id(_root(value)) in self.freed:
            raise InterpError("use after memref.dealloc")
        return value

    def step(self, op, env):
        name = op.name
        args = [self.get(env, v) for v in op.operands]
        results = list(op.results)
        if name == "arith.constant":
            env[results[0]] = attr_value(op.attributes["value"])[0]
        elif name == "memref.get_global":
            env[results[0]] = self.globals[op.attributes["name"].value]
        elif name == "memref.alloc":
            t = results[0].type
            env[results[0]] = np.full(shape_of(t), GARBAGE, DTYPES[str(t.element_type)])
        elif name == "memref.dealloc":
            self.freed.add(id(_root(args[0])))
        elif name in ("memref.reshape", "memref.collapse_shape", "memref.expand_shape"):
            src = args[0]
            if not src.flags.c_contiguous:
                raise InterpError(f"{name} of a non-contiguous buffer")
            view = src.reshape(shape_of(results[0].type))
            if view.size and not np.shares_memory(view, src):
                raise InterpError(f"{name} copied")
            env[results[0]] = view
        elif name == "memref.cast":
            env[results[0]] = args[0]
        elif name == "memref.copy":
            args[1][...] = args[0]
        elif name == "gemmini.flush":
            pass
        elif name == "gemmini.tile_matmul":
            tile_matmul(op, *args, dim=self.plan.config.dim)
        elif name == "gemmini.tile_conv":
            tile_conv(op, *args)
        elif name == "func.call":
            callee = op.attributes["callee"].value
            if callee in GEMMINI_CALLS:
                GEMMINI_CALLS[callee](*args)
            elif callee in self.defined:
                self.call(callee, args)
            elif callee == "o2g_rt_check":
                if self.check is not None:
                    self.check(int(args[0]), args[1])
            elif "o2g.step" in op.attributes:
                self.cpu_call(callee, int(attr_value(op.attributes["o2g.step"])[0]), args)
            else:
                raise InterpError(f"no model of runtime function @{callee}")
        elif name == "func.return":
            return "return"
        else:
            raise InterpError(f"cannot interpret {name}")
        return None


    def cpu_call(self, callee: str, index: int, args: list) -> None:
        """One call of step `index`'s CPU kernel: the arguments must be what the table prescribes; after
        the step's last call, its outputs are computed by the table's NumPy kernel from the memrefs the
        calls passed."""
        step = self.plan.steps[index]
        want = [cpu_call(c) for c in step.params.calls(self.plan.call_site(step))]
        seen = self.pending.setdefault(index, [])
        if len(seen) >= len(want):
            raise InterpError(f"step {index} ({step.op}): more calls than its kernel makes")
        expected = want[len(seen)]
        if callee != expected.symbol or len(args) != len(expected.operands):
            raise InterpError(f"step {index}: @{callee} with {len(args)} operands, expected @{expected.symbol} "
                              f"with {len(expected.operands)}")
        buffers = {}
        for operand, value in zip(expected.operands, args):
            if isinstance(operand, Arg):
                if value.shape != tuple(operand.shape) or value.dtype != DTYPES[operand.elem]:
                    raise InterpError(f"step {index}: {operand.name} is {value.dtype}{list(value.shape)}, expected "
                                      f"{operand.elem}{list(operand.shape)}")
                if operand.tensor is not None:
                    buffers[operand.tensor] = value
            elif isinstance(operand, Array):
                if not np.array_equal(np.asarray(value).reshape(-1), np.asarray(operand.values, value.dtype)):
                    raise InterpError(f"step {index}: list {operand.name} differs from the table's")
            elif (int(value) != operand.value if operand.type == "i64" else
                  np.float32(value) != np.float32(operand.value)):
                raise InterpError(f"step {index}: {operand.name} = {value}, expected {operand.value}")
        seen.append(buffers)
        if len(seen) < len(want):
            return
        tensors = {k: v for call in self.pending.pop(index) for k, v in call.items()}
        outputs = step.params.run([tensors[t] for t in step.inputs], [tensors[t].shape for t in step.outputs])
        for tid, value in zip(step.outputs, outputs):
            tensors[tid][...] = np.asarray(value).reshape(tensors[tid].shape)


def tile_matmul(op, a, b, c, d, dim: int = 16):
    """What Buddy's lowering makes of the op (its tile sizes, config words and loop_ws calls), run by libgemmini's
    loop_ws semantics (gemmini_lowering.py)."""
    at = gemmini_attrs(op)
    if at["aScaleFactor"] != 1.0 or at["bScaleFactor"] != 1.0 or at["dScaleFactor"] != 1.0:
        raise InterpError("tile_matmul with an mvin scale: not modelled")
    cfg = gemmini_lowering.Config(dim=dim)
    program = gemmini_lowering.buddy_tile_matmul(a.shape, b.shape, c.shape, d.shape, at["repeatingBias"], at["act"],
                                                 at["accScale"], at["fullC"], cfg)
    try:
        c[...] = gemmini_lowering.execute(program, {"A": a, "B": b, "D": d}, c.shape, cfg)
    except gemmini_lowering.OutOfBounds as e:
        raise InterpError(f"tile_matmul under Buddy's lowering reads or writes outside an operand: {e}") from None


def tile_conv(op, x, w, bias, y, orow, ocol, k):
    g = conv_geometry(op, (orow, ocol, k))
    at = g["attrs"]
    pool = (at["poolSize"], at["poolStride"], at["poolPadding"]) if g["pool"] else None
    if pool and (x.shape[1] != x.shape[2] or orow != ocol):
        raise InterpError("tile_conv with pooling on the rect path: buddy-mlir emits nothing")
    out = kernels.conv(x, w, bias, at["stride"], at["padding"], k, (orow, ocol), at["scale"], at["act"] == 1, pool)
    y[...] = out.reshape(y.shape)


# --- the runtime calls ----------------------------------------------------------------------------------
# Gemmini calls without a dialect op: models of the hand-written wrappers (gemmini.h's *_auto functions).

def _resadd(a, b, c, a_scale, b_scale, c_scale, relu):
    if not a.ndim == b.ndim == c.ndim == 2:
        raise InterpError("resadd takes [I][J] matrices")
    c[...] = kernels.resadd(a, b, a_scale, b_scale, c_scale, bool(relu))


def _global_average(x, y):
    if x.ndim != 4 or x.shape[1] != x.shape[2] or y.shape != (x.shape[0], x.shape[3]):
        raise InterpError("global average takes [N][D][D][C] -> [N][C]")
    y[...] = kernels.global_average(x).reshape(y.shape)


def _conv(x, w, bias, y, orow, ocol, stride, input_dilation, kernel_dilation, padding, k, act, scale,
          pool_size, pool_stride, pool_padding, *tiles):
    if input_dilation != 1 or kernel_dilation != 1:
        raise InterpError("dilated conv: not modelled")
    pool = (pool_size, pool_stride, pool_padding) if pool_stride else None
    y[...] = kernels.conv(x, w, bias, stride, padding, k, (orow, ocol), scale, act == 1, pool).reshape(y.shape)


def _conv_dw(x, w, bias, y, orow, ocol, stride, padding, k, act, scale, pool_size, pool_stride, pool_padding):
    out = kernels.depthwise_conv(x, w.transpose(1, 2, 0), bias, (k, k), (stride, stride), (padding,) * 4, (1, 1),
                                 (orow, ocol), 1, scale, act == 1)
    if pool_stride:
        out = kernels.maxpool_zero_padded(out, pool_size, pool_stride, pool_padding)
    y[...] = out.reshape(y.shape)


GEMMINI_CALLS = {"o2g_rt_resadd": _resadd, "o2g_rt_global_average": _global_average, "o2g_rt_conv": _conv,
                 "o2g_rt_conv_dw": _conv_dw}
