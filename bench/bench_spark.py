"""bench_spark.sh's Python half: a Spark-launched run next to `ragtag train
--workers 2`, interleaved, on local[3].

Prints, for each repetition: the seconds from ragtag_spark.run(...) to the
first step's metrics line (the SparkSession already up, as in a notebook;
the first repetition also starts Spark's Python workers), the same for
`ragtag train --workers 2` from its start, and each one's images/s (the
median of its epochs after the first). argv: RAGTAG MODEL REPS EPOCHS LIMIT
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ragtag_spark  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

ragtag, model, reps, epochs, limit = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
flags = {"epochs": epochs, "limit": limit, "seed": 1, "val": 0, "log_every": 1}


def rate(metrics):
    ep = [m["images_per_s"] for m in metrics if "event" not in m and "loss" not in m]
    return statistics.median(ep[1:] or ep)


def train_run(tmp):
    """ragtag train --workers 2: seconds to its first step, and its img/s."""
    path = os.path.join(tmp, "train.jsonl")
    argv = [ragtag, "train", model, "--workers", "2", "--threads", "1", "--metrics", path,
            "--progress", "off"] + sum(([f"--{k.replace('_', '-')}", str(v)]
                                        for k, v in flags.items()), [])
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = None
    while p.poll() is None and first is None:
        if os.path.exists(path) and '"loss"' in open(path).read():
            first = time.monotonic() - t0
        time.sleep(0.02)
    if p.wait() != 0:
        sys.exit("ragtag train failed: " + " ".join(argv))
    metrics = [json.loads(x) for x in open(path) if x.strip()]
    os.unlink(path)
    return first, rate(metrics)


spark = (SparkSession.builder.master("local[3]").appName("ragtag-bench")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.port", "55500")
         .config("spark.blockManager.port", "55501").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
print(f"lenet, {limit} images, {epochs} epochs, 2 workers of 1 thread, "
      f"load {os.getloadavg()[0]:.1f} at start")
print("rep  spark:first-step-s  spark:img/s  train:first-step-s  train:img/s  ratio")
with tempfile.TemporaryDirectory() as tmp:
    for rep in range(reps):
        ts, rs = train_run(tmp)
        res = ragtag_spark.run(model, 2, data="fashion-mnist", port=55510 + 2 * rep,
                               log_port=55511 + 2 * rep, ring_port=55530 + 2 * rep,
                               workdir=os.path.join(tmp, f"spark{rep}"), on_line=None, **flags)
        sp = rate(res.metrics)
        print(f"{rep:3d}  {res.first_step_s:18.2f}  {sp:11.0f}  {ts:18.2f}  {rs:11.0f}  "
              f"{sp / rs:5.2f}", flush=True)
print(f"load {os.getloadavg()[0]:.1f} at end")
spark.stop()
