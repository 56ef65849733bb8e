"""Shared by the reliability corpus: small models, the one-error-line check, output leftovers."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from tests.helpers import infer_outputs

REPO = Path(__file__).resolve().parents[2]
WEIGHTS = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)


@dataclass
class Result:
    code: int
    out: str
    err: str


def conv_nodes() -> list:
    return [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]


def conv_model(weights: np.ndarray = WEIGHTS, shape=(1, 3, 8, 8)) -> onnx.ModelProto:
    """Conv 3->4 (3x3) + Relu on a 1x3x8x8 input: compiles in well under a second."""
    return infer_outputs(conv_nodes(), {"x": list(shape)}, {"W": weights})


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def assert_one_error(result: Result, code: int, *fragments: str) -> str:
    """Exit `code`, exactly one `error:` line on stderr naming every fragment, no traceback."""
    assert result.code == code, (result.code, result.err)
    errors = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.err
    assert "Traceback" not in result.err, result.err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def leftovers(parent: Path, name: str) -> list[Path]:
    """OUT itself and any staging folder of it under `parent`."""
    return sorted(p for p in parent.iterdir() if p.name == name or p.name.startswith(f".{name}."))


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> bytes)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
