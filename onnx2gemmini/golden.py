"""The compiled graph as ONNX: with its QuantTable, the QDQ model that is onnxruntime's golden reference;
without, the float model of the rewritten graph (what calibration and per-layer fp32 references run).

Every quantized tensor T appears as Q(T__preq) -> T__q -> DQ -> T, so the QDQ model keeps the original
tensor names for the dequantized values, and per-layer sub-models can start at any `T__preq`; a tensor the
int8 code keeps float32 (QuantTable.float_tensors) is Identity(T__preq) -> T.
With `only`, just the named nodes are quantized (their int8 inputs, weights and outputs exactly as in the
whole QDQ model) and the rest stays float: what sensitivity.py measures one layer at a time.
At onnxruntime's default optimization level DQ->Conv/Gemm->Q fuse into integer kernels (QLinearConv,
QGemm), which compute exactly Gemmini's arithmetic (spec/golden-reference.md §1).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import normalizer
from .einsum import matmul_form
from .graph import Graph, Node, topological
from .ops.registry import lookup
from .quant.quantize import QuantTable

QDQ_OPSET = 13


def scale_name(tensor: str) -> str:
    """The initializer holding an activation's Q/DQ scale in the QDQ model (quant/refine.py feeds it)."""
    return f"{tensor}__scale"


