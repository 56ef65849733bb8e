"""Progress on long work: a bar on stderr when it is a terminal, plain lines under -v, nothing under -q or
--json (and never on stdout)."""
import os
import pty
import subprocess
import sys

from tests.test_cli import CALIB, EVAL, MODEL, run


def run_on_terminal(*args, cwd):
    """The CLI with stderr on a pseudo-terminal (stdout a pipe): what a user at a shell sees on stderr."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "onnx2gemmini.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=follower, cwd=cwd)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closes with the process
            break
        if not chunk:
            break
        seen += chunk
    out = proc.communicate()[0]
    os.close(leader)
    return proc.returncode, out.decode(), seen.decode(errors="replace")


def test_compile_draws_a_bar_on_a_terminal(tmp_path):
    code, out, err = run_on_terminal(MODEL, "--calib", CALIB, "-o", tmp_path / "o", cwd=tmp_path)
    assert code == 0, err
    assert "compile" in err and "100%" in err
    for phase in ("calibrate", "write"):
        assert phase in err
    assert "%" not in out.replace("% of", "")  # the bar is on stderr only


def test_quiet_and_json_draw_nothing(tmp_path):
    code, out, err = run_on_terminal(MODEL, "--calib", CALIB, "-o", tmp_path / "q", "-q", cwd=tmp_path)
    assert code == 0 and err.strip() == ""
    code, out, err = run_on_terminal("diff", MODEL, "--calib", CALIB, "--num-samples", "4", "--workers", "1",
                                     "--json", cwd=tmp_path)
    assert code == 0 and err.strip() == ""
    assert out.lstrip().startswith("{")


def test_diff_counts_samples_on_a_terminal(tmp_path):
    code, out, err = run_on_terminal("diff", MODEL, "--calib", CALIB, "--data", EVAL, "--num-samples", "6",
                                     "--workers", "1", cwd=tmp_path)
    assert code == 0, err
    assert "diff" in err and "100%" in err


def test_verbose_prints_each_phase_as_a_line(tmp_path):
    proc = run(MODEL, "--calib", CALIB, "-o", tmp_path / "v", "-v", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    for phase in ("load", "calibrate", "quantize", "plan", "tiling"):
        assert any(line.startswith(f"info: {phase}: ") and line.endswith(" s") for line in lines), proc.stderr
    assert "\r" not in proc.stderr  # not a terminal: no bar
