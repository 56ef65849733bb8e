"""The code blocks of a Markdown page, as the tests that execute docs/ read them.

A fenced block whose info string is `python` or `sh` is code. A block directly preceded by an HTML comment
`<!-- not run: REASON -->` is not executed, and must say why; every other block is. A python block whose
first line is `# file: NAME` is a file the reader saves (the tests write it), not code run in place.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"(?:<!--\s*not run:\s*(?P<why>.*?)\s*-->\s*\n)?^```(?P<lang>[a-z]*)[^\n]*\n(?P<body>.*?)^```\s*$",
                    re.S | re.M)


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    not_run: str | None   # the reason a block is not executed, or None
    line: int

    @property
    def runs(self) -> bool:
        return self.not_run is None

    @property
    def file(self) -> str | None:
        """NAME for a `# file: NAME` block."""
        first = self.body.splitlines()[0] if self.body else ""
        return first.removeprefix("# file:").strip() if first.startswith("# file:") else None


def blocks(page: Path, langs=("python", "sh")) -> list[Block]:
    text = page.read_text()
    return [Block(m["lang"], m["body"], m["why"], text.count("\n", 0, m.start("body")) + 1)
            for m in _FENCE.finditer(text) if m["lang"] in langs]


def tool_path(tmp: Path) -> dict:
    """An environment whose `python` and `onnx2gemmini` are this interpreter and this checkout."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    # Wrapper scripts, not symlinks: a symlink to a virtual environment's interpreter starts Python outside
    # that environment (Python looks for pyvenv.cfg beside the path it was started by).
    interpreter = shlex.quote(sys.executable)
    for name, args in (("python", ""), ("onnx2gemmini", " -m onnx2gemmini.cli")):
        script = bin_dir / name
        if script.is_symlink():
            script.unlink()
        script.write_text(f'#!/bin/sh\nexec {interpreter}{args} "$@"\n')
        script.chmod(0o755)
    path = os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": path}


def run_page(page_blocks: list[Block], cwd: Path, env: dict, timeout: int = 600) -> list[str]:
    """Every runnable block in one `bash` session, as a reader types them into one terminal (a `cd` or a
    variable carries to the next block); `# file:` blocks are saved first, where the session is then.
    Returns the output (stdout and stderr) of each runnable block, in order."""
    script = ["set -euo pipefail"]
    runnable = [b for b in page_blocks if b.runs and b.lang in ("sh", "python")]
    for k, block in enumerate(runnable):
        script.append(f"echo '{MARK}{k}'")
        if block.file:
            script.append(f"cat > {block.file} <<'O2G_FILE_END'\n{block.body}O2G_FILE_END")
        elif block.lang == "sh":
            script.append(block.body)
        else:
            raise AssertionError(f"line {block.line}: a python block to run must be a `# file:` block")
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    parts = proc.stdout.split(MARK)[1:]
    outputs = [part.split("\n", 1)[1] if "\n" in part else "" for part in parts]
    if proc.returncode != 0:
        failed = runnable[len(outputs) - 1]
        raise AssertionError(f"block at line {failed.line} failed (exit {proc.returncode}):\n{failed.body}\n"
                             f"{outputs[-1][-4000:]}")
    return outputs


def expected_lines(page_blocks: list[Block]) -> list[tuple[int, list[str]]]:
    """(index among the runnable blocks of the code block a ```text block follows, its lines). A line with
    `...` is a pattern in which `...` stands for anything; a line that is only `...` stands for omitted lines."""
    pairs, k, last_runs = [], -1, False
    for block in page_blocks:
        if block.lang == "text":
            if last_runs:  # the output of a block that is not run is not checked
                pairs.append((k, [line for line in block.body.splitlines() if line.strip() not in ("", "...")]))
        else:
            last_runs = block.runs
            k += block.runs
    return pairs


def assert_output_matches(output: str, lines: list[str]) -> None:
    for line in lines:
        pattern = ".*".join(re.escape(part) for part in line.split("..."))
        assert re.search(pattern, output), f"expected a line like {line!r} in:\n{output[-3000:]}"


MARK = "@@o2g-doc-block@@"
