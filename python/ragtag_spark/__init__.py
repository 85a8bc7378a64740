"""Launch ragtag runs on a Spark cluster: the coordinator on the driver, a
worker in each task of a barrier-mode stage (docs/spark.md)."""
from .binary import RagtagSparkError
from .data import fit, write_idx
from .launcher import RunResult, run

__all__ = ["run", "fit", "write_idx", "RunResult", "RagtagSparkError"]
__version__ = "0.1.0"
