"""The output folder: never delete what must not be deleted, replace atomically, survive SIGKILL, honour umask."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx2gemmini as o2g
from onnx2gemmini import outdir, output
from tests.reliability.common import REPO, assert_one_error, conv_model, leftovers, save, tree_bytes


@pytest.fixture
def project(tmp_path, monkeypatch):
    """work/ (the current directory) holding m.onnx, calib.npz, c.json, a zoo dir and weights/ (external data)."""
    work = tmp_path / "work"
    (work / "weights").mkdir(parents=True)
    model = conv_model()
    onnx.save(model, work / "m.onnx")
    onnx.save(model, work / "ext.onnx", save_as_external_data=True, location="weights/w.bin", size_threshold=0)
    np.savez(work / "calib.npz", x=np.ones((2, 1, 3, 8, 8), np.float32))
    (work / "c.json").write_text('{"sp_kib": 128}')
    zoo = work / "zoo" / "test_data_set_0"
    zoo.mkdir(parents=True)
    (zoo / "input_0.pb").write_bytes(onnx.numpy_helper.from_array(np.ones((1, 3, 8, 8), np.float32))
                                     .SerializeToString())
    monkeypatch.chdir(work)
    return work


REFUSED = {
    # id: (args after the model, fragments of the error line); every one with --force
    "dot": (["-o", "."], ["current directory"]),
    "empty_string": (["-o", ""], ["current directory"]),
    "parent_of_cwd": (["-o", ".."], ["current directory"]),
    "root": (["-o", "/"], ["current directory"]),
    "contains_the_calib_file": (["--calib", "sub/calib.npz", "-o", "sub"], ["input sub/calib.npz"]),
    "is_the_zoo_dir": (["--calib", "zoo", "-o", "zoo"], ["input zoo"]),
    "inside_the_zoo_dir": (["--calib", "zoo", "-o", "zoo/test_data_set_0"], ["input"]),
    "contains_the_config": (["--config", "sub/c.json", "-o", "sub"], ["input sub/c.json"]),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_outputs_delete_nothing(cli, project, case):
    args, fragments = REFUSED[case]
    sub = project / "sub"
    sub.mkdir()
    shutil.copy(project / "calib.npz", sub)
    shutil.copy(project / "c.json", sub)
    before = tree_bytes(project)
    assert_one_error(cli("m.onnx", *args, "--force"), 2, *fragments)
    assert tree_bytes(project) == before


def test_out_holding_the_model_is_refused(cli, tmp_path, monkeypatch):
    (tmp_path / "proj").mkdir()
    save(conv_model(), tmp_path / "proj" / "m.onnx")
    monkeypatch.chdir(tmp_path)
    assert_one_error(cli("proj/m.onnx", "-o", "proj", "--force"), 2, "input proj/m.onnx")
    assert (tmp_path / "proj" / "m.onnx").exists()


def test_out_holding_external_data_is_refused(cli, project):
    """weights/ holds only ext.onnx's external data, which --force would delete."""
    assert_one_error(cli("ext.onnx", "-o", "weights", "--force"), 2, "w.bin")
    assert (project / "weights" / "w.bin").stat().st_size == 432
    assert cli("ext.onnx", "-o", "elsewhere", "-q").code == 0


def test_api_write_protects_the_inputs_too(project):
    """Compiled.write knows what the compile read: the model, its external data, the data and config files."""
    (project / "sub").mkdir()
    shutil.copy(project / "c.json", project / "sub")
    compiled = o2g.compile(project / "ext.onnx", calib=project / "zoo", config=project / "sub" / "c.json")
    for out, fragment in (("weights", "w.bin"), ("zoo", "zoo"), ("sub", "c.json")):
        with pytest.raises(o2g.OutputError, match=fragment):
            compiled.write(out, force=True)
    assert sorted(tree_bytes(project / "weights")) == ["w.bin"] and (project / "sub" / "c.json").exists()


def test_out_that_is_a_file_or_a_broken_link(cli, project):
    (project / "file").write_text("x")
    assert_one_error(cli("m.onnx", "-o", "file", "--force"), 2, "not a directory")
    (project / "dangling").symlink_to(project / "nowhere")
    assert_one_error(cli("m.onnx", "-o", "dangling"), 2, "broken symbolic link")
    assert (project / "dangling").is_symlink() and (project / "file").read_text() == "x"


def test_symlink_to_an_empty_directory_is_followed_and_never_replaced_through(cli, project):
    (project / "real").mkdir()
    (project / "link").symlink_to(project / "real")
    assert cli("m.onnx", "-o", "link", "-q").code == 0
    assert (project / "link").is_symlink() and (project / "real" / "report.json").exists()
    # non-empty now: the folder behind the link is not replaced, with or without --force
    (project / "real" / "mine.txt").write_text("keep")
    for force in ([], ["--force"]):
        assert_one_error(cli("m.onnx", "-o", "link", *force), 2, "symbolic link to a non-empty folder")
    assert (project / "link").is_symlink() and (project / "real" / "mine.txt").read_text() == "keep"
    assert leftovers(project, "real") == [project / "real"]
    # the folder itself, named as such, is replaced as any other
    assert cli("m.onnx", "-o", "real", "--force", "-q").code == 0 and not (project / "real" / "mine.txt").exists()


