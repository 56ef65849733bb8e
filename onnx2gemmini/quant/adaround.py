"""AdaRound (Nagel et al. 2020): each weight rounded up or down to minimise the layer's output error on
calibration inputs, instead of to the nearest int8 value.

Gemmini applies one scale per call, so per-tensor int8 cannot win accuracy back through finer scales; the
rounding of each weight is what is left. For a layer computing rows @ W (rows: [N, K] calibration inputs in
the weight matrix's row order, W: [K, J]) and weight scale s, the int8 weights are floor(W/s) + h, where
h in [0, 1] is relaxed as a rectified sigmoid of a free variable V and learned by Adam on

    ||rows @ (floor(W/s) + h - W/s)||^2 / N  +  lam * sum(1 - |2h - 1|^beta),

whose second term, with beta annealed from 20 to 2, drives every h to 0 or 1 (the paper's schedule: none
for the first fifth of the iterations). The output error is counted in units of the scale, through the
Gram matrix rows^T rows / N when K is small enough (then an iteration costs K^2 J) and through the rows
otherwise. The result is the same integer grid, clipped to [-127, 127]: the scale, the bias scale and
every Gemmini call stay as they are.
"""
from __future__ import annotations

import numpy as np

ZETA, GAMMA = 1.1, -0.1      # the rectified sigmoid's stretch (the paper's values)
ITERATIONS = 1000
LEARNING_RATE = 0.1
REG = 0.01                   # lam, relative to the mean squared input (the Gram matrix's mean diagonal)
ROWS = 4096                  # calibration rows used, at most
GRAM_K = 2048                # the Gram matrix form up to this many inputs per output
ROWS_PER_INPUT = 4           # calibration rows needed per input of the layer (K), at least


def layer_rows(x: np.ndarray, geometry: dict | None) -> np.ndarray:
    """Calibration rows [N, K] of a layer's input `x` (samples stacked on axis 0): the last axis for a
    matmul (geometry None), im2col patches in (channel, kernel row, kernel column) order for a conv
    (geometry: kernel, strides, pads (top, left, bottom, right), dilations; NCHW input, one group)."""
    if geometry is None:
        return x.reshape(-1, x.shape[-1])
    (kh, kw), (sh, sw), (t, l, b, r), (dh, dw) = (geometry[k] for k in ("kernel", "strides", "pads", "dilations"))
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    n, c, h, w = xp.shape
    oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (w - (kw - 1) * dw - 1) // sw + 1
    cols = np.empty((n, oh, ow, c, kh, kw), x.dtype)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
            cols[..., i, j] = patch.transpose(0, 2, 3, 1)
    return cols.reshape(n * oh * ow, c * kh * kw)


def round_weights(w: np.ndarray, rows: np.ndarray, scale, seed: int = 0,
                  iterations: int = ITERATIONS) -> np.ndarray:
    """int8 weights [K, J] for float weights `w` [K, J] at `scale` (one, or one per output column J),
    rounded to minimise the error of rows @ w."""
    rng = np.random.default_rng(seed)
    if len(rows) > ROWS:
        rows = rows[np.sort(rng.choice(len(rows), ROWS, replace=False))]
    rows = rows.astype(np.float32)
    grid = w.astype(np.float64) / np.broadcast_to(np.asarray(scale, np.float64).reshape(1, -1), (1, w.shape[1]))
    floor = np.floor(grid)
    target = grid - floor  # what h should make the sum exact: its fractional part
    k = w.shape[0]
    gram = rows.T @ rows / len(rows) if k <= GRAM_K else None
    lam = REG * (float(np.mean(np.diag(gram))) if gram is not None else float(np.mean(rows * rows)))
    target = target.astype(np.float32)
    v = -np.log((ZETA - GAMMA) / (np.clip(target, 0.01, 0.99) - GAMMA) - 1)  # h(v) = target at the start
    m, s2 = np.zeros_like(v), np.zeros_like(v)
    warmup = iterations // 5
    for it in range(iterations):
        sig = 1 / (1 + np.exp(-v))
        stretched = sig * (ZETA - GAMMA) + GAMMA
        h = np.clip(stretched, 0, 1)
        error = h - target
        grad_h = 2 * (gram @ error if gram is not None else rows.T @ (rows @ error) / len(rows))
        if it >= warmup:
            beta = 20 + (2 - 20) * (it - warmup) / max(iterations - warmup - 1, 1)
            d = 2 * h - 1
            grad_h += lam * -beta * np.abs(d) ** (beta - 1) * np.sign(d) * 2
        grad = grad_h * ((stretched > 0) & (stretched < 1)) * sig * (1 - sig) * (ZETA - GAMMA)
        m = 0.9 * m + 0.1 * grad  # Adam
        s2 = 0.999 * s2 + 0.001 * grad * grad
        v -= LEARNING_RATE * (m / (1 - 0.9 ** (it + 1))) / (np.sqrt(s2 / (1 - 0.999 ** (it + 1))) + 1e-12)
    h = np.clip(1 / (1 + np.exp(-v)) * (ZETA - GAMMA) + GAMMA, 0, 1)
    return np.clip(floor + (h >= 0.5), -127, 127).astype(np.int8)


