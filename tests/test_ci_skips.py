"""Under CI=true a skipped test is a failure (tests/conftest.py), so CI cannot pass by running less."""
from pathlib import Path

import pytest

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()
TESTS = """
import pytest
def test_runs():
    pass
def test_skips():
    pytest.skip("a tool is missing")
@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
"""


@pytest.mark.parametrize("ci,outcomes", [
    ("true", {"passed": 1, "failed": 1, "xfailed": 1}),
    ("", {"passed": 1, "skipped": 1, "xfailed": 1}),
], ids=["ci", "developer"])
def test_a_skip_fails_only_under_ci(pytester, monkeypatch, ci, outcomes):
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest(CONFTEST.replace('pytest_plugins = ["pytester"]\n', ""))
    pytester.makepyfile(test_sample=TESTS)
    result = pytester.runpytest("-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(**outcomes)
    if ci:
        result.stdout.fnmatch_lines(["*test_skips skipped under CI=true (*a tool is missing*"])


def test_a_module_level_skip_fails_under_ci(pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest(CONFTEST.replace('pytest_plugins = ["pytester"]\n', ""))
    pytester.makepyfile(test_whole="import pytest\npytest.skip('no compiler', allow_module_level=True)\n")
    result = pytester.runpytest("-p", "no:xdist", "-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*skipped under CI=true*no compiler*"])


def test_an_allowed_skip_passes_under_ci(pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest(CONFTEST.replace('pytest_plugins = ["pytester"]\n', "").replace(
        "CI_MAY_SKIP: dict[str, str] = {}", 'CI_MAY_SKIP: dict[str, str] = {"*::test_skips": "why"}'))
    pytester.makepyfile(test_sample=TESTS)
    pytester.runpytest("-p", "no:xdist", "-p", "no:cacheprovider").assert_outcomes(passed=1, skipped=1, xfailed=1)
