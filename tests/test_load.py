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
