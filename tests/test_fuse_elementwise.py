"""passes/fuse_elementwise.py: an elementwise chain of one tensor (GELU written out, Mish, ...) is one lookup
table, checked against onnxruntime's float evaluation of the original chain."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

from onnx2gemmini import cpu
from onnx2gemmini.load import load
from onnx2gemmini.ops import activations
from onnx2gemmini.passes import fuse_elementwise, run_passes
from onnx2gemmini.config import load_config
from onnx2gemmini.graph import from_onnx
from tests.helpers import assert_matches_ort, compile_and_diff, infer_outputs, rng

SQRT2 = np.float32(math.sqrt(2))


def after_matmul(chain_nodes, inits=None, outputs=("y",), tail=True):
    """x [1, 6, 16] -> MatMul (a Gemmini matmul) -> h -> the chain -> g -> MatMul -> y; without `tail` the
    chain makes y, a model output."""
    r = rng(7)
    inits = {"w": r.normal(0, 0.5, (16, 24)).astype(np.float32), **(inits or {})}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj")] + chain_nodes
    if tail:
        for n in chain_nodes:
            n.output[:] = ["g" if o == "y" else o for o in n.output]
            n.input[:] = ["g" if i == "y" else i for i in n.input]
        inits["w_out"] = r.normal(0, 0.3, (24, 8)).astype(np.float32)
        nodes.append(helper.make_node("MatMul", ["g", "w_out"], ["y"], name="head"))
    return infer_outputs(nodes, {"x": [1, 6, 16]}, inits, outputs=outputs)


GELU_CONSTANTS = {"r2": SQRT2, "one": np.float32(1), "half": np.float32(0.5)}


def torch_gelu_nodes():
    """nn.GELU as torch exports it below opset 20: Div, Erf, Add, Mul(x, .), Mul(., 0.5)."""
    return [helper.make_node("Div", ["h", "r2"], ["d"], name="div"), helper.make_node("Erf", ["d"], ["e"], name="erf"),
            helper.make_node("Add", ["e", "one"], ["a"], name="add"), helper.make_node("Mul", ["h", "a"], ["m"], name="mul"),
            helper.make_node("Mul", ["m", "half"], ["y"], name="mul_half")]


def torch_gelu(tail=True):
    return after_matmul(torch_gelu_nodes(), GELU_CONSTANTS, tail=tail)


def hf_gelu():
    """x * 0.5 * (1 + erf(x / sqrt 2)) as written in transformers' BERT: the halving comes first."""
    return after_matmul([helper.make_node("Mul", ["h", "half"], ["hh"], name="halve"),
                         helper.make_node("Mul", ["h", "inv_r2"], ["d"], name="scale"),
                         helper.make_node("Erf", ["d"], ["e"], name="erf"),
                         helper.make_node("Add", ["one", "e"], ["a"], name="add"),
                         helper.make_node("Mul", ["hh", "a"], ["y"], name="mul")],
                        {"half": np.float32(0.5), "inv_r2": np.float32(1 / math.sqrt(2)), "one": np.float32(1)})


def tanh_gelu():
    """GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with an integer exponent."""
    return after_matmul([helper.make_node("Pow", ["h", "three"], ["p"], name="cube"),
                         helper.make_node("Mul", ["p", "k"], ["pk"], name="mul_k"),
                         helper.make_node("Add", ["h", "pk"], ["s"], name="add_x"),
                         helper.make_node("Mul", ["s", "c"], ["sc"], name="mul_c"),
                         helper.make_node("Tanh", ["sc"], ["t"], name="tanh"),
                         helper.make_node("Add", ["t", "one"], ["a"], name="add_one"),
                         helper.make_node("Mul", ["h", "half"], ["hh"], name="halve"),
                         helper.make_node("Mul", ["hh", "a"], ["y"], name="mul")],
                        {"three": np.int64(3), "k": np.float32(0.044715),
                         "c": np.float32(math.sqrt(2 / math.pi)), "one": np.float32(1), "half": np.float32(0.5)})


def mish():
    """x * tanh(softplus(x)): a gate fuse_gate does not take (tanh of softplus)."""
    return after_matmul([helper.make_node("Softplus", ["h"], ["sp"], name="softplus"),
                         helper.make_node("Tanh", ["sp"], ["t"], name="tanh"),
                         helper.make_node("Mul", ["h", "t"], ["y"], name="mul")])


def rewritten(model):
    graph, changes = run_passes(from_onnx(load(model).model), load_config("default"))
    return graph, [c for c in changes if c.startswith("fuse_elementwise")]


def chain_of(graph):
    return next(n for n in graph.nodes if n.op_type == fuse_elementwise.OP_TYPE)


CHAINS = {"torch_gelu": (torch_gelu, 5), "hf_gelu": (hf_gelu, 5), "tanh_gelu": (tanh_gelu, 8), "mish": (mish, 3)}


@pytest.mark.parametrize("name", CHAINS)
def test_a_chain_of_one_tensor_becomes_one_lookup_table(name):
    build, length = CHAINS[name]
    model = build()
    graph, changes = rewritten(model)
    assert [n.op_type for n in graph.nodes] == ["MatMul", fuse_elementwise.OP_TYPE, "MatMul"], changes
    node = chain_of(graph)
    assert node.inputs == ["h"] and node.outputs == ["g"] and len(node.fused.chain) == length
    compiled, result = assert_matches_ort(model, samples=6)
    cpu_steps = [s for s in compiled.plan.steps if s.kind == "cpu"]
    assert [type(s.params).__name__ for s in cpu_steps] == ["Quantize", "Lut"]  # the model input, the chain
    layer = next(r for r in result["layers"] if r["name"] == node.name)
    assert layer["tolerance_lsb"] == 1 and layer["max_lsb_vs_ort_qdq"] <= 1


