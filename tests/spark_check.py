"""tests/test_spark.sh's Spark half: ragtag_spark on PySpark in local mode.

argv: RAGTAG MODEL WORKDIR BASELINE_TEST_ACC FIRST_PORT LAST_PORT (it takes a
free block of 50)
Fashion-MNIST's first 6000 training images and its 10000 test images go
into DataFrames; fit() trains lenet on them with 2 workers, and its test
accuracy must be the one `ragtag train --workers 2` had on the same images
and seed (the shell half), within 0.5 points. Then: a missing executor
binary and one of another version must fail with their clear errors; a
worker killed mid-run is a lost worker and the run goes on. Exit 77 (skip)
only where Spark itself cannot start.
"""
import gzip
import json
import os
import re
import signal
import socket
import struct
import sys
import threading
import time

ragtag, model, work, base_acc, port = sys.argv[1:6]
base_acc, port = float(base_acc), int(port)


def free_block(first, last, size=50):
    """The first block of `size` ports from `first` that all bind now (a
    run just before leaves its ports in TIME_WAIT for a minute)."""
    for base in range(first, last - size + 2, size):
        try:
            for p in range(base, base + size):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    print(f"SKIP: no free block of {size} ports in {first}-{last}")
    sys.exit(77)


port = free_block(port, int(sys.argv[6]))
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "python"))
import ragtag_spark  # noqa: E402
from ragtag_spark import RagtagSparkError  # noqa: E402
from ragtag_spark.task import worker_argv  # noqa: E402
from ragtag_spark import launcher  # noqa: E402

failures = []
T0 = time.monotonic()


def ok(cond, what):
    print(("ok - " if cond else "not ok - ") + what + f" [{time.monotonic() - T0:.0f} s]",
          flush=True)
    if not cond:
        failures.append(what)


def fmnist_dir():
    """Where src/dataset.c looks, in its order."""
    cands = []
    if os.environ.get("RAGTAG_DATA_DIR"):
        cands += [os.path.join(os.environ["RAGTAG_DATA_DIR"], "fashion-mnist"),
                  os.environ["RAGTAG_DATA_DIR"]]
    cands += ["/usr/share/datasets/fashion-mnist", "/usr/local/share/datasets/fashion-mnist",
              os.path.expanduser("~/.local/share/datasets/fashion-mnist"), "data/fashion-mnist"]
    for d in cands:
        if os.path.exists(os.path.join(d, "train-images-idx3-ubyte.gz")):
            return d
    print("SKIP: no Fashion-MNIST (apt-get install dataset-fashion-mnist)")
    sys.exit(77)