def output_error(w: np.ndarray, q: np.ndarray, rows: np.ndarray, scale) -> float:
    """||rows @ (q * scale - w)||^2 / N: what round_weights minimises (the tests measure it)."""
    s = np.asarray(scale, np.float64).reshape(1, -1)
    e = rows.astype(np.float64) @ (q.astype(np.float64) * s - w.astype(np.float64))
    return float(np.sum(e * e) / len(rows))


SAMPLES = 256  # calibration samples whose layer inputs give the rows, at most (ROWS rows in all)


class Rounder:
    """The calibration rows of every layer AdaRound handles (convs of one group with 2-D kernels, Gemm
    without transA, MatMul by a 2-D constant), and the rounding of its weights given their scales."""

    def __init__(self, rows: dict[str, tuple[np.ndarray, int]]):
        self.rows = rows  # node name -> (rows [N, K], output-channel axis of the float weights)
        self.rounded: list[str] = []

    @classmethod
    def from_data(cls, graph, float_model, data) -> "Rounder":
        from ..ort_session import session
        from ..graph import NodeView
        from ..ops.conv import geometry

        layers = {}
        for node in graph.nodes:
            view = NodeView(node, graph)
            x = node.inputs[0] if node.inputs else ""
            weight = node.inputs[1] if len(node.inputs) > 1 else ""
            if not x or x in graph.initializers or weight not in graph.initializers:
                continue
            if node.op_type == "Conv" and node.attrs.get("group", 1) == 1 and len(view.shape(x)) == 4:
                layers[node.name] = (x, geometry(view), 0)
            elif node.op_type == "Gemm" and not node.attrs.get("transA", 0):
                layers[node.name] = (x, None, 1)
            elif node.op_type == "MatMul" and graph.initializers[weight].ndim == 2:
                layers[node.name] = (x, None, 1)
        if not layers:
            return cls({})
        inputs = list(dict.fromkeys(x for x, _, _ in layers.values()))
        sess = session(float_model, inputs)
        count = min(SAMPLES, data.num_samples)
        picks = np.unique(np.linspace(0, data.num_samples - 1, count).round().astype(int))
        per_sample = -(-ROWS // len(picks))  # rows kept from each sample (a Gemm's input is one row per sample)
        rng = np.random.default_rng(0)
        parts: dict[str, list[np.ndarray]] = {name: [] for name in layers}
        for i in picks:
            values = dict(zip(inputs, sess.run(inputs, data.sample(int(i)))))
            for name, (x, geom, _) in layers.items():
                r = layer_rows(values[x], geom)
                parts[name].append(r[np.sort(rng.choice(len(r), per_sample, replace=False))] if len(r) > per_sample
                                   else r)
        rows = {name: (np.concatenate(parts[name]), axis) for name, (_, _, axis) in layers.items()}
        # Fewer rows than ROWS_PER_INPUT per weight row leave the rounding free to fit the samples and not
        # the layer (a Gemm sees one row per sample): those layers keep nearest rounding.
        rows = {name: (r, axis) for name, (r, axis) in rows.items() if len(r) >= ROWS_PER_INPUT * r.shape[1]}
        return cls(rows)

    def __call__(self, name: str, w: np.ndarray, wq) -> np.ndarray | None:
        """AdaRound's int8 weights for layer `name` (float weights `w` quantized as `wq`), in w's layout;
        None for a layer it does not handle."""
        if name not in self.rows:
            return None
        rows, axis = self.rows[name]
        moved = np.moveaxis(w, axis, -1)
        scale = wq.channel_scale if wq.channel_scale is not None else wq.scale
        q = round_weights(moved.reshape(-1, moved.shape[-1]), rows, scale)
        self.rounded.append(name)
        return np.moveaxis(q.reshape(moved.shape), -1, axis)