def test_the_table_is_the_chain_evaluated_at_every_int8_input():
    """The fused function equals the ops run one after another in float32, as onnxruntime runs them."""
    node = chain_of(rewritten(torch_gelu())[0])
    x = np.arange(-128, 128, dtype=np.float32) * np.float32(0.05)
    direct = np.float32(0.5) * (x * (np.asarray(activations._erf(x / SQRT2), np.float32) + np.float32(1)))
    np.testing.assert_array_equal(activations.chain_function(node.fused.chain)(x, {}), direct)
    exact_gelu = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(direct, exact_gelu, atol=1e-6)


def test_a_perturbed_table_fails_diff():
    """Negative control: a chain evaluated without its last op (x * (1 + erf), twice GELU) fails diff."""
    original = activations.chain_function
    try:
        activations.chain_function = lambda chain: original(chain[:-1])
        _, result = compile_and_diff(torch_gelu(), samples=6)
    finally:
        activations.chain_function = original
    assert not result["verdict"]["passed"]


def test_fewer_cpu_steps_and_no_less_accuracy_than_op_by_op(monkeypatch):
    """The chain's 5 CPU steps become 1, and the output is at least as close to fp32 (one rounding instead of
    five; one estimator for both, so that the held-out choice does not pick different ranges)."""
    import onnx2gemmini.passes as passes
    model = torch_gelu()
    fused, fused_result = compile_and_diff(model, samples=16, calib_method="mse")
    monkeypatch.setattr(passes, "PASSES", tuple(p for p in passes.PASSES if p[0] != "fuse_elementwise"))
    plain, plain_result = compile_and_diff(model, samples=16, calib_method="mse")
    cpu_count = lambda c: sum(s.kind == "cpu" for s in c.plan.steps)  # noqa: E731
    assert cpu_count(plain) - cpu_count(fused) == 4
    sqnr = lambda r: r["outputs"]["y"]["fp32_vs_int8"]["sqnr_db"]  # noqa: E731
    assert fused_result["verdict"]["passed"] and sqnr(fused_result) >= sqnr(plain_result)


def test_a_result_read_elsewhere_stays_outside_the_chain():
    """Erf's output is also a model output: Div and Erf are one table of h, and Add, Mul, Mul (functions of
    both h and that output) stay as they are."""
    graph, _ = rewritten(after_matmul(torch_gelu_nodes(), GELU_CONSTANTS, outputs=("y", "e")))
    assert [n.op_type for n in graph.nodes] == ["MatMul", fuse_elementwise.OP_TYPE, "Add", "Mul", "Mul", "MatMul"]
    node = chain_of(graph)
    assert node.outputs == ["e"] and [op for op, _, _ in node.fused.chain] == ["Div", "Erf"]


@pytest.mark.parametrize("case", ["two_tensors", "per_channel_constant", "single_op"])
def test_what_is_not_a_chain_of_one_tensor(case):
    w2 = rng(8).normal(0, 0.5, (16, 24)).astype(np.float32)
    if case == "two_tensors":  # tanh(h) + g: two activations
        model = infer_outputs([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["x", "w2"], ["g"]),
                               helper.make_node("Tanh", ["h"], ["t"]), helper.make_node("Add", ["t", "g"], ["y"])],
                              {"x": [1, 6, 16]}, {"w": w2, "w2": w2 * 0.5})
        expected = ["MatMul", "MatMul", "Tanh", "Add"]
    elif case == "per_channel_constant":  # tanh(h) * per-channel scale: not a function of h's value alone
        model = after_matmul([helper.make_node("Tanh", ["h"], ["t"]), helper.make_node("Mul", ["t", "k"], ["y"])],
                             {"k": rng(9).uniform(0.5, 2, 24).astype(np.float32)}, tail=False)
        expected = ["MatMul", "Tanh", "Mul"]
    else:  # one op: already one step
        model = after_matmul([helper.make_node("Tanh", ["h"], ["y"])], tail=False)
        expected = ["MatMul", "Tanh"]
    graph, changes = rewritten(model)
    assert [n.op_type for n in graph.nodes] == expected and not changes


def test_the_pass_knows_only_ops_the_tables_evaluate():
    assert fuse_elementwise.UNARY <= set(activations.FUNCTIONS)
    assert fuse_elementwise.BINARY == set(activations.BINARY)


def test_a_division_by_zero_is_not_finite():
    """A chain dividing by a constant 0 can write inf: it stays int8 at a model output (chain_is_finite)."""
    assert activations.chain_is_finite((("Div", (("x",), ("const", 2.0, "float32")), ()),))
    assert not activations.chain_is_finite((("Div", (("x",), ("const", 0.0, "float32")), ()),))
    assert not activations.chain_is_finite((("Div", (("const", 1.0, "float32"), ("x",)), ()),))


def test_a_chain_model_output_is_written_float32():
    """A finite chain at a model output is a float32 table (quantize.float_tensors), like a lone activation."""
    compiled, result = compile_and_diff(torch_gelu(tail=False), samples=6)
    assert compiled.plan.tensors[compiled.plan.outputs[0]].dtype == "float32"
    lut = compiled.plan.steps[-1]
    assert isinstance(lut.params, cpu.FloatLut) and result["verdict"]["passed"]
