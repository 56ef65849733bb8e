"""How far int8 activations can take a trained transformer: fake-quantized variants of the original model.

    python scripts/bench_precision_bounds.py [--model all_minilm_l6] [--calib-samples 64] [--eval-samples 128]

Before building an outlier cure into the compiler, this measures what each one could buy at most. The user's
float model (scripts/bench_transformers.py's, on its sentences) gets a QuantizeLinear/DequantizeLinear pair
after every float activation that onnx2gemmini quantizes, with onnx2gemmini's own calibrated scale (the compile's
QuantTable; a tensor it does not scale gets its calibrated largest magnitude), and its weights rounded to int8
with one scale per tensor; onnxruntime then runs it in float. Each variant leaves a class of tensors float or
gives it one scale per channel (its last axis: what SmoothQuant-style smoothing or per-group Gemmini calls can
approach at best); `weights` per output channel is `--weight-scales channel`'s rounding. The figure is the bench's: the mean-pooled embedding's cosine to fp32 (mean and worst
sentence). The all-int8 row tracks the real compile (scripts/bench_transformers.py) within a few hundredths.
Classes: `ln_in` (LayerNorm inputs: the residual sums), `ln_out` (LayerNorm outputs), `branch` (the outputs of
the attention and feed-forward output projections that join the residual stream), `probs` (softmax outputs,
the left operand of P.V), `gelu` (the feed-forward activations, the down-projection's input).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_transformers as bench  # noqa: E402 - the models and sentences of the transformer benchmark

SKIPPED_OPS = {"Shape", "Unsqueeze", "Concat", "Cast", "Constant", "Reshape", "Transpose", "Slice", "Squeeze",
               "Where", "Equal", "Expand", "ConstantOfShape", "Not", "And"}
# Variants: (label, {class: "float" | "channel"}); every other activation per tensor.
VARIANTS = [
    ("all int8, one scale per tensor", {}),
    ("ln_in float", {"ln_in": "float"}),
    ("probs and gelu float", {"probs": "float", "gelu": "float"}),
    ("ln_in float; ln_out and branch per channel", {"ln_in": "float", "ln_out": "channel", "branch": "channel"}),
    ("probs, gelu, ln_in float; ln_out and branch per channel",
     {"probs": "float", "gelu": "float", "ln_in": "float", "ln_out": "channel", "branch": "channel"}),
    ("every activation per channel", {"*": "channel"}),
    ("only probs int8 (the rest float)", {"*": "float", "probs": "tensor"}),
    ("only gelu int8 (the rest float)", {"*": "float", "gelu": "tensor"}),
    ("every activation float (int8 weights only)", {"*": "float"}),
    ("every activation float, weights one scale per output channel", {"*": "float", "weights": "channel"}),
    ("all int8, weights per output channel", {"weights": "channel"}),
    ("ln_in float; ln_out and branch per channel; weights per output channel",
     {"ln_in": "float", "ln_out": "channel", "branch": "channel", "weights": "channel"}),
    ("every activation per channel, weights per output channel", {"*": "channel", "weights": "channel"}),
]


def activations(model: onnx.ModelProto) -> tuple[list[str], dict[str, str]]:
    """The float node outputs a plan quantizes (not shape arithmetic, not the additive attention mask, not a
    matmul's output that a bias Add follows), each with its class."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(inferred.graph.value_info)
             + list(inferred.graph.output)}
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    inits = {i.name for i in model.graph.initializer}
    names, classes = [], {}
    for n in model.graph.node:
        for o in n.output:
            users = consumers.get(o, [])
            if types.get(o) != TensorProto.FLOAT or n.op_type in SKIPPED_OPS:
                continue
            if n.op_type in ("MatMul", "Gemm") and users and all(u.op_type == "Add" and any(i in inits for i in u.input)
                                                                for u in users):
                continue  # the bias follows: quantized after it, as the plan fuses it
            if "mask" in " ".join(n.input).lower() or (n.op_type == "Mul" and any(i in inits for i in n.input)
                                                       and producer.get(n.input[0]) is not None
                                                       and producer[n.input[0]].op_type == "Sub"):
                continue  # the additive attention mask (the plan applies masks as masks)
            names.append(o)
            if any(u.op_type == "LayerNormalization" for u in users):
                classes[o] = "ln_in"
            elif n.op_type == "LayerNormalization":
                classes[o] = "ln_out"
            elif n.op_type == "Softmax":
                classes[o] = "probs"
            elif any(u.op_type in ("MatMul", "Gemm") for u in users) and n.op_type in ("Mul", "Erf", "Gelu"):
                classes[o] = "gelu"
            elif joins_residual(users, consumers, producer):
                classes[o] = "branch"
            else:
                classes[o] = "other"
    return names, classes


def joins_residual(users, consumers, producer) -> bool:
    """Read only by Adds with a LayerNorm output (the residual stream), through reshapes."""
    if not users:
        return False
    for u in users:
        if u.op_type == "Reshape":
            if not joins_residual(consumers.get(u.output[0], []), consumers, producer):
                return False
        elif not (u.op_type == "Add" and any(producer.get(i) is not None and
                                             producer[i].op_type == "LayerNormalization" for i in u.input)):
            return False
    return True


