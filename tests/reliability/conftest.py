import logging
import resource

import pytest

from onnx2gemmini.cli import main
from tests.reliability.common import Result


@pytest.fixture
def cli(capsys):
    """Run the command line in this process (no interpreter start-up): Result(code, stdout, stderr)."""
    def run(*args) -> Result:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    yield run
    logger = logging.getLogger("onnx2gemmini")  # main() points it at the captured stderr
    logger.handlers[:] = []
    logger.propagate = True


@pytest.fixture
def memory_cap():
    """Address space capped at the current size + 1.5 GiB: a size guard that regresses fails with a
    MemoryError at once instead of allocating gigabytes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as f:
        vm_kib = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    cap = vm_kib * 1024 + (3 << 29)
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
