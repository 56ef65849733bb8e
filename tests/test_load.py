"""load.py's onnxsim import: without the packages onnxsim would pull in for nothing (seconds of a compile),
the same simplified model as when they are loaded, and those packages still importable afterwards."""
import subprocess
import sys

from tests.test_cli import MODEL

PROBE = """
import hashlib, sys
{first}
from onnx2gemmini.load import load
model = load(sys.argv[1]).model
loaded = ["torch" in sys.modules, "sympy" in sys.modules]
import sympy
print(hashlib.sha256(model.SerializeToString()).hexdigest(), *loaded, sympy.Integer(2) + 1)
"""


def probe(first: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(first=first), str(MODEL)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_onnxsim_without_torch_gives_the_same_model():
    digest, *rest = probe("")
    assert rest == ["False", "False", "3"]  # neither was imported, and sympy imports fine afterwards
    assert probe("import torch, sympy") == [digest, "True", "True", "3"]


def test_a_wrongly_declared_output_shape_is_ignored_with_a_warning(tmp_path, caplog):
    """Exporters sometimes declare an output's shape wrongly; onnxruntime runs such models, so do we."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    import onnx2gemmini as o2g

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 5])],  # the node computes [1, 4]
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 4], np.linspace(-1, 1, 32).tolist())])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with caplog.at_level("WARNING", logger="onnx2gemmini"):
        compiled = o2g.compile(path)
    assert compiled.run({"x": np.ones((1, 8), np.float32)})["z"].shape == (1, 4)
    assert any("declares shape" in r.getMessage() for r in caplog.records)


def test_a_sub_model_with_stale_dynamic_declarations_compiles_at_the_given_shape(tmp_path):
    """onnx.utils.extract_model keeps the parent's dynamic value_info and output shapes; from them onnxsim took
    the model as dynamic again, gave the inputs their dynamic dimensions back and folded no Shape op, so a
    sub-model cut from a dynamic export could not compile even with --input-shape."""
    import numpy as np
    import onnx
    import onnx.utils
    from onnx import TensorProto, helper

    import onnx2gemmini as o2g

    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 4], np.linspace(-1, 1, 32).tolist())],
        value_info=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])])
    parent = tmp_path / "parent.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), parent)
    part = tmp_path / "part.onnx"
    onnx.utils.extract_model(str(parent), str(part), ["x"], ["z"])
    compiled = o2g.compile(part, input_shape=["x=1x5x8"])
    assert compiled.run({"x": np.ones((1, 5, 8), np.float32)})["z"].shape == (1, 5, 4)
