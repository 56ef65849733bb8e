"""Gemmini configurations as data: the presets of the Chisel configs and JSON files.

Every handler and the tiler read capacities and feature flags from here, never from constants.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError


@dataclass(frozen=True)
class GemminiConfig:
    name: str
    dim: int = 16
    sp_kib: int = 256
    acc_kib: int = 64
    sp_banks: int = 4
    acc_banks: int = 2
    dataflow: str = "BOTH"  # "WS", "OS" or "BOTH"
    dma_bus_bits: int = 128
    dma_max_bytes: int = 64
    has_max_pool: bool = True
    has_dw_convs: bool = True
    has_training_convs: bool = True
    has_first_layer_optimizations: bool = True
    has_normalizations: bool = False
    # Softmax after an activation x activation MatMul on the normalizer (has_normalizations only): measured in
    # README, off by default (the CPU form)
    normalizer_softmax: bool = False
    acc_read_full_width: bool = True
    mvin_scale: bool = True
    # Cycles per instruction of the SoC's host core, which runs every CPU step: estimated cycles = the
    # instructions measured on Spike (cpu/cost_table.py) x cpu_cpi. 1.21 is Rocket's measured CPI on integer
    # code: RTL simulation of riscv-tests' Dhrystone, mcycle 241,070 / minstret 199,268 (docs/cost_model.md).
    cpu_cpi: float = 1.21

    @property
    def bank_rows(self) -> int:
        """Scratchpad rows per bank (one row = DIM int8)."""
        return self.sp_kib * 1024 // (self.sp_banks * self.dim)

    @property
    def sp_rows(self) -> int:
        return self.bank_rows * self.sp_banks

    @property
    def acc_rows(self) -> int:
        """Accumulator rows in total (one row = DIM int32)."""
        return self.acc_kib * 1024 // (self.dim * 4)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(bank_rows=self.bank_rows, sp_rows=self.sp_rows, acc_rows=self.acc_rows)
        return d

    def validate(self) -> "GemminiConfig":
        if self.dim < 1 or self.dim & (self.dim - 1):
            raise UsageError(f"config {self.name}: dim must be a power of two, got {self.dim}")
        for field, largest in MAX_VALUES.items():
            value = getattr(self, field)
            if value <= 0:
                raise UsageError(f"config {self.name}: {field} must be positive")
            if value > largest:
                raise UsageError(f"config {self.name}: {field} {value} is above {largest} (no Gemmini is that large)")
        if self.bank_rows < 1 or self.acc_rows < 2 * self.dim:
            raise UsageError(f"config {self.name}: scratchpad/accumulator too small for dim {self.dim}")
        if not (isinstance(self.cpu_cpi, (int, float)) and 0 < self.cpu_cpi <= 1000):
            raise UsageError(f"config {self.name}: cpu_cpi must be a number of cycles per instruction in (0, 1000]")
        if self.dataflow not in ("WS", "OS", "BOTH"):
            raise UsageError(f"config {self.name}: dataflow must be WS, OS or BOTH")
        if self.dataflow == "OS":
            raise UsageError(f"config {self.name}: onnx2gemmini needs the WS dataflow (convs are WS-only)")
        return self


# Upper bounds far beyond any Gemmini built: they keep a typo (dim 16000) from sending the tile search
# through billions of candidates.
MAX_VALUES = {"dim": 1024, "sp_kib": 1 << 16, "acc_kib": 1 << 16, "sp_banks": 256, "acc_banks": 256,
              "dma_bus_bits": 1 << 13, "dma_max_bytes": 1 << 16}
# A configuration file is a few hundred bytes; reading a huge (or endless) one is a mistake.
MAX_CONFIG_BYTES = 1 << 20


# Presets from Gemmini's Configs.scala / CustomConfigs.scala (int8 configs only).
PRESETS: dict[str, GemminiConfig] = {
    c.name: c
    for c in (
        GemminiConfig("default"),
        GemminiConfig("lean", dataflow="WS", acc_read_full_width=False),
        GemminiConfig("chip", sp_kib=64, acc_kib=32, dataflow="WS", acc_read_full_width=False),
        GemminiConfig("large-chip", dim=32, sp_kib=128, acc_kib=64, dataflow="WS", acc_read_full_width=False),
        GemminiConfig("baseline-inference", has_training_convs=False),
        GemminiConfig("high-perf", dim=32, sp_kib=512, acc_kib=128, has_training_convs=False),
        GemminiConfig("ibert", acc_kib=128, has_normalizations=True, has_max_pool=False, has_training_convs=False),
        GemminiConfig("unified-mem", has_max_pool=False),
    )
}


def load_config(spec: "str | Path | GemminiConfig | None") -> GemminiConfig:
    """A preset name, a JSON file path, or a config object -> a validated config."""
    if spec is None:
        return PRESETS["default"]
    if isinstance(spec, GemminiConfig):
        return spec.validate()
    if not isinstance(spec, (str, Path)):
        raise UsageError(f"config: expected a preset name, a .json path or a GemminiConfig, got {type(spec).__name__}")
    if isinstance(spec, str) and spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if path.suffix.lower() != ".json":
        raise UsageError(f"--config: unknown preset '{spec}' (choose from {', '.join(PRESETS)} or a .json file)")
    return _from_json(path, _read_json(path))


def _read_json(path: Path):
    """The JSON value in a config file; every way it can be unreadable is a usage error (exit 2)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--config: cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UsageError(f"--config: {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB; not a configuration")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"--config: {path} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--config: {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except (ValueError, RecursionError) as exc:  # integers beyond 4300 digits, nesting too deep
        raise UsageError(f"--config: {path} is not usable JSON: {str(exc).splitlines()[0][:120]}") from None


def _from_json(path: Path, data) -> GemminiConfig:
    """A JSON object of GemminiConfig fields over a `base` preset -> a validated config."""
    if not isinstance(data, dict):
        raise UsageError(f"--config: {path} must hold a JSON object")
    base_name = data.pop("base", "default")
    if not isinstance(base_name, str) or base_name not in PRESETS:
        raise UsageError(f"--config: {path}: unknown base preset {base_name!r} (choose from {', '.join(PRESETS)})")
    base = PRESETS[base_name]
    known = {f.name for f in dataclasses.fields(GemminiConfig)}
    unknown = sorted(set(data) - known - {"bank_rows", "sp_rows", "acc_rows"})
    if unknown:
        raise UsageError(f"--config: {path}: unknown keys {', '.join(unknown)}")
    fields = {k: v for k, v in data.items() if k in known}
    fields.setdefault("name", path.stem)
    for k, v in fields.items():
        expected = type(getattr(base, k))
        is_int = isinstance(v, int) and not isinstance(v, bool)
        if expected is float and is_int:
            fields[k] = v = float(v)
        if (expected is int and not is_int) or (expected is not int and not isinstance(v, expected)):
            raise UsageError(f"--config: {path}: '{k}' must be {expected.__name__}")
    return dataclasses.replace(base, **fields).validate()
