"""numpy <-> Arrow for arrays of rows: `arrow.fixed_shape_tensor` keeps each row's shape, zero-copy back."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

FRAME_ROW_BYTES = 1024
"""Rows of at least this many bytes are frames: compressed where Arrow is written (fragments on the wire,
LZ4; demo files, zstd). Vector rows (float noise, which barely compresses) are written as they are."""


def to_arrow(arr: np.ndarray) -> pa.Array:
    """(N,) -> a plain column; (N, *shape) -> a fixed-shape tensor column (empty arrays too). Arrow has no bool
    tensors: rows of bools are written as uint8 0/1 (readers cast to the space's dtype)."""
    arr = np.ascontiguousarray(arr)
    if arr.ndim > 1 and arr.dtype == np.bool_:
        arr = arr.view(np.uint8)
    if arr.ndim == 1:
        return pa.array(arr)
    size = int(np.prod(arr.shape[1:]))
    storage = pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), size)
    return pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(storage.type.value_type, arr.shape[1:]), storage)


def to_numpy(arr: pa.Array) -> np.ndarray:
    """Inverse of `to_arrow` (a read-only view where the buffers allow)."""
    if isinstance(arr.type, pa.FixedShapeTensorType):
        return arr.to_numpy_ndarray()
    return arr.to_numpy(zero_copy_only=False)