def read_idx(d, kind, n=None):
    with gzip.open(os.path.join(d, f"{kind}-images-idx3-ubyte.gz")) as f:
        _, count, rows, cols = struct.unpack(">IIII", f.read(16))
        count = min(count, n or count)
        px = f.read(count * rows * cols)
    with gzip.open(os.path.join(d, f"{kind}-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = f.read(count)
    size = rows * cols
    return [(bytearray(px[i * size:(i + 1) * size]), labels[i]) for i in range(count)]


# a GPU task runs the cuda backend on the GPU Spark gave it; no secret in argv
spec = {"join_endpoint": "tcp://drv:1", "connect_timeout": 5, "ring_port": 55000,
        "join": "rtj1-secret"}
a = worker_argv("/x/ragtag", spec, 2, 0, 4, ["1"])
ok(a[a.index("--backend") + 1] == "cuda" and a[a.index("--device") + 1] == "1"
   and a[a.index("--threads") + 1] == "4" and a[a.index("--ring-port") + 1] == "55002"
   and not any("rtj1" in x for x in a), "worker argv: GPU task on cuda, its device, no secret")
a = worker_argv("/x/ragtag", spec, 0, 1, 3, [])
ok(a[a.index("--backend") + 1] == "cpu" and a[a.index("--threads") + 1] == "3",
   "worker argv: CPU task on cpu with spark.task.cpus threads")

try:
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[3]").appName("ragtag-test")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.port", str(port))
             .config("spark.blockManager.port", str(port + 1))
             .config("spark.task.cpus", "1")
             # a short-lived JVM: C1 only, serial GC (about half the start time)
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
except Exception as e:  # no usable Java, typically
    print(f"SKIP: Spark does not start here: {str(e).splitlines()[0][:300]}")
    sys.exit(77)
spark.sparkContext.setLogLevel("ERROR")
print(f"# Spark {spark.version} up [{time.monotonic() - T0:.0f} s]", flush=True)
lines = []


def keep(line):
    lines.append(line)
    print(line, flush=True)


# bad features: the error names the row, column and value
bad = spark.createDataFrame([([0.0] * 4, 1), ([0.0, 0.5, 0.0, 0.0], 2)], "f array<double>, y int")
try:
    ragtag_spark.write_idx(bad, "f", "y", os.path.join(work, "i"), os.path.join(work, "l"))
    ok(False, "a fraction in the features is refused")
except RagtagSparkError as e:
    ok("row 1, column 'f', value 1: 0.5 is not an integer 0..255" in str(e),
       f"a fraction in the features is refused: {e}")

d = fmnist_dir()
schema = "features binary, label int"

test = spark.createDataFrame(read_idx(d, "t10k"), schema)
# in file order, as `--limit 6000` keeps them
train = spark.createDataFrame(read_idx(d, "train", 6000), schema)
res = ragtag_spark.fit(train, "features", "label", model, 2, test_df=test,
                       workdir=os.path.join(work, "fit"), port=port + 10, log_port=port + 11,
                       ring_port=port + 20, epochs=1, seed=3, on_line=keep)
acc = res.epochs[-1]["test_acc"] * 100
ok(abs(acc - base_acc) <= 0.5, f"fit: test accuracy {acc:.2f}% vs ragtag train --workers 2 "
   f"{base_acc:.2f}% (within 0.5 points)")
ok(res.epochs[-1]["samples"] == 5400, "fit: 5400 training samples (6000 less the 10% split)")
ok(any("replicas identical: parameter hash" in x for x in res.log),
   "fit: the replica hash line is in the returned log")
ok(any(x.startswith("[task ") and "done:" in x for x in lines),
   "fit: workers' lines streamed to the driver while the stage ran")
join = open(os.path.join(work, "fit", "keys", "join")).read().strip()
ok(not any(join in x for x in res.log) and not any(join in " ".join(t["argv"]) for t in res.tasks),
   "fit: the join string is in neither the log nor a command line")
ok(all(t["argv"][t["argv"].index("--threads") + 1] == "1" for t in res.tasks),
   "fit: workers run spark.task.cpus (1) threads")
with open(res.weights, "rb") as f:
    hdr = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
ok("conv1.weight" in hdr or len(hdr) > 2, f"fit: final weights {res.weights} are safetensors")

# a missing binary and one of another version: clear errors, before the stage
for exe, want in [("/nonexistent/ragtag", "cannot run ragtag: no ragtag binary: looked for "
                   "'/nonexistent/ragtag'"),
                  ("ragtag-not-installed", "'ragtag-not-installed' on its PATH"),
                  (os.path.join(work, "old", "ragtag"), "version mismatch: executor ")]:
    try:
        ragtag_spark.run(model, 2, data="fashion-mnist", executor_ragtag=exe, epochs=1,
                         port=port + 12, log_port=port + 13, on_line=None)
        ok(False, f"{exe}: refused")
    except RagtagSparkError as e:
        ok(want in str(e) and ("ragtag 0.0.1" in str(e) or "old" not in exe),
           f"{exe}: refused with: {e}")

# shipped with the job: the executors run the tree's bin/ragtag (with its
# lib/), not one on their PATH
res = ragtag_spark.run(model, 2, data="fashion-mnist", limit=640, val=0, epochs=1,
                       ship=os.path.join(work, "tree"), executor_ragtag="not-on-the-path",
                       port=port + 40, log_port=port + 41, on_line=None)
ok(all(t["argv"][0].endswith("/tree/bin/ragtag") and not t["argv"][0].startswith(work)
       and t["returncode"] == 0 for t in res.tasks) and len(res.epochs) == 1,
   f"ship: the workers ran the shipped tree: {res.tasks[0]['argv'][0]}")

def worker_pids(endpoint, name=None):
    """The ragtag workers joining `endpoint` (named `name`) on this host."""
    pids = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if (name is None or name.encode() in cmd) and b"worker" in cmd and \
                b"--join" in cmd and cmd[cmd.index(b"--join") + 1] == endpoint.encode():
            pids.append(int(pid))
    return pids


def left_behind(endpoint, wait_s=30):
    """The workers of a failed run still alive after `wait_s` seconds
    (Spark kills a cancelled task's Python worker, and the ragtag worker
    dies with it, within a few seconds)."""
    for _ in range(int(wait_s * 10)):
        pids = worker_pids(endpoint)
        if not pids:
            return []
        time.sleep(0.1)
    return pids

# a model file the coordinator refuses: the stage is cancelled, the error
# quotes the coordinator's reason with its file:line, and no worker of it
# stays behind holding an executor's slot (the coordinator fails before the
# stage has submitted its job: one cancellation came too early, and the
# next case waited 300 s for slots)
badcfg = os.path.join(work, "bad.cfg")
with open(model) as f, open(badcfg, "w") as g:
    g.write(f.read().replace("[net]", "[net]\nfilterz = 3", 1))
try:
    ragtag_spark.run(badcfg, 2, data="fashion-mnist", epochs=1, port=port + 18,
                     log_port=port + 19, on_line=None)
    ok(False, "a bad model file is refused")
except RagtagSparkError as e:
    ok("coordinator exited 1" in str(e) and "bad.cfg:" in str(e) and "filterz" in str(e),
       "a bad model file is refused: " + str(e)[-300:].replace("\n", " | "))
stray = left_behind(f"tcp://127.0.0.1:{port + 18}")
ok(not stray, f"a bad model file: no worker of the failed run left behind: {stray}")

# a worker that cannot start (its --ring-port taken by another program):
# run() stops the run at once with the worker's own reason, instead of the
# coordinator waiting out --join-timeout for the one worker that will not
# come (the last pass's CI waited 300 s), and no worker of it stays behind
holder = socket.socket()
holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
holder.bind(("", port + 44))
holder.listen()
t = time.monotonic()
try:
    ragtag_spark.run(model, 2, data="fashion-mnist", epochs=1, port=port + 42,
                     log_port=port + 43, ring_port=port + 44, join_timeout=240, on_line=None)
    ok(False, "a worker that cannot start: run() raises")
except RagtagSparkError as e:
    ok("worker spark-000-0 on " in str(e) and "before it joined the run" in str(e)
       and f"cannot listen on tcp://*:{port + 44}" in str(e)
       and f"--ring-port {port + 44} is taken on this host" in str(e),
       f"a worker that cannot start: run() raises at once with its reason "
       f"[{time.monotonic() - t:.0f} s]: {e}")
holder.close()
stray = left_behind(f"tcp://127.0.0.1:{port + 42}")
ok(not stray, f"a worker that cannot start: no worker of the run left behind: {stray}")

# a worker lost mid-run (its process killed): the run goes on with the
# other. Then that one too (as when Spark tears down a failed barrier
# stage): the coordinator stops with its checkpoint whole, run() raises,
# and run(..., resume=True) in the same workdir finishes the run.
killed = []


def kill_worker(name, endpoint):
    for pid in worker_pids(endpoint, name):
        os.kill(pid, signal.SIGKILL)
        killed.append(name)


def kill_some(line):
    keep(line)
    if "[plan] step 0" in line and not killed:
        kill_worker("spark-001-0", f"tcp://127.0.0.1:{port + 14}")
    if line.startswith("epoch 1/3") and len(killed) == 1:
        threading.Thread(target=kill_after_checkpoint).start()


def wait_file(path, seconds=30):
    for _ in range(int(seconds * 100)):
        if os.path.exists(path):
            return
        time.sleep(0.01)


def kill_after_checkpoint():
    """The epoch's checkpoint comes after its line: kill once it is there."""
    wait_file(os.path.join(work, "lost", "checkpoint", "last.safetensors"))
    kill_worker("spark-000-0", f"tcp://127.0.0.1:{port + 14}")


lost = dict(data="fashion-mnist", limit=6000, val=0, epochs=3, seed=3,
            workdir=os.path.join(work, "lost"))
first = len(lines)
try:
    ragtag_spark.run(model, 2, port=port + 14, log_port=port + 15, ring_port=port + 30,
                     on_line=kill_some, **lost)
    ok(False, "lost: the run without workers fails")
except RagtagSparkError as e:
    ok("every worker was lost" in str(e), "lost: the run without workers fails, saying why")
ok(killed == ["spark-001-0", "spark-000-0"], f"lost: killed one after the first plan, "
   f"the other after epoch 1: {killed}")
ok(any("lost rank 1 (spark-001-0" in x and "1 worker continues" in x for x in lines[first:]),
   "lost: the coordinator dropped the first and went on")
ok(any(x.startswith("epoch 1/3") for x in lines[first:]), "lost: epoch 1 ended with 1 worker")
# run() stopped the coordinator that waited for workers once its metrics
# file ended with the "restart" event; the test of that reading
lost_metrics = os.path.join(work, "lost", "metrics.jsonl")
with open(lost_metrics) as f:
    last = json.loads(f.read().splitlines()[-1])
ok(last.get("event") == "restart" and last.get("from") == "checkpoint",
   f"lost: the metrics file ends with the coordinator's restart event: {last}")
ok(launcher._waits_after_restart(lost_metrics), "lost: the launcher reads that event")
probe_path = os.path.join(work, "restart-probe.jsonl")
for text, want, what in [('{"event": "restart", "from": "beginning"}\n{"epoch": 2}\n', False,
                          "a run that went on"),
                         ('{"event": "restart", "from": "beg', False, "a line half written"),
                         ('{"epoch": 1}\n{"event": "restart", "from": "beginning"}\n', True,
                          "the last line")]:
    with open(probe_path, "w") as f:
        f.write(text)
    ok(launcher._waits_after_restart(probe_path) == want, f"restart event: {what}")
ok(not launcher._waits_after_restart(probe_path + ".none"), "restart event: no file yet")
res = ragtag_spark.run(model, 2, port=port + 16, log_port=port + 17, ring_port=port + 34,
                       resume=True, on_line=keep, **lost)
ok(any(re.search(r"resuming from .* at epoch [12],", x) for x in res.log),
   "resume: the coordinator resumed from its checkpoint of epoch 1 (or 2)")
ok(sorted(set(m["epoch"] for m in res.epochs)) == [1, 2, 3]
   and all(m["samples"] == 6000 for m in res.epochs),
   "resume: 3 epochs in the metrics, every sample once per epoch")
ok(sorted(t["returncode"] for t in res.tasks) == [0, 0], "resume: both new workers ended 0")

# a failed task (its Python worker killed, as when an executor is lost):
# Spark tears the barrier stage down, the ragtag workers die with their
# tasks (--parent), and Spark runs the stage again; the coordinator, left
# without workers, goes on from its checkpoint with the retried stage's
# workers, and run() returns a finished run
retry_ep = f"tcp://127.0.0.1:{port + 2}"
torn = []


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def tear_down_tasks():
    wait_file(os.path.join(work, "retry", "checkpoint", "last.safetensors"))
    for pid in worker_pids(retry_ep):
        try:
            os.kill(parent_of(pid), signal.SIGKILL)
            torn.append(pid)
        except OSError:
            pass


def tear_after_epoch_1(line):
    keep(line)
    if line.startswith("epoch 1/3") and not torn:
        threading.Thread(target=tear_down_tasks).start()


first = len(lines)
try:
    res = ragtag_spark.run(model, 2, data="fashion-mnist", limit=6000, val=0, epochs=3, seed=3,
                           workdir=os.path.join(work, "retry"), port=port + 2,
                           log_port=port + 3, ring_port=port + 36, on_line=tear_after_epoch_1)
    ok(len(torn) == 2 and any("instead the run goes on from that checkpoint" in x
                              for x in res.log),
       f"retried stage: both tasks torn down after epoch 1 ({len(torn)}), the run went on "
       "from its checkpoint")
    ok(sorted(set(m["epoch"] for m in res.epochs)) == [1, 2, 3]
       and all(m["samples"] == 6000 for m in res.epochs),
       "retried stage: 3 epochs in the metrics, every sample once per epoch")
    ok(any(re.search(r"resuming from .* at epoch [12],", x) for x in res.log),
       "retried stage: the retried stage's workers resumed from the checkpoint")
except RagtagSparkError as e:
    ok(False, "retried stage: the run went on with the retried stage's workers: "
       + str(e)[-600:].replace("\n", " | "))

spark.stop()
sys.exit(1 if failures else 0)
