"""Graph rewrites that run before the handlers, one pattern per module.

Each pass takes the graph and the Gemmini config, rewrites the graph in place and returns a change log
(one line per rewrite) for `-v`.
"""
from __future__ import annotations

from typing import Callable

from ..config import GemminiConfig
from ..graph import Graph
from . import (bias_add, bn_affine, bn_fold, conv1d, drop_empty, einsum_weights, equalize, fuse_activation,
               fuse_elementwise, fuse_gate, fuse_magnitude, fuse_mask, fuse_maxpool, index_paths, input_mask,
               outer_product, qdq_import, recurrent_projection, scatter_block, sort_channels)

Pass = Callable[[Graph, GemminiConfig], list[str]]

# Order matters: per-channel Mul/Add merge into the BN, BN folds into the conv, then the bias add and the
# activation attach to it; x * f(x) becomes one table; sqrt(x*x + y*y) one step (before the squares can become
# tables); attention masks are recognized before any other
# elementwise chain of one tensor becomes a table (a mask's Sub and Mul are one); a 1-D conv becomes 2-D
# last, its fusions kept. An LSTM/GRU's input projection becomes a MatMul (with its bias)
# before anything else looks at MatMuls.
PASSES: tuple[tuple[str, Pass], ...] = (
    ("qdq_import", qdq_import.run),
    ("drop_empty", drop_empty.run),
    ("scatter_block", scatter_block.run),
    ("einsum_weights", einsum_weights.run),
    ("outer_product", outer_product.run),
    ("recurrent_projection", recurrent_projection.run),
    ("bn_affine", bn_affine.run),
    ("bn_fold", bn_fold.run),
    ("bias_add", bias_add.run),
    ("fuse_activation", fuse_activation.run),
    ("fuse_maxpool", fuse_maxpool.run),
    ("fuse_gate", fuse_gate.run),
    ("fuse_magnitude", fuse_magnitude.run),
    ("fuse_mask", fuse_mask.run),
    ("input_mask", input_mask.run),
    ("index_paths", index_paths.run),
    ("fuse_elementwise", fuse_elementwise.run),
    ("conv1d", conv1d.run),
)


# Optional passes, run after the default ones when asked for, in this order (channels sort on the equalized
# weights).
OPTIONAL: dict[str, Pass] = {"equalize": equalize.run, "sort_channels": sort_channels.run}


def run_passes(graph: Graph, config: GemminiConfig, optional: tuple[str, ...] = (),
               calibrated: Callable[[Graph], list[str]] | None = None) -> tuple[Graph, list[str]]:
    """A rewritten copy of `graph` and the change log of every pass. `calibrated(graph)` runs between the
    default and the optional passes: the rewrites that need the calibration data (smooth_magnitude), before
    equalization and channel sorting balance the weights they leave."""
    unknown = set(optional) - set(OPTIONAL)
    if unknown:
        raise ValueError(f"unknown optional passes: {sorted(unknown)}")
    graph = graph.copy()
    changes: list[str] = []
    for name, rewrite in PASSES:
        changes.extend(f"{name}: {line}" for line in rewrite(graph, config))
    if calibrated is not None:
        changes.extend(calibrated(graph))
    for name, rewrite in ((n, fn) for n, fn in OPTIONAL.items() if n in optional):
        changes.extend(f"{name}: {line}" for line in rewrite(graph, config))
    return graph, changes
