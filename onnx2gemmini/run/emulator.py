"""Execute a Plan with Gemmini's arithmetic: the bit-exact reference every other execution is held to."""
from __future__ import annotations

import dataclasses

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..plan import Conv, ConvDw, CpuOp, GlobalAverage, Matmul, Plan, Resadd
from .. import kernels, normalizer
from ..numerics import mvin_scale


# Rows per batched call (run_batch): measured on MobileNetV2, a transformer encoder and ResNet-50, one thread.
BATCH_ROWS = 512


class Emulator:
    def __init__(self, plan: Plan):
        self.plan = plan
        self._float_weights: dict[str, np.ndarray] = {}
        self._exact: dict[tuple, bool] = {}

    def weights(self, tid: str) -> np.ndarray:
        """A constant matmul/conv operand as float32 (holding its int8 values), converted once per emulator:
        BLAS multiplies float32, and converting every weight again for every image costs a fifth of a run."""
        cached = self._float_weights.get(tid)
        if cached is None:
            cached = self._float_weights[tid] = self.plan.constants[tid].astype(np.float32)
        return cached

    def exact_f32(self, weights: str, bias: str | None, shape: tuple[int, int]) -> bool:
        """kernels.float32_exact for a constant [K, J] weight (`shape`) and bias, decided once per emulator."""
        key = (weights, bias, shape)
        if key not in self._exact:
            consts = self.plan.constants
            self._exact[key] = kernels.float32_exact(consts[weights].reshape(shape), consts[bias] if bias else None)
        return self._exact[key]

    def run(self, inputs: dict[str, np.ndarray], keep: bool = False, visit=None,
            hold: dict[str, int] | None = None) -> dict[str, np.ndarray]:
        """Model inputs (float32, or integer ids) by ONNX name -> int8 buffers by tensor id (all of them if `keep`).

        Without `keep`, a buffer is dropped after the last step that reads or writes it (a large model holds
        what is live, not every activation), unless `hold` ({tensor id: step index}) keeps it until later.
        `visit(k, buffers)` is called after step k, before that step's dead buffers are dropped."""
        plan = self.plan
        buffers: dict[str, np.ndarray] = {}
        for tid in plan.inputs:
            t = plan.tensors[tid]
            if t.onnx_name not in inputs:
                raise KeyError(f"missing model input '{t.onnx_name}'")
            buffers[tid] = np.asarray(inputs[t.onnx_name], np.dtype(t.dtype)).reshape(t.shape)
        dead = {} if keep else self.dead_after(hold)
        for k, step in enumerate(plan.steps):
            for tid, value in zip(step.writes(), self.execute_step(step, buffers)):
                self._store(buffers, tid, value)
            if visit is not None:
                visit(k, buffers)
            for base in dead.get(k, ()):
                buffers.pop(base, None)
        if keep:
            return buffers
        return {tid: self.get(buffers, tid) for tid in plan.outputs}

    def run_batch(self, samples: list[dict[str, np.ndarray]], visit=None,
                  hold: dict[str, int] | None = None) -> list[dict[str, np.ndarray]]:
        """`run` over several samples at once, every buffer with a leading sample axis: each constant-weight
        matmul, conv, resadd and average is one call per group of samples (`_execute_batch`: the per-call
        overhead is paid once and BLAS sees more rows); other steps run sample by sample. The int8 results are
        those of `run`, byte for byte: every kernel is exact integer arithmetic, row by row, so stacking rows
        changes no value. `visit(k, per_sample)` gets after step k one buffers dict per sample (views)."""
        plan, n = self.plan, len(samples)
        buffers: dict[str, np.ndarray] = {}
        for tid in plan.inputs:
            t = plan.tensors[tid]
            if any(t.onnx_name not in s for s in samples):
                raise KeyError(f"missing model input '{t.onnx_name}'")
            buffers[tid] = np.stack([np.asarray(s[t.onnx_name], np.dtype(t.dtype)).reshape(t.shape)
                                     for s in samples])
        dead = self.dead_after(hold)
        for k, step in enumerate(plan.steps):
            for tid, value in zip(step.writes(), self._execute_batch(step, buffers, n)):
                self._store_batch(buffers, tid, value, n)
            if visit is not None:
                visit(k, [self._sample(buffers, b) for b in range(n)])
            for base in dead.get(k, ()):
                buffers.pop(base, None)
        return [{tid: self.get(one, tid) for tid in plan.outputs}
                for one in (self._sample(buffers, b) for b in range(n))]

    @staticmethod
    def _sample(buffers: dict[str, np.ndarray], b: int) -> dict[str, np.ndarray]:
        """Sample b's buffers (views of the batch's, C-contiguous): what `get` and `execute_step` read."""
        return {tid: value[b] for tid, value in buffers.items()}

    def _batched(self, buffers: dict[str, np.ndarray], tid: str, n: int) -> np.ndarray:
        """An activation's values for the whole batch, [n, *shape], following views and slices as `get`."""
        t = self.plan.tensors[tid]
        if tid in buffers:
            return buffers[tid].reshape(n, *t.shape)
        if t.slice_of is not None:
            return self._batch_slice_view(buffers[self.plan.base(tid).id], tid, n).copy().reshape(n, *t.shape)
        return self._batched(buffers, t.view_of, n).reshape(n, *t.shape)

    def _batch_slice_view(self, buffer: np.ndarray, tid: str, n: int) -> np.ndarray:
        """_slice_view for every sample at once: [n, rows, width], samples a whole base buffer apart."""
        t, plan = self.plan.tensors[tid], self.plan
        width = t.shape[-1]
        rows = int(np.prod(t.shape, dtype=np.int64)) // width if width else 0
        size = buffer.size // n
        offset, stride = plan.elem_offset(tid), plan.row_stride(tid)
        if rows and offset + (rows - 1) * stride + width > size:
            raise ValueError(f"slice {tid} reaches past its base buffer")
        flat, item = buffer.reshape(-1), buffer.itemsize
        return as_strided(flat[offset:], (n, rows, width), (size * item, stride * item, item))

    def _store_batch(self, buffers: dict[str, np.ndarray], tid: str, value: np.ndarray, n: int) -> None:
        """_store for a [n, ...] result."""
        base = self.plan.base(tid)
        if self.plan.tensors[tid].slice_of is None:
            buffers[base.id] = value.reshape(n, *base.shape)
            return
        if base.id not in buffers or not buffers[base.id].flags.c_contiguous:
            buffers[base.id] = (np.zeros((n, *base.shape), np.dtype(base.dtype)) if base.id not in buffers
                                else np.ascontiguousarray(buffers[base.id]))
        view = self._batch_slice_view(buffers[base.id], tid, n)
        view[...] = value.reshape(view.shape)

    def _execute_batch(self, step, buffers, n: int) -> list[np.ndarray]:
        """The values `step` writes for the whole batch ([n, ...] each), in groups of samples whose rows
        together stay near BATCH_ROWS: a layer with many rows per sample gains nothing from more (BLAS is
        already efficient) and loses its activations' cache locality (MobileNetV2's 112x112 layers ran 1.6x
        slower as one call over 8 samples), one with few gains the most."""
        group = max(1, BATCH_ROWS // max(1, _rows(step)))
        if group >= n:
            return self._execute_group(step, buffers, n)
        parts = [self._execute_group(step, {tid: v[lo:lo + group] for tid, v in buffers.items()},
                                     min(group, n - lo)) for lo in range(0, n, group)]
        return [np.concatenate([p[w] for p in parts]) for w in range(len(step.writes()))]

    def _execute_group(self, step, buffers, n: int) -> list[np.ndarray]:
        """_execute_batch for one group: where the step's arithmetic is row-wise over its leading dimension
        (`_row_field`), `execute_step` once on the same step with that dimension n times larger and its
        activations stacked sample after sample; else `execute_step` sample by sample."""
        field = self._row_field(step)
        if field is None:
            per_sample = [self.execute_step(step, self._sample(buffers, b)) for b in range(n)]
            return [np.stack([values[w] for values in per_sample]) for w in range(len(step.writes()))]
        stacked = {tid: self._batched(buffers, tid, n) for tid in step.reads() if tid not in self.plan.constants}
        values = self.execute_step(dataclasses.replace(step, **{field: n * getattr(step, field)}), stacked)
        return [v.reshape(n, -1) for v in values]

    def _row_field(self, step) -> str | None:
        """The field that counts the rows a step's arithmetic treats independently (one row's result depends
        on that row's inputs only), or None: matmuls of constant weights with a repeating bias, convs, residual
        adds and averages; not a product of two activations, the normalizer's softmax or a CPU step."""
        if isinstance(step, Matmul):
            whole = step.B in self.plan.constants and step.act != normalizer.SOFTMAX and \
                (step.D is None or step.repeating_bias)  # an I x J bias: activation scores only
            return "I" if whole else None
        if isinstance(step, Resadd):
            return "I"
        if isinstance(step, (Conv, ConvDw)):
            return "batch_size"
        return "batches" if isinstance(step, GlobalAverage) else None

    def dead_after(self, hold: dict[str, int] | None = None) -> dict[int, list[str]]:
        """{step index: the buffers (base tensor ids) no later step reads or writes}: never a model output's,
        and a held tensor's not before its step."""
        plan = self.plan
        last: dict[str, int] = {}
        for k, step in enumerate(plan.steps):
            for tid in step.reads() + step.writes():
                if tid and tid not in plan.constants:
                    last[plan.base(tid).id] = k
        for tid, k in (hold or {}).items():
            base = plan.base(tid).id
            last[base] = max(last.get(base, -1), k)
        kept = {plan.base(tid).id for tid in plan.outputs}
        dead: dict[int, list[str]] = {}
        for base, k in last.items():
            if base not in kept:
                dead.setdefault(k, []).append(base)
        return dead

    def checkpoints(self, checks: list[list[str]]) -> tuple[dict[int, list[int]], dict[str, int]]:
        """When to look at each check (a list of tensor ids: the one it judges first, then those it also reads)
        in a `run` that drops dead buffers: ({step index: the checks due after it}, `hold`). A check is due
        after the last step writing any tensor of its first tensor's buffer (its bytes are then all written;
        a model input's is due after step 0), and every tensor it reads is held until then."""
        written = {self.plan.base(w).id: k for k, step in enumerate(self.plan.steps) for w in step.writes()}
        due: dict[int, list[int]] = {}
        hold: dict[str, int] = {}
        for n, tids in enumerate(checks):
            at = max(0, written.get(self.plan.base(tids[0]).id, -1))
            due.setdefault(at, []).append(n)
            for tid in tids:
                hold[tid] = max(hold.get(tid, -1), at)
        return due, hold

    def _slice_view(self, buffer: np.ndarray, tid: str) -> np.ndarray:
        """A slice's elements as a [rows, width] strided view of its base's (contiguous) buffer, rows strided
        by the parent's width: reads and writes without building index arrays."""
        return self._batch_slice_view(buffer, tid, 1)[0]

    def _store(self, buffers: dict[str, np.ndarray], tid: str, value: np.ndarray) -> None:
        """A step's result into the bytes it owns: a view fills its base, a slice its range of the base."""
        base = self.plan.base(tid)
        if self.plan.tensors[tid].slice_of is None:
            buffers[base.id] = value.reshape(base.shape)
            return
        if base.id not in buffers or not buffers[base.id].flags.c_contiguous:
            buffers[base.id] = (np.zeros(base.shape, np.dtype(base.dtype)) if base.id not in buffers
                                else np.ascontiguousarray(buffers[base.id]))
        view = self._slice_view(buffers[base.id], tid)
        view[...] = value.reshape(view.shape)

    def get(self, buffers: dict[str, np.ndarray], tid: str) -> np.ndarray:
        """A tensor's value, following views and slices to the buffer that holds its bytes."""
        if tid in buffers:
            return buffers[tid]
        if tid in self.plan.constants:
            return self.plan.constants[tid]
        t = self.plan.tensors[tid]
        if t.slice_of is not None:
            base = self.plan.base(tid)
            return self._slice_view(buffers[base.id], tid).copy().reshape(t.shape)  # a copy, as a gather gives
        return self.get(buffers, t.view_of).reshape(t.shape)

    def execute_step(self, step, buffers) -> list[np.ndarray]:
        """The values `step` writes (one per step.writes()), from the buffers: a whole call with Gemmini's
        arithmetic. scratchpad.PlanRunner overrides it to run Gemmini steps at address level."""
        get = lambda tid: self.get(buffers, tid)  # noqa: E731
        consts = self.plan.constants
        if isinstance(step, Matmul) and step.act == normalizer.SOFTMAX:  # the read-out normalizes each row
            a, b = (mvin_scale(get(t).reshape(shape), f) for t, shape, f in
                    ((step.A, (step.I, step.K), step.A_scale_factor), (step.B, (step.K, step.J), step.B_scale_factor)))
            acc = kernels.matmul(a, b, consts[step.D] if step.D else None, 1.0, False, step.repeating_bias,
                                 full_C=True)
            return [normalizer.softmax_rows(acc, step.bert_scale, step.scale)]
        if isinstance(step, Matmul):
            a = get(step.A).reshape(step.I, step.K)
            d = consts[step.D] if step.D else None
            b = (self.weights(step.B) if step.B in consts else get(step.B)).reshape(step.K, step.J)
            exact = step.B in consts and self.exact_f32(step.B, step.D, (step.K, step.J))
            return [kernels.matmul(a, b, d, step.scale, step.act == 1, step.repeating_bias, exact, step.full_C)]
        if isinstance(step, Conv):
            x = get(step.input).reshape(step.batch_size, step.in_row_dim, step.in_col_dim, step.in_channels)
            bias = consts[step.bias] if step.bias else None
            pool = (step.pool_size, step.pool_stride, step.pool_padding) if step.pool_stride else None
            return [kernels.conv(x, self.weights(step.weights), bias, step.stride, step.padding, step.kernel_dim,
                                 (step.out_row_dim, step.out_col_dim), step.scale, step.act == 1, pool,
                                 self.exact_f32(step.weights, step.bias, (-1, step.out_channels)))]
        if isinstance(step, ConvDw):
            x = get(step.input).reshape(step.batch_size, step.in_row_dim, step.in_col_dim, step.channels)
            w = consts[step.weights].transpose(1, 2, 0)  # [C][KH][KW] -> [KH][KW][C]
            bias = consts[step.bias] if step.bias else None
            k = step.kernel_dim
            y = kernels.depthwise_conv(x, w, bias, (k, k), (step.stride,) * 2, (step.padding,) * 4, (1, 1),
                                       (step.out_row_dim, step.out_col_dim), 1, step.scale, step.act == 1)
            if step.pool_stride:
                y = kernels.maxpool_zero_padded(y, step.pool_size, step.pool_stride, step.pool_padding)
            return [y]
        if isinstance(step, Resadd):
            a, b = (get(t).reshape(step.I, step.J) for t in (step.A, step.B))
            return [kernels.resadd(a, b, step.A_scale, step.B_scale, step.C_scale, step.relu)]
        if isinstance(step, GlobalAverage):
            x = get(step.input).reshape(step.batches, step.dim, step.dim, step.channels)
            return [kernels.global_average(x)]
        if isinstance(step, CpuOp):
            return step.params.run([get(t) for t in step.inputs],
                                   [self.plan.tensors[t].shape for t in step.outputs])
        raise TypeError(f"unknown step {type(step).__name__}")


def _rows(step) -> int:
    """The GEMM rows of one sample's call (a conv's output pixels): how much one call already has."""
    if isinstance(step, (Conv, ConvDw)):
        return step.batch_size * step.out_row_dim * step.out_col_dim
    if isinstance(step, GlobalAverage):
        return step.batches
    return getattr(step, "I", 1)


def dequantize(plan: Plan, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """int8 (or int32) output buffers -> float arrays by ONNX output name."""
    result = {}
    for tid in plan.outputs:
        t = plan.tensors[tid]
        result[t.onnx_name] = t.dequantize(outputs[tid])
    return result
