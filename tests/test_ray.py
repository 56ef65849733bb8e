"""`diff` and `sweep` on a Ray cluster: a local head started here, the CLI connecting to it by address,
the results equal to the local run. Skips without Ray on a developer machine; CI installs it."""
import json
import os

import pytest

from tests.test_cli import CALIB, MODEL, assert_one_error_line, run

# Ray binds its head to this machine's outward address unless told, before it is imported, that there is no
# cluster beyond this machine: the head and every process of the test stay on 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
if os.environ.get("CI") == "true":
    import ray
else:
    ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def head():
    """A two-CPU Ray head on 127.0.0.1 for this module, stopped at its end."""
    context = ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        address = context.address_info["gcs_address"]
        assert address.startswith("127.0.0.1:"), address
        yield address
    finally:
        ray.shutdown()


def test_diff_on_ray_equals_the_local_run(head):
    args = ["diff", MODEL, "--calib", CALIB, "--num-calib", "16", "--num-samples", "24", "--json"]
    local = run(*args, "--workers", "1")
    remote = run(*args, "--ray", head)
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout) == json.loads(local.stdout)
    assert remote.stdout == local.stdout


def test_sweep_on_ray_equals_the_local_run(head, tmp_path):
    args = ["sweep", MODEL, "--config", "default,chip", "--calib", CALIB, "--num-calib", "4", "--json"]
    local = run(*args, "--workers", "1", "-o", tmp_path / "local")
    remote = run(*args, "--ray", head, "--workers", "2", "-o", tmp_path / "ray")
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout
    assert (tmp_path / "ray" / "sweep.csv").read_text() == (tmp_path / "local" / "sweep.csv").read_text()


def test_unreachable_cluster_is_one_error_line():
    proc = run("diff", MODEL, "--calib", CALIB, "--num-samples", "2", "--ray", "127.0.0.1:1")
    assert_one_error_line(proc, 2, "--ray 127.0.0.1:1")
