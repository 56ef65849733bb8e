"""The tutorials in docs/ run as written: every code block not marked `not run`, in order, in one shell, with
the output each page shows. The RISC-V tools are required in CI (skipped without them elsewhere)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.doc_blocks import REPO, assert_output_matches, blocks, expected_lines, run_page, tool_path
from tests.emit.c_fake_gemmini import make_tree

DOCS = REPO / "docs"
SPIKE_PAGE = DOCS / "tutorial_pytorch_spike.md"
CHIPYARD_PAGE = DOCS / "tutorial_chipyard_firesim.md"
MLIR_PAGE = DOCS / "tutorial_buddy_mlir.md"
ALL = ("python", "sh", "text")


def need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the tutorials; missing: {', '.join(missing)}")
        pytest.skip(f"needs {', '.join(missing)} (gcc-riscv64-unknown-elf, picolibc-riscv64-unknown-elf, "
                    "device-tree-compiler, pip spike)")


def run_tutorial(page, cwd, env) -> list[str]:
    page_blocks = blocks(page, ALL)
    outputs = run_page(page_blocks, cwd, env)
    for k, lines in expected_lines(page_blocks):
        assert_output_matches(outputs[k], lines)
    return outputs


@pytest.mark.parametrize("page", [SPIKE_PAGE, CHIPYARD_PAGE, MLIR_PAGE], ids=lambda p: p.stem)
def test_every_block_runs_or_says_why(page):
    code = blocks(page)
    assert len([b for b in code if b.runs]) >= 3
    assert all(b.not_run.strip() for b in code if not b.runs)
    if page == SPIKE_PAGE:  # from a PyTorch model to Spike, everything but installing packages runs
        assert [b.body.split()[0] for b in code if not b.runs] == ["sudo"]


def test_from_pytorch_to_a_pass_on_spike(tmp_path):
    need("riscv64-unknown-elf-gcc", "spike", "dtc", "make")
    pytest.importorskip("torch")
    outputs = run_tutorial(SPIKE_PAGE, tmp_path, tool_path(tmp_path))
    assert "PASS (exact)" in outputs[-1] and "total:" in outputs[-1]
    report = json.loads((tmp_path / "tiny_gemmini" / "report.json").read_text())
    assert report["quality"]["source"] == "diff" and report["model"]["path"] == "<TinyNet>"


def test_the_chipyard_flow_against_a_stand_in_tree(tmp_path):
    """make baremetal GEMMINI=$CHIPYARD/... with a stand-in gemmini-rocc-tests (its host gemmini.h), picolibc
    for the C library; the binary runs on plain Spike with the output the page shows for Spike+Gemmini."""
    need("riscv64-unknown-elf-gcc", "spike", "dtc", "make")
    (tmp_path / "models").symlink_to(REPO / "models")
    chipyard = tmp_path / "chipyard"
    make_tree(chipyard / "generators" / "gemmini" / "software" / "gemmini-rocc-tests")
    env = {**tool_path(tmp_path), "CHIPYARD": str(chipyard), "LIBC_CFLAGS": "--specs=picolibc.specs",
           "LIBC_LDLIBS": "-lm -lc -lgcc"}
    run_tutorial(CHIPYARD_PAGE, tmp_path, env)
    binary = tmp_path / "digits_gemmini" / "c" / "model-baremetal"
    proc = subprocess.run(["spike", str(binary)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spike_output = next(lines for k, lines in _text_after(CHIPYARD_PAGE, "spike --extension=gemmini"))
    assert_output_matches(proc.stdout, spike_output)
    workload = json.loads((tmp_path / "digits-gemmini.json").read_text())
    assert workload == {"name": "digits-gemmini", "base": "bare", "bin": "model-baremetal"}
    assert (tmp_path / "digits-gemmini" / workload["bin"]).read_bytes() == binary.read_bytes()


def _text_after(page, command: str):
    """The ```text block following the code block that contains `command` (run or not)."""
    page_blocks = blocks(page, ALL)
    for i, block in enumerate(page_blocks[:-1]):
        if block.lang != "text" and command in block.body and page_blocks[i + 1].lang == "text":
            body = page_blocks[i + 1].body
            yield i, [line for line in body.splitlines() if line.strip() not in ("", "...")]


def test_the_buddy_mlir_flow_up_to_buddy_opt(tmp_path):
    """The page's runnable part (PyTorch, export, compile, what was written), then the commands its Buddy step
    shows: `make -n` of the emitted Makefile prints them (Buddy, gemmini-rocc-tests and Spike are not in CI;
    tests/emit/test_mlir_program.py runs the same self-test natively)."""
    need("make", os.environ.get("CC", "cc"))
    pytest.importorskip("torch")
    run_tutorial(MLIR_PAGE, tmp_path, tool_path(tmp_path))
    out = tmp_path / "two_heads_gemmini"
    for name in ("Makefile", "model_checked.mlir", "o2g_mlir_selftest.c", "o2g_gemmini_intrinsics.c", "o2g_heap.c"):
        assert (out / "mlir" / name).exists(), name
    rocc = tmp_path / "rocc"
    make_tree(rocc)
    shown = next(lines for _, lines in _text_after(MLIR_PAGE, "make -C two_heads_gemmini/mlir BUDDY_OPT"))
    dry = subprocess.run(["make", "-n", "-C", str(out / "mlir"), "BUDDY_OPT=/opt/buddy/buddy-opt",
                          "BUDDY_TRANSLATE=/opt/buddy/buddy-translate", "LLC=llc-22", f"GEMMINI={rocc}",
                          "LIBC_CFLAGS=--specs=picolibc.specs", "LIBC_LDLIBS=-lm -lc -lgcc"],
                         capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert_output_matches(re.sub(r"\s*\\\n\s*", " ", dry.stdout), shown)  # recipe lines joined
