"""parallel.py and `diff --workers`: results in item order, the same bit for bit for any number of workers."""
import json

import pytest

import onnx2gemmini as o2g
from onnx2gemmini import parallel
from onnx2gemmini.compare import run_diff
from onnx2gemmini.data import load_data
from onnx2gemmini.errors import DataError, UsageError
from tests.test_cli import CALIB, EVAL, MODEL, assert_one_error_line, run


def _scaler(factor):
    """A setup: the per-item function multiplies by `factor`; item -1 is bad data."""
    def scale(item):
        if item == -1:
            raise DataError("item -1 is bad")
        return item * factor
    return scale


def test_in_process_and_on_processes_in_item_order_errors_keep_their_type():
    items = list(range(23)) + [-1, 5]
    done = []
    here, there = [], []
    with pytest.raises(DataError, match="item -1 is bad"):
        for value in parallel.map_ordered(_scaler, 3, items, workers=1, chunk=1, progress=done.append):
            here.append(value)
    with pytest.raises(DataError, match="item -1 is bad"):
        for value in parallel.map_ordered(_scaler, 3, items, workers=2, chunk=4):
            there.append(value)
    assert here == [3 * i for i in range(23)] and sum(done) == 23
    assert there == here[:20]  # every chunk before the failing one, in order


@pytest.mark.parametrize("workers", [0, -2, True, 1.5])
def test_workers_must_be_a_positive_integer(workers):
    with pytest.raises(UsageError, match="--workers"):
        parallel.check_workers(workers)


def test_diff_on_workers_equals_one_worker():
    """The CLI with two worker processes prints the document one in-process worker computes."""
    compiled = o2g.compile(MODEL, calib=CALIB, num_calib=16)
    data = load_data(EVAL, compiled.graph.inputs).head(12)
    seen = []
    one = run_diff(compiled, data, workers=1, progress=lambda n, total: seen.append((n, total)))
    assert sum(n for n, _ in seen) == 12 and {t for _, t in seen} == {12}
    assert one["verdict"]["passed"] and one["samples"] == 12
    proc = run("diff", MODEL, "--calib", CALIB, "--num-calib", "16", "--data", EVAL, "--num-samples", "12",
               "--workers", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(json.dumps(one, default=float))
    assert_one_error_line(run("diff", MODEL, "--workers", "0"), 2, "--workers")


def test_ray_without_ray_installed_is_a_usage_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(UsageError, match=r"onnx2gemmini\[ray\]"):
        list(parallel.map_ordered(_scaler, 1, [1], ray="auto"))
