"""Typed exceptions. The library raises these and never exits; only cli.py maps them to exit codes."""


class O2GError(Exception):
    """Base class: the message is one line a person can act on."""

    exit_code = 3


class UsageError(O2GError):
    """A bad option or option value (CLI exit code 2)."""

    exit_code = 2


class ModelError(O2GError):
    """The model cannot be read or is malformed/inconsistent (exit code 3)."""


class UnsupportedError(ModelError):
    """The model uses ops (or op forms) the compiler cannot convert (exit code 3)."""


class DataError(O2GError):
    """Calibration or evaluation data is missing, malformed or does not fit the model (exit code 3)."""


class CheckFailed(O2GError):
    """A verification (e.g. diff beyond tolerance) failed (exit code 1)."""

    exit_code = 1


class OutputError(O2GError):
    """The output location cannot be written (exit code 2: the user must pick another path)."""

    exit_code = 2
