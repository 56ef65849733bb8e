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
    acc_read_full_width: bool = True
    mvin_scale: bool = True

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
        for field in ("sp_kib", "acc_kib", "sp_banks", "acc_banks", "dma_bus_bits", "dma_max_bytes"):
            if getattr(self, field) <= 0:
                raise UsageError(f"config {self.name}: {field} must be positive")
        if self.bank_rows < 1 or self.acc_rows < 2 * self.dim:
            raise UsageError(f"config {self.name}: scratchpad/accumulator too small for dim {self.dim}")
        if self.dataflow not in ("WS", "OS", "BOTH"):
            raise UsageError(f"config {self.name}: dataflow must be WS, OS or BOTH")
        if self.dataflow == "OS":
            raise UsageError(f"config {self.name}: onnx2gemmini needs the WS dataflow (convs are WS-only)")
        return self


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


def load_config(spec: "str | GemminiConfig | None") -> GemminiConfig:
    """A preset name, a JSON file path, or a config object -> a validated config."""
    if spec is None:
        return PRESETS["default"]
    if isinstance(spec, GemminiConfig):
        return spec.validate()
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if path.suffix.lower() != ".json":
        raise UsageError(f"--config: unknown preset '{spec}' (choose from {', '.join(PRESETS)} or a .json file)")
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--config: cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--config: {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config: {path} must hold a JSON object")
    base_name = data.pop("base", "default")
    if base_name not in PRESETS:
        raise UsageError(f"--config: {path}: unknown base preset '{base_name}'")
    base = PRESETS[base_name]
    known = {f.name for f in dataclasses.fields(GemminiConfig)}
    unknown = sorted(set(data) - known - {"bank_rows", "sp_rows", "acc_rows"})
    if unknown:
        raise UsageError(f"--config: {path}: unknown keys {', '.join(unknown)}")
    fields = {k: v for k, v in data.items() if k in known}
    fields.setdefault("name", path.stem)
    for k, v in fields.items():
        expected = type(getattr(base, k))
        if expected is int and (not isinstance(v, int) or isinstance(v, bool)) or expected is not int and not isinstance(v, expected):
            raise UsageError(f"--config: {path}: '{k}' must be {expected.__name__}")
    return dataclasses.replace(base, **fields).validate()
