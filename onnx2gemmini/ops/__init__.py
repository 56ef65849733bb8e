"""The op handlers, one module per op family; importing the package registers every handler
(registry.py), so `onnx2gemmini.ops.registry.lookup` sees them all."""
from . import (activations, add, batch_norm, binary, broadcast, clip, concat, conv, conv_transpose,  # noqa: F401
               einsum, gather, gemm, layer_norm, lrn, mask_rows, pool, recurrent, reduce, resize, slice_pad, softmax,
               split, transpose, views)
