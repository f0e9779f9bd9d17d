"""The small regression table behind the tabular chapter and its two files, CSV and NPY (numpy only).

The table is a 5x5 grid over [-1, 1]^2 with y = 0.7*x1 - 0.4*x2 + 0.5*x1*x2, written by
`gptlineage small-data` and read back by `data-csv`/`data-npy` (`gptlineage.tabular.regression`
trains on it); writing it needs no torch.

Example:
    X, y = regression_table()                          # float32 (25, 2) and (25, 1)
    write_regression_csv("small_regression.csv", X, y)  # header x1,x2,y, CRLF line ends
    write_npy("X.npy", X)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def regression_table() -> tuple[np.ndarray, np.ndarray]:
    """X float32 (25, 2) and y float32 (25, 1); x1 is the outer loop of the grid."""
    axis = np.linspace(-1, 1, 5, dtype=np.float32)
    x1, x2 = np.meshgrid(axis, axis, indexing="ij")
    X = np.stack([x1.ravel(), x2.ravel()], axis=1)
    # Widen first: with NumPy 2 a Python float times a float32 array stays float32.
    a, b = x1.astype(np.float64).ravel(), x2.astype(np.float64).ravel()
    y = (0.7 * a - 0.4 * b + 0.5 * a * b).astype(np.float32).reshape(-1, 1)
    return X, y


def write_regression_csv(path: str | Path, X: np.ndarray, y: np.ndarray) -> None:
    """Header `x1,x2,y`, CRLF line ends, each value the repr of its float32 as a float."""
    lines = ["x1,x2,y"]
    for features, target in zip(X, y):
        lines.append(",".join(repr(float(v)) for v in (*features, *target)))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes("".join(line + "\r\n" for line in lines).encode("ascii"))


def write_npy(path: str | Path, array: np.ndarray, dtype: np.dtype | type = np.float32) -> None:
    """Write a C-order array with `np.save` (v1.0 header, no pickling)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Through a file handle: np.save on a name without ".npy" would append the suffix.
    with out.open("wb") as handle:
        np.save(handle, np.ascontiguousarray(array, dtype=dtype), allow_pickle=False)
