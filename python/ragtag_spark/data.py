"""ragtag_spark.fit: train on a DataFrame.

The driver streams the DataFrame (toLocalIterator: one partition at a time,
never the whole set in memory) into IDX files, and the coordinator serves
them to the workers (`--serve-data`), who cache them by content hash.

Why not Petastorm-style shards, each worker reading its own partitions: a
ragtag run in sync mode cuts every global batch out of ONE seeded
permutation of the whole set, in shares sized by each worker's measured
speed, and a lost worker's samples go to the others. So every worker needs
every sample; a worker that held a fixed part could neither be re-planned
nor lost. IDX keeps pixels as bytes (the compact form ragtag trains from)
and the run then equals `ragtag train` on the same images and seed.
"""
import math
import os
import struct
import tempfile

from .binary import RagtagSparkError
from .launcher import run


def _pixels(value, row, col):
    """A row's features as bytes 0..255: BinaryType (one byte a pixel), an
    array of numbers, or a pyspark.ml / mllib vector."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if hasattr(value, "toArray"):
        value = value.toArray().tolist()
    if value is None:
        raise RagtagSparkError(f"ragtag_spark.fit: row {row}: column '{col}' is null")
    out = bytearray(len(value))
    for i, v in enumerate(value):
        iv = int(v) if v is not None else -1
        if iv != v or not 0 <= iv <= 255:
            raise RagtagSparkError(
                f"ragtag_spark.fit: row {row}, column '{col}', value {i}: {v!r} is not an "
                "integer 0..255 (ragtag's IDX data holds pixel bytes; it scales them to "
                "[0, 1] itself)")
        out[i] = iv
    return bytes(out)


def _shape(npix, shape):
    if shape is not None:
        h, w = shape
        if h * w != npix:
            raise RagtagSparkError(f"ragtag_spark.fit: shape {shape} holds {h * w} "
                                   f"pixels but the first row has {npix}")
        return h, w
    side = math.isqrt(npix)
    if side * side != npix:
        raise RagtagSparkError(f"ragtag_spark.fit: rows of {npix} pixels are not square: "
                               "give shape=(height, width)")
    return side, side


def write_idx(df, features_col, label_col, images_path, labels_path, shape=None):
    """Writes df's rows, in order, as an IDX image file and an IDX label
    file; returns the number of rows."""
    rows = df.select(features_col, label_col).toLocalIterator()
    count, size = 0, None
    with open(images_path, "wb") as fi, open(labels_path, "wb") as fl:
        for row in rows:
            px = _pixels(row[0], count, features_col)
            if size is None:
                size = _shape(len(px), shape)
                fi.write(struct.pack(">IIII", 0x803, 0, size[0], size[1]))
                fl.write(struct.pack(">II", 0x801, 0))
            elif len(px) != size[0] * size[1]:
                raise RagtagSparkError(f"ragtag_spark.fit: row {count}: {len(px)} pixels, "
                                       f"but the first row has {size[0] * size[1]}")
            label = row[1]
            if label is None or int(label) != label or not 0 <= int(label) <= 255:
                raise RagtagSparkError(f"ragtag_spark.fit: row {count}, column "
                                       f"'{label_col}': {label!r} is not a class 0..255")
            fi.write(px)
            fl.write(bytes([int(label)]))
            count += 1
        if count == 0:
            raise RagtagSparkError("ragtag_spark.fit: the DataFrame has no rows")
        fi.seek(4)
        fi.write(struct.pack(">I", count))
        fl.seek(4)
        fl.write(struct.pack(">I", count))
    return count


def fit(df, features_col, label_col, model_cfg, num_workers=2, *, test_df=None,
        shape=None, workdir=None, **kwargs):
    """Trains model_cfg on df (and reports accuracy on test_df) with
    num_workers ragtag workers on the cluster; returns run()'s RunResult.
    Other keywords are run()'s (spark, ship, ...) and ragtag train's flags
    (epochs, seed, val, ...)."""
    workdir = workdir or tempfile.mkdtemp(prefix="ragtag-spark-")
    data = os.path.join(workdir, "data")
    os.makedirs(data, exist_ok=True)
    write_idx(df, features_col, label_col, os.path.join(data, "train-images-idx3-ubyte"),
              os.path.join(data, "train-labels-idx1-ubyte"), shape)
    if test_df is not None:
        write_idx(test_df, features_col, label_col, os.path.join(data, "t10k-images-idx3-ubyte"),
                  os.path.join(data, "t10k-labels-idx1-ubyte"), shape)
    kwargs.setdefault("serve_data", True)
    return run(model_cfg, num_workers, data="idx:" + data, workdir=workdir, **kwargs)