@pytest.mark.parametrize("mask", [0o022, 0o007, 0o077])
def test_created_folders_honour_the_umask(project, mask):
    compiled = o2g.compile(conv_model())
    old = os.umask(mask)
    try:
        out = compiled.write(project / "out")
    finally:
        os.umask(old)
    for folder in (out, out / "c"):
        assert folder.stat().st_mode & 0o777 == 0o777 & ~mask, oct(folder.stat().st_mode)
    assert (out / "report.json").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_failed_write_keeps_the_old_tree(project, monkeypatch):
    compiled = o2g.compile(conv_model())
    out = project / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")

    def fail(report):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output, "report_json", fail)
    with pytest.raises(o2g.OutputError, match="No space left"):
        compiled.write(out, force=True)
    assert tree_bytes(out) == {"keep.txt": b"old"} and leftovers(project, "out") == [out]


def _staging(parent: Path, name: str, owner: "dict | None") -> Path:
    folder = parent / f".{name}{outdir.STAGING_TAG}{os.urandom(4).hex()}"
    (folder / "tree").mkdir(parents=True)
    (folder / "tree" / "partial.c").write_text("/* half")
    if owner is not None:
        (folder / outdir.MARKER).write_text(json.dumps({"tool": "onnx2gemmini", **owner}))
    return folder


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_our_stale_folders_are_removed(cli, project):
    host = socket.gethostname()
    dead = _staging(project, "out", {"pid": _dead_pid(), "host": host})
    alive = _staging(project, "out", {"pid": os.getppid(), "host": host})
    foreign = _staging(project, "out", None)
    elsewhere = _staging(project, "out", {"pid": _dead_pid(), "host": host + "-other"})
    other_out = _staging(project, "other", {"pid": _dead_pid(), "host": host})
    assert cli("m.onnx", "-o", "out", "-q").code == 0
    assert not dead.exists()
    assert alive.exists() and foreign.exists() and elsewhere.exists() and other_out.exists()


# ---- SIGKILL while --force replaces OUT ----------------------------------------------------------------

KILLER = r"""
import os, signal, sys
from pathlib import Path
import onnx2gemmini.emit.c as c
import onnx2gemmini.outdir as w

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def after(function, check=lambda *a: True):
    def hooked(*args, **kwargs):
        result = function(*args, **kwargs)
        if check(*args):
            die()
        return result
    return hooked

point = os.environ["O2G_KILL_AT"]
if point == "writing":            # the C sources are written, the rest of the tree is not
    c.write_c = after(c.write_c)
elif point == "exchanged":        # the new tree is in place, the old one not deleted yet
    w._exchange = after(w._exchange)
elif point == "deleting":         # half of the old tree deleted
    def half_then_die(path, *args, **kwargs):
        files = sorted(p for p in Path(path).rglob("*") if p.is_file())
        for p in files[: len(files) // 2]:
            p.unlink()
        die()
    w.shutil.rmtree = half_then_die
elif point == "between_renames":  # no renameat2: the old tree moved away, the new one not yet in
    w._exchange = lambda a, b: False
    w.os.rename = after(w.os.rename, lambda src, dst: Path(dst).name == "old")
from onnx2gemmini.cli import main
sys.argv = ["onnx2gemmini"] + sys.argv[1:]
sys.exit(main())
"""


def _normalized(tree: dict[str, bytes]) -> dict[str, bytes]:
    """Timings are the only bytes allowed to differ between two compiles."""
    tree = dict(tree)
    if "report.json" in tree:
        report = json.loads(tree["report.json"])
        report.pop("timing")
        tree["report.json"] = json.dumps(report, sort_keys=True).encode()
    if "report.md" in tree:
        tree["report.md"] = b"\n".join(l for l in tree["report.md"].splitlines() if b"compile time" not in l)
    return tree


def _old_tree(out: Path) -> dict[str, bytes]:
    for i in range(12):
        (out / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (out / f"d{i % 3}" / f"f{i}.txt").write_bytes(b"old %d\n" % i * 100)
    return tree_bytes(out)


def _run_killer(folder: Path, point: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "O2G_KILL_AT": point, "PYTHONPATH": os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    return subprocess.run([sys.executable, "-c", KILLER, "m.onnx", "-o", "out", "--force", "-q"], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def new_tree(tmp_path_factory) -> dict[str, bytes]:
    """What the killed command writes when it is not killed (same argv, same relative paths)."""
    folder = tmp_path_factory.mktemp("reference")
    save(conv_model(), folder / "m.onnx")
    _old_tree(folder / "out")
    proc = _run_killer(folder, "nowhere")
    assert proc.returncode == 0, proc.stderr
    assert leftovers(folder, "out") == [folder / "out"]
    return _normalized(tree_bytes(folder / "out"))


@pytest.mark.parametrize("point,survivor", [("writing", "old"), ("exchanged", "new"), ("deleting", "new"),
                                            ("between_renames", None)])
def test_sigkill_during_force_leaves_a_complete_tree(cli, tmp_path, monkeypatch, new_tree, point, survivor):
    save(conv_model(), tmp_path / "m.onnx")
    out = tmp_path / "out"
    old_tree = _old_tree(out)
    proc = _run_killer(tmp_path, point)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    stale = [p for p in leftovers(tmp_path, "out") if p != out]
    assert len(stale) == 1 and (stale[0] / outdir.MARKER).exists()
    if survivor == "old":
        assert tree_bytes(out) == old_tree
    elif survivor == "new":
        assert _normalized(tree_bytes(out)) == new_tree
    else:  # the fallback's one window: OUT is missing until the next run puts the old tree back
        assert not out.exists()
        assert outdir.clean_stale(out) == stale
        assert tree_bytes(out) == old_tree
    # the next run removes the stale folder and replaces OUT as asked
    monkeypatch.chdir(tmp_path)
    assert cli("m.onnx", "-o", "out", "--force", "-q").code == 0
    assert leftovers(tmp_path, "out") == [out] and set(tree_bytes(out)) == set(new_tree)