def ranges(model: onnx.ModelProto, names: list[str], data: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """Largest magnitude per tensor and per channel (last axis) over the calibration samples."""
    from onnx2gemmini.ort_session import run, session
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    wide.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    sess = session(wide)
    feeds = [i.name for i in sess.get_inputs()]
    tensor, channel = {}, {}
    for i in range(len(next(iter(data.values())))):
        for name, value in zip(names, run(sess, names, {k: data[k][i:i + 1] for k in feeds})):
            a = np.abs(np.nan_to_num(value, posinf=0, neginf=0)).reshape(-1, value.shape[-1])
            tensor[name] = max(tensor.get(name, 0.0), float(a.max()))
            channel[name] = np.maximum(channel.get(name, 0.0), a.max(0))
    return tensor, channel


def fake_quantized(model, names, classes, policy, scales, channel) -> onnx.ModelProto:
    """`model` with a Q/DQ pair after every activation the policy keeps int8 and int8 weights."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes, extra, renamed = [], [], {}
    for node in model.graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        del copy.input[:]
        copy.input.extend(renamed.get(i, i) for i in node.input)
        nodes.append(copy)
        for o in node.output:
            how = policy.get(classes.get(o), policy.get("*", "tensor")) if o in classes else None
            if how in (None, "float") or not 0 < scales.get(o, 0) < 1e4:
                continue
            scale = np.maximum(channel[o], 1e-12) / 127 if how == "channel" else np.array(scales[o], np.float64)
            attrs = {"axis": -1} if how == "channel" else {}
            extra += [numpy_helper.from_array(scale.astype(np.float32), o + "/s"),
                      numpy_helper.from_array(np.zeros(scale.shape, np.int8), o + "/z")]
            nodes += [helper.make_node("QuantizeLinear", [o, o + "/s", o + "/z"], [o + "/q"], **attrs),
                      helper.make_node("DequantizeLinear", [o + "/q", o + "/s", o + "/z"], [o + "/dq"], **attrs)]
            renamed[o] = o + "/dq"
    graph_outputs = [o.name for o in model.graph.output]
    for o in graph_outputs:  # an output that got a Q/DQ pair is read after it
        if o in renamed:
            nodes.append(helper.make_node("Identity", [renamed[o]], [o + "/out"]))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    del out.graph.output[:]
    out.graph.output.extend(helper.make_tensor_value_info(o + "/out" if o in renamed else o, TensorProto.FLOAT, None)
                            for o in graph_outputs)
    axis = {}  # a matmul weight's output-channel axis: [K, N] for MatMul and Gemm, [N, K] for Gemm(transB=1)
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1:
            trans = any(a.name == "transB" and a.i for a in node.attribute)
            axis[node.input[1]] = 0 if trans else 1
    for init in out.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype == np.float32 and w.ndim == 2 and min(w.shape) > 8:  # matmul weights, int8
            per_channel = policy.get("weights") == "channel" and init.name in axis
            step = (np.abs(w).max(axis=1 - axis[init.name], keepdims=True) if per_channel else np.abs(w).max()) / 127
            init.CopyFrom(numpy_helper.from_array((np.round(w / step) * step).astype(np.float32), init.name))
    out.graph.initializer.extend(extra)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all_minilm_l6", choices=[k for k, (_, kind) in bench.MODELS.items()
                                                                      if kind == "text"])
    parser.add_argument("--calib-samples", type=int, default=64)
    parser.add_argument("--eval-samples", type=int, default=128)
    args = parser.parse_args()
    import onnx2gemmini as o2g
    calib_texts, eval_texts = bench.sentences(args.calib_samples, args.eval_samples)
    with tempfile.TemporaryDirectory(prefix="o2g-bounds-") as tmp:
        path = bench.MODELS[args.model][0](Path(tmp))
        model = onnx.load(str(path))
        with_types = "token_type_ids" in {i.name for i in model.graph.input}
        calib, evaluation = bench.tokens(calib_texts, with_types), bench.tokens(eval_texts, with_types)
        names, classes = activations(model)
        largest, channel = ranges(model, names, calib)
        ours = o2g.compile(path, calib=calib, input_shape=[f"{k}=1x{bench.SEQ}" for k in calib]).quant.scales
        scales = {n: ours.get(n, largest[n] / 127) for n in names}
        print(f"# {args.model}: {len(names)} activations ({', '.join(f'{c} {list(classes.values()).count(c)}' for c in sorted(set(classes.values())))}); "
              f"{sum(n in ours for n in names)} with onnx2gemmini's scale")
        mask = evaluation["attention_mask"]
        fp32 = bench.pooled(bench.run_onnx(path, evaluation), mask)
        print("| variant | cosine mean | cosine worst |\n|---|---|---|")
        for label, policy in VARIANTS:
            variant = Path(tmp) / "variant.onnx"
            onnx.save(fake_quantized(model, names, classes, policy, scales, channel), str(variant))
            got = bench.figures(fp32, bench.pooled(bench.run_onnx(variant, evaluation), mask))
            print(f"| {label} | {got['cosine_mean']:.4f} | {got['cosine_worst']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
