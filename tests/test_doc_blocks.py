"""tests/doc_blocks.py itself: the tools it puts on PATH are this interpreter, with its environment."""
import subprocess
import sys
import venv

from tests.doc_blocks import REPO, tool_path

_PROBE = r"""
import subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.doc_blocks import tool_path
env = tool_path(Path(sys.argv[2]))
print(subprocess.run(["python", "-c", "import sys; print(sys.prefix)"], env=env, capture_output=True, text=True,
                     check=True).stdout.strip())
"""


def test_tool_path_python_keeps_a_virtual_environment(tmp_path):
    """`python` on the harness's PATH runs inside the venv the tests run in (a symlink to the venv's interpreter
    would start the base interpreter, without the venv's packages). The venv's folder has a space and a quote
    in its name, which the wrapper must quote."""
    env_dir = tmp_path / "a venv's dir"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    interpreter = env_dir / "bin" / "python"
    work = tmp_path / "work"
    work.mkdir()
    prefix = subprocess.run([str(interpreter), "-c", _PROBE, str(REPO), str(work)], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert prefix == str(env_dir)


def test_tool_path_runs_this_interpreter_and_this_checkout(tmp_path):
    env = tool_path(tmp_path)
    tool_path(tmp_path)   # a second call over the same folder rewrites the wrappers
    out = subprocess.run(["python", "-c", "import sys, onnx2gemmini; print(sys.prefix); print(onnx2gemmini.__file__)"],
                         env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [sys.prefix, str(REPO / "onnx2gemmini" / "__init__.py")]
    assert subprocess.run(["onnx2gemmini", "--help"], env=env, capture_output=True, text=True).returncode == 0
