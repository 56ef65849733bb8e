import os

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import ort_int8_is_exact

settings.register_profile("default", deadline=None, max_examples=15,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", deadline=None, max_examples=25, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")


@pytest.fixture(autouse=True, scope="session")
def _ort_int8_exact():
    if not ort_int8_is_exact():
        pytest.exit("onnxruntime's int8 GEMM saturates on this CPU (no VNNI): the bit-exact golden is "
                    "unavailable here", returncode=1)
