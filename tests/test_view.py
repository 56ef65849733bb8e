"""view.py (`onnx2gemmini view OUT`): Netron serves OUT/model.annotated.onnx on localhost; without Netron,
or without an annotated model, one UsageError says what to do."""
from __future__ import annotations

import socket
import sys
import urllib.request

import numpy as np
import pytest

import onnx2gemmini as o2g
from onnx2gemmini.view import view
from tests.reliability.common import conv_model


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    calib = np.random.default_rng(0).standard_normal((2, 1, 3, 8, 8)).astype(np.float32)
    return o2g.compile(conv_model(), calib=calib).write(tmp_path_factory.mktemp("view") / "out")


def test_without_netron_one_usage_error(out, monkeypatch):
    monkeypatch.setitem(sys.modules, "netron", None)  # import netron now raises ImportError
    with pytest.raises(o2g.UsageError, match=r"Netron is not installed \(pip install netron\)") as info:
        view(out, browse=False, wait=False)
    assert "\n" not in str(info.value) and "model.annotated.onnx" in str(info.value)


@pytest.mark.parametrize("case", ["missing", "no_annotated_model"])
def test_a_folder_without_the_model_is_a_usage_error(tmp_path, case):
    folder = tmp_path / "out"
    if case == "no_annotated_model":
        folder.mkdir()
    with pytest.raises(o2g.UsageError, match="view: .*(not a directory|no annotated model)"):
        view(folder, browse=False, wait=False)


def test_netron_serves_the_annotated_model(out):
    netron = pytest.importorskip("netron", reason="Netron is optional (pip install netron)")
    address = view(out, browse=False, wait=False)
    try:
        host, port = address
        assert host in ("localhost", "127.0.0.1")
        page = urllib.request.urlopen(f"http://{host}:{port}/", timeout=30).read()
        served = urllib.request.urlopen(f"http://{host}:{port}/data/model.annotated.onnx", timeout=30).read()
    finally:
        netron.stop(address)
    assert b"<html" in page.lower()
    assert served == (out / "model.annotated.onnx").read_bytes()


def test_a_busy_port_is_a_usage_error(out):
    pytest.importorskip("netron", reason="Netron is optional (pip install netron)")
    with socket.socket() as busy:
        busy.bind(("localhost", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(o2g.UsageError, match=f"cannot serve on localhost port {port}: "):
            view(out, port=port, browse=False, wait=False)


def test_the_command_serves_until_interrupted_and_refuses_a_wrong_folder(out, tmp_path):
    """`onnx2gemmini view OUT --no-browser --port P` serves the model; a folder without one is exit 2."""
    import subprocess
    import time

    from tests.test_cli import assert_one_error_line, run

    assert_one_error_line(run("view", tmp_path / "nothing"), 2, "view:", "not a directory")
    pytest.importorskip("netron", reason="Netron is optional (pip install netron)")
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "onnx2gemmini.cli", "view", str(out), "--no-browser",
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://localhost:{port}/", timeout=2) as page:
                    assert page.status == 200
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("netron did not serve: " + proc.stderr.read1().decode(errors="replace"))
    finally:
        proc.terminate()
        proc.wait(timeout=20)