class _Builder:
    def __init__(self, graph: Graph, quant: QuantTable | None):
        self.graph, self.quant = graph, quant
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._names: set[str] = set()
        self.original: dict[str, str] = {}  # renamed model inputs -> their graph names
        self.fake_quantized: dict[str, str] = {}  # float tensor -> its Q/DQ copy (fake_quant)

    def init(self, name: str, value: np.ndarray) -> str:
        if name not in self._names:
            self._names.add(name)
            self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], name: str, **attrs) -> None:
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))

    def operand(self, name: str) -> str:
        """A node input: constants are copied into the QDQ model as float initializers."""
        if name in self.graph.initializers:
            self.init(name, self.graph.initializers[name])
        return name

    def weights(self, node: Node, index: int, role: str) -> str:
        """A conv/gemm weight or bias input: DQ of the int values, or the float initializer (float mode, and
        a layer kept float by --keep-float)."""
        if self.quant is None or node.name in self.quant.float_layers:
            return self.operand(node.inputs[index]) if index < len(node.inputs) else ""
        return self.dq_weights(node.name, self.quant.weights[node.name], role)

    def dq_weights(self, name: str, wq, role: str) -> str:
        """DQ of the int8 weights ("W") or int32 bias ("B"); per output channel with weight-scale groups."""
        if role == "W":
            grouped = wq.channel_scale is not None
            return self.dq_const(f"{name}__W", wq.q, wq.channel_scale if grouped else wq.scale, wq.axis)
        return self.dq_const(f"{name}__B", wq.bias, wq.bias_scales(), 0) if wq.bias is not None else ""

    def dq_const(self, base: str, q: np.ndarray, scale, axis: int = 0) -> str:
        """DequantizeLinear of a constant: one scale, or one per slice along `axis`; zero points 0."""
        scale = np.asarray(scale, np.float32)
        zero = np.zeros(scale.shape, np.int32 if q.dtype == np.int32 else np.int8)
        self.init(f"{base}__q", q)
        self.init(scale_name(base), scale)
        self.init(f"{base}__zp", zero)
        self.node("DequantizeLinear", [f"{base}__q", scale_name(base), f"{base}__zp"], [f"{base}__dq"],
                  name=f"{base}__DequantizeLinear", **({"axis": axis} if scale.ndim else {}))
        return f"{base}__dq"

    def qdq(self, preq: str, tensor: str, scale_of: str | None = None) -> None:
        """Q then DQ with the scale of `scale_of` (default: the tensor's): preq -> tensor__q -> tensor."""
        if self.quant is None or tensor in self.quant.float_tensors:  # float mode, or a float32 output
            self.node("Identity", [preq], [tensor], name=f"{tensor}__Identity")
            return
        s, z, axis = self.scale_inits(scale_of or tensor)
        self.node("QuantizeLinear", [preq, s, z], [f"{tensor}__q"], name=f"{tensor}__QuantizeLinear", **axis)
        self.node("DequantizeLinear", [f"{tensor}__q", s, z], [tensor], name=f"{tensor}__DequantizeLinear", **axis)

    def scale_inits(self, tensor: str) -> tuple[str, str, dict]:
        """The scale and zero point initializers of `tensor` and the Q/DQ `axis` attribute: one scale, or
        one per index along an axis (a model output that keeps its inputs' scales, quantize.py)."""
        if tensor in self.quant.axis_scales:
            axis, per_index = self.quant.axis_scales[tensor]
            s = self.init(scale_name(tensor), np.asarray(per_index, np.float32))
            return s, self.init(f"{tensor}__zp", np.zeros(len(per_index), np.int8)), {"axis": axis}
        s = self.init(scale_name(tensor), np.float32(self.quant.scales[tensor]))
        return s, self.init(f"{tensor}__zp", np.zeros((), np.int8)), {}

    def fake_quant(self, tensor: str) -> str:
        """Q/DQ of a float tensor under a new name (`T__fq`), made once: how a quantized node reads a model
        input, or (with `only`) a float producer's output, as the int8 value the whole QDQ model holds."""
        if tensor in self.quant.float_tensors:  # kept float32 (quantize.float_tensors): read as it is
            return tensor
        if tensor not in self.fake_quantized:
            s, z, axis = self.scale_inits(tensor)
            self.node("QuantizeLinear", [tensor, s, z], [f"{tensor}__q"], name=f"{tensor}__QuantizeLinear", **axis)
            self.node("DequantizeLinear", [f"{tensor}__q", s, z], [f"{tensor}__fq"],
                      name=f"{tensor}__DequantizeLinear", **axis)
            self.fake_quantized[tensor] = f"{tensor}__fq"
            self.original[f"{tensor}__fq"] = tensor
        return self.fake_quantized[tensor]

    def float_layer_input(self, node: Node, tensor: str) -> str:
        """A layer kept float (--keep-float) reads its int8 input through Max(x, x), the same values: onnxruntime
        (1.20+, WeightBiasQuantization) would otherwise quantize the float weights of a DQ -> Conv/Gemm -> Q
        group itself and run QLinearConv. Any other layer reads `tensor` as it is."""
        if self.quant is None or node.name not in self.quant.float_layers:
            return tensor
        self.node("Max", [tensor, tensor], [f"{node.outputs[0]}__float_in"], name=f"{node.name}__keep_float")
        return f"{node.outputs[0]}__float_in"

    def matmul_output(self, node: Node, raw: str) -> None:
        """A MatMul's raw product to its output: the fused softmax, or the activation chain."""
        if node.fused.softmax is not None:
            self.softmax_of(node, raw)
        else:
            self.activation_chain(node, raw)

    def softmax_operands(self, node: Node) -> list[str]:
        """A fused softmax's scores read their operands as Gemmini's mvin scaler hands them over: requantized at
        scale / factor where normalizer.softmax_call coarsens them."""
        ins = node.inputs
        s_a, s_b = (self.quant.scales[i] for i in ins)
        call = softmax_call(self.graph, self.quant, node)
        if call is None or call[1] == 1.0:
            return list(ins)
        operands = []
        factor = self.init(f"{node.name}__mvin_factor", np.float32(call[1]))
        for k, (name, s) in enumerate(zip(ins, (s_a, s_b))):
            # x * factor quantized at x's own scale (round(q * factor)), read back at scale / factor; not a
            # Q/DQ pair onnxruntime's optimizer would merge with the DQ before it
            base = f"{node.name}__mvin{k}"
            zero = self.init(f"{base}__zp", np.int8(0))
            self.node("Mul", [name, factor], [f"{base}__scaled"], name=f"{base}__Mul")
            self.node("QuantizeLinear", [f"{base}__scaled", self.init(f"{base}__scale", np.float32(s)), zero],
                      [f"{base}__q"], name=f"{base}__QuantizeLinear")
            self.node("DequantizeLinear", [f"{base}__q", self.init(f"{base}__coarse", np.float32(s / call[1])), zero],
                      [base], name=f"{base}__DequantizeLinear")
            operands.append(base)
        return operands

    def softmax_of(self, node: Node, raw: str) -> None:
        """raw -> [Mul by the scalar between] -> [Add the bias] -> Softmax(last axis) -> Reshape to the output's
        shape -> Q/DQ: scores and softmax in float, one quantization (passes/fuse_softmax.py)."""
        out = node.outputs[0]
        if node.fused.softmax != 1.0:
            factor = self.init(f"{out}__scores_factor", np.float32(node.fused.softmax))
            self.node("Mul", [raw, factor], [f"{out}__scores"], name=f"{node.name}__scores")
            raw = f"{out}__scores"
        if node.fused.softmax_bias:  # Swin's relative position bias
            self.node("Add", [raw, self.operand(node.fused.softmax_bias)], [f"{out}__biased"], name=f"{node.name}__bias")
            raw = f"{out}__biased"
        self.node("Softmax", [raw], [f"{out}__rows"], name=f"{node.name}__Softmax", axis=-1)
        shape = self.init(f"{out}__shape", np.asarray(self.graph.shapes[out], np.int64))  # a Flatten in between
        self.node("Reshape", [f"{out}__rows", shape], [f"{out}__preq"], name=f"{node.name}__Reshape")
        self.qdq(f"{out}__preq", out)

    def activation_chain(self, node: Node, raw: str) -> None:
        """raw -> Q/DQ -> [Relu|Clip -> Q/DQ] -> [MaxPool -> Q/DQ], ending at node's output name."""
        out = node.outputs[0]
        stages = []
        if node.fused.relu:
            stages.append("clip" if node.fused.clip else "relu")
        if node.fused.pool:
            stages.append("pool")
        current = raw
        for i, stage in enumerate([None] + stages):
            if stage == "relu":
                self.node("Relu", [current], [f"{out}__relu"], name=f"{node.name}__Relu")
                current = f"{out}__relu"
            elif stage == "clip":
                lo, hi = node.fused.clip
                lo_n = self.init(f"{out}__clip_lo", np.float32(lo))
                hi_n = self.init(f"{out}__clip_hi", np.float32(hi))
                self.node("Clip", [current, lo_n, hi_n], [f"{out}__clip"], name=f"{node.name}__Clip")
                current = f"{out}__clip"
            elif stage == "pool":
                p = node.fused.pool
                self.node("MaxPool", [current], [f"{out}__pool"], name=f"{node.name}__MaxPool",
                          kernel_shape=[p.size] * 2, strides=[p.stride] * 2, pads=[p.padding] * 4)
                current = f"{out}__pool"
            last = i == len(stages)
            target = out if last else f"{out}__s{i}"
            preq = f"{out}__preq" if last else current
            if last:
                self.node("Identity", [current], [preq], name=f"{out}__preq_Identity")
            self.qdq(preq, target, out)
            current = target

    def position_ids(self, node: Node) -> str:
        """kernels.padding_positions with standard ops: Where(ids == pad, pad, CumSum(ids != pad) + pad)."""
        ids, base = node.inputs[1], f"{node.name}__positions"
        dtype = next(vi.dtype for vi in self.graph.inputs if vi.name == ids)
        pad = self.init(f"{base}__pad", np.asarray(node.fused.positions, dtype))
        self.node("Equal", [ids, pad], [f"{base}__is_pad"], name=f"{base}__Equal")
        self.node("Not", [f"{base}__is_pad"], [f"{base}__kept"], name=f"{base}__Not")
        self.node("Cast", [f"{base}__kept"], [f"{base}__count"], name=f"{base}__Cast",
                  to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
        self.node("CumSum", [f"{base}__count", self.init(f"{base}__axis", np.asarray(-1, np.int64))],
                  [f"{base}__running"], name=f"{base}__CumSum")
        self.node("Add", [f"{base}__running", pad], [f"{base}__counted"], name=f"{base}__Add")
        self.node("Where", [f"{base}__is_pad", pad, f"{base}__counted"], [base], name=f"{base}__Where")
        return base

    def mask_bias(self, node: Node) -> str:
        """The additive bias of an attention mask input ([batch, keys], 0: masked) over the scores [batch, ...,
        queries, keys], with standard ops: 0 where kernels.attention_keep keeps a position, float32's lowest
        elsewhere (a row that keeps nothing then comes out uniform, as the int8 kernel makes it)."""
        name, form = node.fused.input_mask
        x_shape = self.graph.shapes[self.original.get(node.inputs[0], node.inputs[0])]
        vi = next(vi for vi in self.graph.inputs if vi.name == name)
        base, rank, keys, queries = f"{node.name}__input_mask", len(x_shape), x_shape[-1], x_shape[-2]
        zero = self.init(f"{base}__zero", np.zeros((), vi.dtype))
        self.node("Equal", [name, zero], [f"{base}__masked"], name=f"{base}__Equal")
        self.node("Not", [f"{base}__masked"], [f"{base}__kept"], name=f"{base}__Not")

        def reshaped(tensor: str, shape: tuple, tag: str) -> str:
            self.node("Reshape", [tensor, self.init(f"{base}__{tag}_shape", np.asarray(shape, np.int64))],
                      [f"{base}__{tag}"], name=f"{base}__Reshape_{tag}")
            return f"{base}__{tag}"
        keep = reshaped(f"{base}__kept", (vi.shape[0],) + (1,) * (rank - 2) + (keys,), "keys")
        if form == "causal":
            later = np.arange(keys)[None, :] <= np.arange(queries)[:, None] + (keys - queries)
            self.node("And", [keep, self.init(f"{base}__causal", later)], [f"{base}__keep"], name=f"{base}__Causal")
            keep = f"{base}__keep"
        elif form == "query_key":
            self.node("Slice", [f"{base}__kept", self.init(f"{base}__q0", np.asarray([keys - queries], np.int64)),
                                self.init(f"{base}__q1", np.asarray([keys], np.int64)),
                                self.init(f"{base}__q_axis", np.asarray([1], np.int64))],
                      [f"{base}__queries_kept"], name=f"{base}__Slice")
            rows = reshaped(f"{base}__queries_kept", (vi.shape[0],) + (1,) * (rank - 3) + (queries, 1), "queries")
            self.node("And", [keep, rows], [f"{base}__keep"], name=f"{base}__QueryKey")
            keep = f"{base}__keep"
        lowest = self.init(f"{base}__lowest", np.float32(np.finfo(np.float32).min))
        self.node("Where", [keep, self.init(f"{base}__0", np.float32(0)), lowest], [f"{base}__bias"],
                  name=f"{base}__Where")
        return f"{base}__bias"

    def lower(self, node: Node) -> None:
        op, ins, out = node.op_type, node.inputs, node.outputs[0]
        raw = f"{out}__raw"
        if op in ("Conv", "ConvTranspose"):
            conv_in = [self.float_layer_input(node, ins[0]), self.weights(node, 1, "W")]
            bias = self.weights(node, 2, "B")
            conv_in += [bias] if bias else []
            keep = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
            if op == "ConvTranspose":
                keep += ("output_padding", "output_shape")
            attrs = {k: v for k, v in node.attrs.items() if k in keep and not (k == "output_shape" and not v)}
            self.node(op, conv_in, [raw], name=node.name, **attrs)
            self.activation_chain(node, raw)
        elif op in ("Gemm", "MatMul") and (self.quant is None or node.name in self.quant.float_layers):
            # float weights: the float model, or (--keep-float) a float layer between the int8 input's DQ
            # and its output's Q
            attrs = {k: v for k, v in node.attrs.items() if k in ("alpha", "beta", "transA", "transB")}
            inputs = [self.float_layer_input(node, ins[0])] + [self.operand(i) for i in ins[1:]]
            if node.fused.bias:
                self.node(op, inputs, [f"{raw}__nobias"], name=node.name, **attrs)
                self.node("Add", [f"{raw}__nobias", self.operand(node.fused.bias)], [raw], name=f"{node.name}__bias")
            else:
                self.node(op, inputs, [raw], name=node.name, **attrs)
            self.matmul_output(node, raw)
        elif op == "MatMul" and node.name not in self.quant.weights:  # two activations
            self.node("MatMul", self.softmax_operands(node) if node.fused.softmax is not None else list(ins), [raw],
                      name=node.name)
            self.matmul_output(node, raw)
        elif op == "MatMul" and self.quant.weights[node.name].q.ndim > 2:  # batched weights, no bias
            self.node("MatMul", [ins[0], self.dq_weights(node.name, self.quant.weights[node.name], "W")], [raw],
                      name=node.name)
            self.activation_chain(node, raw)
        elif op in ("Gemm", "MatMul"):
            wq = self.quant.weights[node.name]
            gemm_in = [ins[0], self.dq_weights(node.name, wq, "W")]
            if wq.bias is not None:
                gemm_in.append(self.dq_weights(node.name, wq, "B"))
            in_shape = self.graph.shapes[self.original.get(ins[0], ins[0])]
            out_shape = self.graph.shapes[out]
            if len(in_shape) != 2:
                flat = self.init(f"{node.name}__flat_shape", np.array([-1, in_shape[-1]], np.int64))
                self.node("Reshape", [ins[0], flat], [f"{out}__a2d"], name=f"{node.name}__Reshape_in")
                gemm_in[0] = f"{out}__a2d"
                self.node("Gemm", gemm_in, [f"{raw}2d"], name=node.name)
                back = self.init(f"{node.name}__out_shape", np.array(out_shape, np.int64))
                self.node("Reshape", [f"{raw}2d", back], [raw], name=f"{node.name}__Reshape_out")
            else:
                self.node("Gemm", gemm_in, [raw], name=node.name)
            if node.fused.accumulate:  # int32 accumulators out (full_C): the float product, no Q/DQ; the
                # T__preq name stays, where per-layer sub-models feed T (input_tensor_name)
                self.node("Identity", [raw], [f"{out}__preq"], name=f"{out}__preq_Identity")
                self.node("Identity", [f"{out}__preq"], [out], name=f"{out}__Identity")
            else:
                self.activation_chain(node, raw)
        elif op in ("Add", "Sum"):
            self.node("Add", [self.operand(i) for i in ins], [raw], name=node.name)
            self.activation_chain(node, raw)
        elif op == "BatchNormalization":  # standalone (not after a conv), possibly with a fused ReLU
            attrs = {k: v for k, v in node.attrs.items() if k == "epsilon"}
            self.node(op, [self.operand(i) for i in ins], [raw], name=node.name, **attrs)
            self.activation_chain(node, raw)
        elif op == "Einsum":  # a batched matmul form: the MatMul onnxruntime runs as exact QLinearMatMul
            form = matmul_form(node.attrs["equation"])
            operands = []
            for k, (name, perm) in enumerate(zip(ins, (form.perm_a, form.perm_b))):
                if perm is not None:
                    self.node("Transpose", [name], [f"{out}__in{k}"], name=f"{node.name}__in{k}", perm=list(perm))
                    name = f"{out}__in{k}"
                operands.append(name)
            product = raw if form.perm_out is None else f"{raw}__product"
            self.node("MatMul", operands, [product], name=node.name)
            if form.perm_out is not None:
                self.node("Transpose", [product], [raw], name=f"{node.name}__out", perm=list(form.perm_out))
            self.activation_chain(node, raw)
        elif op == "Sqrt" and node.fused.magnitude:  # sqrt(x*x + y*y) in float, one quantization (fuse_magnitude.py)
            for k, part in enumerate(ins):
                self.node("Mul", [part, part], [f"{out}__square{k}"], name=f"{node.name}__square{k}")
            self.node("Add", [f"{out}__square0", f"{out}__square1"], [f"{out}__power"], name=f"{node.name}__power")
            self.node("Sqrt", [f"{out}__power"], [f"{out}__preq"], name=node.name)
            self.qdq(f"{out}__preq", out)
        elif op == "Mul" and node.fused.gate:  # x * f(x) in float, then one quantization (fuse_gate.py)
            gate, attrs = node.fused.gate
            self.node(gate, [ins[0]], [f"{out}__gate"], name=f"{node.name}__{gate}", **dict(attrs))
            self.node("Mul", [ins[0], f"{out}__gate"], [f"{out}__preq"], name=node.name)
            self.qdq(f"{out}__preq", out)
        elif op == "ElementwiseChain":  # the chain in float, then one quantization (fuse_elementwise.py)
            results: list[str] = []
            for k, (chain_op, operands, attrs) in enumerate(node.fused.chain):
                args = [ins[0] if ref[0] == "x" else results[ref[1]] if ref[0] == "step"
                        else self.init(f"{node.name}__c{k}_{j}", np.asarray(ref[1], np.dtype(ref[2])))
                        for j, ref in enumerate(operands)]
                results.append(f"{out}__preq" if k == len(node.fused.chain) - 1 else f"{out}__c{k}")
                self.node(chain_op, args, [results[-1]], name=f"{node.name}__{k}", **dict(attrs))
            self.qdq(f"{out}__preq", out)
        elif op == "Softmax" and (node.fused.mask or node.fused.input_mask):  # passes/fuse_mask.py, input_mask.py
            bias = self.mask_bias(node) if node.fused.input_mask else self.init(
                f"{node.name}__mask", np.where(self.graph.initializers[node.fused.mask] != 0, np.float32(0),
                                               np.float32(-np.inf)))
            self.node("Add", [ins[0], bias], [f"{out}__masked"], name=f"{node.name}__mask")
            self.node("Softmax", [f"{out}__masked"], [f"{out}__preq"], name=node.name, axis=node.attrs.get("axis", -1))
            self.qdq(f"{out}__preq", out)
        elif op == "Gather" and node.fused.positions is not None:  # RoBERTa's position ids (passes/index_paths.py)
            self.node("Gather", [self.operand(ins[0]), self.position_ids(node)], [f"{out}__preq"], name=node.name)
            self.qdq(f"{out}__preq", out)
        elif op == "MaskRows":  # x * mask[b, s] (passes/input_mask.py), as the model multiplies
            x_shape = self.graph.shapes[self.original.get(ins[0], ins[0])]
            mask_shape = self.graph.shapes[ins[1]]
            self.node("Cast", [ins[1]], [f"{out}__mask_f"], name=f"{node.name}__Cast", to=TensorProto.FLOAT)
            shape = self.init(f"{node.name}__mask_shape",
                              np.asarray(tuple(mask_shape) + (1,) * (len(x_shape) - len(mask_shape)), np.int64))
            self.node("Reshape", [f"{out}__mask_f", shape], [f"{out}__mask_rows"], name=f"{node.name}__Reshape")
            self.node("Mul", [ins[0], f"{out}__mask_rows"], [f"{out}__preq"], name=node.name)
            self.qdq(f"{out}__preq", out)
        elif op in ("Split", "LSTM", "GRU"):  # several outputs, each quantized on its own
            attrs = {k: v for k, v in node.attrs.items() if not isinstance(v, np.ndarray)}
            self.node(op, [self.operand(i) for i in ins], [f"{o}__preq" if o else "" for o in node.outputs],
                      name=node.name, **attrs)
            for o in node.outputs:
                if o:
                    self.qdq(f"{o}__preq", o)
        elif op == "Dropout":  # inference: the identity
            self.node("Identity", [ins[0]], [f"{out}__preq"], name=node.name)
            self.qdq(f"{out}__preq", out)
        else:  # views, pools, Relu, Clip, Softmax: the float op between DQ and Q (views stay exact)
            if op == "AveragePool" and any(d != 1 for d in node.attrs.get("dilations") or []):
                # onnxruntime would fuse DQ->AveragePool->Q into QLinearAveragePool, which rejects
                # dilations; Max(x, x) keeps the exact same values and stops that fusion.
                self.node("Max", [ins[0], ins[0]], [f"{out}__unfused"], name=f"{node.name}__no_fusion")
                ins = [f"{out}__unfused"] + list(ins[1:])
            attrs = {k: v for k, v in node.attrs.items() if not isinstance(v, np.ndarray)}
            self.node(op, [self.operand(i) for i in ins], [f"{out}__preq"], name=node.name, **attrs)
            self.qdq(f"{out}__preq", out)


def softmax_call(graph: Graph, quant: QuantTable, node: Node) -> tuple[float, float] | None:
    """normalizer.softmax_call for a MatMul with a fused softmax, from the quantization table: the bert scale
    and mvin factor the golden models and `diff` judges the normalizer at (not the plan's, which it checks)."""
    ins, shapes = node.inputs, graph.shapes
    bias = graph.const(node.fused.softmax_bias) if node.fused.softmax_bias else None
    return normalizer.softmax_call(quant.scales[ins[0]] * quant.scales[ins[1]] * node.fused.softmax,
                                   shapes[node.outputs[0]][-1], shapes[ins[0]][-1], bias)


def build_float(graph: Graph, name: str = "model") -> onnx.ModelProto:
    """The rewritten graph (folded, fused, equalized) as a float model with the same tensor names."""
    return build_qdq(graph, None, name)


def build_qdq(graph: Graph, quant: QuantTable | None, name: str = "model",
              only: "set[str] | None" = None) -> onnx.ModelProto:
    """A QDQ model computing the compiled quantization; inputs/outputs keep the original names.

    `only`: node names; just those are quantized (inputs, weights, outputs) and every other node runs in
    float, as in build_float. None (the default): every node, the compiled model's golden."""
    b = _Builder(graph, quant)
    inputs = [helper.make_tensor_value_info(vi.name, helper.np_dtype_to_tensor_dtype(np.dtype(vi.dtype)), vi.shape)
              for vi in graph.inputs]
    # Model inputs: the float input is quantized and dequantized under a new name, then readers use it; integer
    # ids are read as they are. With `only`, a quantized node's float inputs are fake-quantized the same way.
    renamed = {vi.name: b.fake_quant(vi.name) for vi in graph.inputs if not graph.is_index(vi.name)} \
        if quant is not None and only is None else {}
    quantized: set[str] = set()  # with `only`: outputs of quantized nodes, read as int8 values already
    for node in topological(graph.nodes, [i.name for i in graph.inputs] + list(graph.initializers)):
        if lookup(node.op_type, graph.opset, node.domain) is None:
            raise ValueError(f"no handler for {node.op_type}")
        b.quant = quant if only is None or node.name in only else None  # None: the float lowering
        if only is not None:  # a quantized node reads int8 inputs (Q/DQ of float ones); a float node floats
            renamed = {i: b.fake_quant(i) for i in graph.activations(node)
                       if i not in quantized} if b.quant is not None else {}
            quantized.update(o for o in node.outputs if o and b.quant is not None)
        n = Node(node.name, node.op_type, [renamed.get(i, i) for i in node.inputs], list(node.outputs),
                 dict(node.attrs), node.domain, node.fused)
        b.lower(n)
    outputs = [helper.make_tensor_value_info(o.name, TensorProto.FLOAT, o.shape) for o in graph.outputs]
    g = helper.make_graph(b.nodes, f"{name}_qdq", inputs, outputs, b.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", max(QDQ_OPSET, graph.opset))],
                              producer_name="onnx2gemmini")
    model.ir_version = min(model.ir_version, 9)
    return model


def input_tensor_name(graph: Graph, tensor: str) -> str:
    """Where a per-layer sub-model must be fed to re-create `tensor` exactly (q * s goes in)."""
    return tensor if any(vi.name == tensor for vi in graph.inputs) else f"{tensor}__preq"
