import os

from hypothesis import HealthCheck, settings


settings.register_profile("default", deadline=None, max_examples=15,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", deadline=None, max_examples=25, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")

