"""ragtag_spark.run: a ragtag run on a Spark cluster.

The driver runs `ragtag coord` (the coordinator: membership, shares,
metrics, checkpoints and the final weights are its); a barrier-mode stage of
num_workers tasks runs one `ragtag worker` each. Barrier mode makes Spark
start all the tasks together or none, which is what a synchronous run
needs; ragtag's own ring does the training, Spark only places the workers.
"""
import atexit
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial

from .binary import RagtagSparkError, check, probe, resolve, shipped_tree, version
from .logstream import LogServer
from .task import barrier_task

# flags run() sets itself: a caller's would break the launch
_RESERVED = {"workers", "listen", "keys", "insecure", "authorized_keys", "progress"}


@dataclass
class RunResult:
    """What run() returns (HorovodRunner/TorchDistributor return rank 0's
    value; a ragtag run's value is its metrics and weights)."""
    metrics: list                 # the --metrics lines, as dicts
    weights: str                  # the final weights (safetensors)
    log: list                     # coordinator and worker lines, in arrival order
    workdir: str                  # keys, metrics, weights, data of this run
    returncode: int               # the coordinator's exit status (0)
    first_step_s: float = None    # run() to the first step's metrics line (log_every=1)
    tasks: list = field(default_factory=list)  # each task's host, argv, status, lines

    @property
    def epochs(self):
        """The per-epoch lines alone."""
        return [m for m in self.metrics if "event" not in m and "loss" not in m]


def _flag_args(flags):
    """train flags as command-line arguments: lr=0.01 -> --lr 0.01,
    nesterov=True -> --nesterov; None and False are left out."""
    argv = []
    for key, value in flags.items():
        if key in _RESERVED:
            raise RagtagSparkError(f"ragtag_spark.run: '{key}' is set by the launcher "
                                   "(num_workers, port, credentials); leave it out")
        if value is None or value is False:
            continue
        argv.append("--" + key.replace("_", "-"))
        if value is not True:
            argv.append(str(value))
    return argv


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _keygen(ragtag, keys, env):
    """Per-run credentials: a CurveZMQ key pair and join token in `keys`
    (700, files 600); returns the join string."""
    out = subprocess.run([ragtag, "keygen", keys], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env=env)
    if out.returncode != 0:
        raise RagtagSparkError(f"ragtag keygen {keys} failed: "
                               + out.stdout.decode("utf-8", "replace").strip())
    return _join_of(keys)


def _join_of(keys):
    with open(os.path.join(keys, "join")) as f:
        return f.read().strip()


# the last line a task streams (task.py ended_line)
_ENDED = re.compile(r"^\[task (\d+)\] ragtag_spark: worker (\S+) on (\S+) ended with "
                    r"status (-?\d+) (before|after) joining$")


class _Log:
    """The run's lines, in order, each also handed to the caller's on_line;
    the join string never appears in them."""

    def __init__(self, on_line, secret):
        self.lines = []
        self.unjoined = []  # (worker, host, status, its last line) of a worker never admitted
        self.lock = threading.Lock()
        self.on_line = on_line
        self.secret = secret

    def add(self, line):
        if self.secret and self.secret in line:
            line = line.replace(self.secret, "rtj1-<this run's join string, not shown>")
        with self.lock:
            self.lines.append(line)
            m = _ENDED.match(line)
            if m and m.group(4) != "0" and m.group(5) == "before":
                mine = [x for x in self.lines[:-1] if x.startswith(f"[task {m.group(1)}] ")]
                last = mine[-1].split("] ", 1)[1] if mine else "(no line)"
                self.unjoined.append((m.group(2), m.group(3), int(m.group(4)), last))
        if self.on_line:
            self.on_line(line)


def _read_into(stream, log):
    for raw in stream:
        log.add(raw.decode("utf-8", "replace").rstrip("\n"))


def _watch_first_step(path, t0, proc, out):
    """Sets out[0] to the seconds from t0 to the first step's metrics line."""
    while proc.poll() is None:
        try:
            with open(path) as f:
                for line in f:
                    if '"loss"' in line and '"event"' not in line:
                        out[0] = time.monotonic() - t0
                        return
        except OSError:
            pass
        time.sleep(0.02)


def _read_metrics(path):
    metrics = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        metrics.append(json.loads(line))
                    except ValueError as e:
                        raise RagtagSparkError(f"{path}:{n}: not JSON: {e}") from None
    except FileNotFoundError:
        pass
    return metrics


def _driver_ragtag(ragtag, ship):
    """The driver's program and environment (None: this process's): `ragtag`,
    else $RAGTAG, else `ragtag` on the PATH, else the tree being shipped."""
    cmd = ragtag or os.environ.get("RAGTAG") or "ragtag"
    path = resolve(cmd)
    if path is None and ship and not ragtag:
        prog, env = shipped_tree(os.path.abspath(ship))
        path = resolve(prog)
        if path is not None:
            return path, (dict(os.environ, **env) if env else None)
    if path is None:
        raise RagtagSparkError(f"ragtag_spark: no ragtag binary on the driver: '{cmd}' "
                               "is not on the PATH; install ragtag, pass run(..., ragtag=PATH) "
                               "or ship=TREE")
    return path, None


def _driver_host(sc, host):
    return host or sc.getConf().get("spark.driver.host") or socket.getfqdn()


def _listen_address(host):
    """The coordinator listens on the driver's address alone (every
    interface when the name does not resolve here)."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return "*"


def _preflight(sc, n, executor_ragtag, ship, dpath, dversion):
    """A plain (non-barrier) job of n tasks runs `ragtag --version` on the
    executors before anything starts, so a missing or foreign binary is a
    clear error instead of a stage that never joins."""
    found = sc.parallelize(range(n), n).map(
        lambda _: probe(executor_ragtag, ship)).collect()
    check(found, dpath, dversion)
    return found


_shipped_package = set()


def _ship_package(sc):
    """Sends this package to the executors (SparkContext.addPyFile), so they
    need the ragtag binary but not ragtag_spark installed."""
    if id(sc) in _shipped_package:
        return
    import zipfile
    pkg = os.path.dirname(os.path.abspath(__file__))
    tmp = tempfile.mkdtemp(prefix="ragtag-spark-py-")
    atexit.register(shutil.rmtree, tmp, True)  # Spark keeps its own copy
    path = os.path.join(tmp, "ragtag_spark.zip")
    with zipfile.ZipFile(path, "w") as z:
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py"):
                z.write(os.path.join(pkg, name), "ragtag_spark/" + name)
    sc.addPyFile(path)
    _shipped_package.add(id(sc))


def _stop(proc, grace):
    """Ctrl-C for the coordinator (it stops its workers and checkpoints),
    then SIGKILL after `grace` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cancel(sc, group, stage, grace):
    """Cancels the stage's job group until the stage thread ends (at most
    `grace` seconds). Once is not enough: a coordinator that fails at
    once (a bad model file) can fail before the stage thread has submitted
    its job, and a cancellation of a group with no job yet is a no-op: the
    job would start afterwards and its workers wait out --connect-timeout
    holding the executors' slots."""
    deadline = time.monotonic() + grace
    while stage.is_alive() and time.monotonic() < deadline:
        sc.cancelJobGroup(group)
        stage.join(0.5)


def _stage(sc, n, spec, group, box):
    """Runs the barrier stage in this thread; its results or error in box."""
    try:
        sc.setJobGroup(group, f"ragtag workers ({n} barrier tasks)", interruptOnCancel=True)
        rdd = sc.parallelize(range(n), n).barrier().mapPartitions(partial(barrier_task, spec))
        # The shuffle makes the barrier stage a map stage, which Spark runs
        # again when one of its tasks fails (up to
        # spark.stage.maxConsecutiveAttempts); a barrier result stage it
        # cannot ("Could not recover from a failed barrier ResultStage").
        # The coordinator goes on from its checkpoint with the new workers.
        box["tasks"] = sorted(rdd.repartition(1).collect(), key=lambda t: t["partition"])
    except Exception as e:  # Py4J wraps the tasks' errors; keep ours readable
        box["error"] = e


def _stage_error(e):
    """Our own message out of a Spark job failure when a task raised it,
    else the Python error of a task, else Spark's reason."""
    text = str(e)
    i = text.find("ragtag_spark: ")
    if i >= 0:
        return text[i:].splitlines()[0]
    raised = re.findall(r"^(\w+(?:Error|Exception): .*)$", text, re.M)
    java = re.search(r"^: ([\w.$]+): (.*)$", text, re.M)
    if raised:
        why = raised[-1]
    elif java:
        why = f"{java.group(2)} ({java.group(1).rsplit('.', 1)[-1]})"
    else:
        why = text.strip().splitlines()[0]
    return "ragtag_spark: the Spark stage of ragtag workers failed: " + why[:600]


def run(model_cfg, num_workers, data=None, *, spark=None, ragtag=None,
        executor_ragtag="ragtag", ship=None, workdir=None, host=None, port=0,
        log_port=0, ring_port=None, serve_data=True, join_timeout=300,
        connect_timeout=600, worker_args=(), resume=False, on_line=print, **train_flags):
    """Trains `model_cfg` (a model file) with `num_workers` ragtag workers
    in a barrier stage; returns a RunResult. `data`: a data spec the
    driver opens (served to the workers with serve_data); `train_flags`:
    `ragtag train` flags (epochs=2, lr=0.01, seed=1, batch=64, ...).
    See docs/spark.md for the others."""
    from pyspark import SparkContext
    t0 = time.monotonic()
    sc = spark.sparkContext if spark is not None else SparkContext.getOrCreate()
    n = int(num_workers)
    if n < 1:
        raise RagtagSparkError(f"ragtag_spark.run: num_workers {num_workers} is not 1 or more")
    dpath, denv = _driver_ragtag(ragtag, ship)
    dversion = version(dpath, denv)
    if not os.path.isfile(model_cfg):
        raise RagtagSparkError(f"ragtag_spark.run: model file {model_cfg}: not found")
    ship_name = None
    if ship:
        sc.addFile(os.path.abspath(ship), recursive=os.path.isdir(ship))
        ship_name = os.path.basename(os.path.abspath(ship))
    _ship_package(sc)
    _preflight(sc, n, executor_ragtag, ship_name, dpath, dversion)

    if resume and not workdir:
        raise RagtagSparkError("ragtag_spark.run: resume=True needs the workdir of the run "
                               "to resume (its checkpoint and credentials)")
    workdir = workdir or tempfile.mkdtemp(prefix="ragtag-spark-")
    os.makedirs(workdir, exist_ok=True)
    keys = os.path.join(workdir, "keys")
    join = _join_of(keys) if resume and os.path.exists(keys) else _keygen(dpath, keys, denv)
    log = _Log(on_line, join)
    metrics = train_flags.pop("metrics", None) or os.path.join(workdir, "metrics.jsonl")
    weights = train_flags.pop("save", None) or os.path.join(workdir, "final.safetensors")
    # always a checkpoint: a run whose every worker was lost (a failed or
    # retried Spark stage) goes on with run(..., workdir=SAME, resume=True)
    ckpt = train_flags.pop("checkpoint", None) or os.path.join(workdir, "checkpoint")
    if os.path.exists(metrics) and not resume:
        os.unlink(metrics)  # --metrics appends; this run's lines only
    metrics_at = os.path.getsize(metrics) if os.path.exists(metrics) else 0
    host = _driver_host(sc, host)
    port = port or _free_port()
    argv = [dpath, "coord", os.path.abspath(model_cfg), "--workers", str(n),
            "--listen", f"tcp://{_listen_address(host)}:{port}", "--keys", keys,
            "--metrics", metrics, "--save", weights, "--checkpoint", ckpt, "--progress", "lines",
            "--join-timeout", str(join_timeout)]
    argv += (["--data", data] if data else []) + (["--serve-data"] if serve_data else [])
    argv += _flag_args(train_flags) + (["--resume"] if resume else [])
    token = secrets.token_hex(16)
    listen = _listen_address(host)
    server = LogServer("" if listen == "*" else listen, log_port, token, log.add)
    spec = {"join_endpoint": f"tcp://{host}:{port}", "join": join, "version": dversion,
            "executor_ragtag": executor_ragtag, "ship": ship_name, "ring_port": ring_port,
            "connect_timeout": connect_timeout, "worker_args": list(worker_args),
            "log_host": host, "log_port": server.port, "log_token": token,
            "task_cpus": int(sc.getConf().get("spark.task.cpus", "1"))}
    coord = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True,
                             env=denv)
    began = partial(_began, metrics, metrics_at)
    return _supervise(sc, n, spec, coord, log, server, (metrics, began), weights, workdir, t0)


def _waits_after_restart(metrics):
    """Whether the coordinator started the run again and waits for workers:
    the last line of its metrics file is its "restart" event (a line being
    written, or none yet, is not)."""
    try:
        with open(metrics, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = [x for x in f.read().split(b"\n") if x.strip()]
        return bool(lines) and json.loads(lines[-1]).get("event") == "restart"
    except (OSError, ValueError):
        return False


def _began(metrics, offset):
    """Whether this coordinator began training: its metrics file has a plan
    or a step's line after `offset` (its size when the coordinator started;
    a resumed run's file holds the last run's lines before it)."""
    try:
        with open(metrics, "rb") as f:
            f.seek(offset)
            return any(b'"event": "plan"' in x or (b'"loss"' in x and b'"event"' not in x)
                       for x in f)
    except OSError:
        return False


def _cannot_begin(log, n, began):
    """The error of a run that cannot begin: a task's worker ended before
    the run admitted it (a ring port in use, no memory, a wrong flag), and
    the run waits for all n workers at its start. No other worker comes
    from that task: the coordinator would wait out --join-timeout."""
    if not log.unjoined or began():
        return None
    name, host, rc, last = log.unjoined[0]
    return (f"ragtag_spark: worker {name} on {host} ended (status {rc}) before it joined the "
            f"run, which needs all {n} workers to begin: {last}")


def _stage_ended_first(coord, box, metrics, grace=10):
    """The stage ended while the coordinator runs: every task is gone and
    this stage brings no more workers. Every worker ended 0: the run is
    finishing, wait. Otherwise a coordinator that lost them all goes on
    from its checkpoint and waits --join-timeout for workers (those of a
    retried stage would come while the stage still runs): stop it (Ctrl-C:
    its checkpoint stays whole) once it says so, or after `grace` seconds."""
    tasks = box.get("tasks") or []
    if "error" not in box and tasks and all(t.get("returncode") == 0 for t in tasks):
        coord.wait()
        return
    deadline = time.monotonic() + grace
    while coord.poll() is None and time.monotonic() < deadline and \
            not _waits_after_restart(metrics):
        time.sleep(0.1)
    _stop(coord, 60)


def _supervise(sc, n, spec, coord, log, server, watch, weights, workdir, t0):
    """Waits for the coordinator and the stage; stops the one left when the
    other fails, or both when a worker ends before the run could begin;
    builds the result. watch: (metrics file, whether the run began)."""
    metrics, began = watch
    reader = threading.Thread(target=_read_into, args=(coord.stdout, log), daemon=True)
    reader.start()
    first = [None]
    threading.Thread(target=_watch_first_step, args=(metrics, t0, coord, first),
                     daemon=True).start()
    group = "ragtag-" + secrets.token_hex(6)
    box = {}
    stage = threading.Thread(target=_stage, args=(sc, n, spec, group, box), daemon=True)
    stage.start()
    try:
        why = None
        while coord.poll() is None and not why:
            why = _cannot_begin(log, n, began)
            if not stage.is_alive():
                break
            time.sleep(0.1)
        if why:
            raise RagtagSparkError(why)
        if coord.poll() is None:
            _stage_ended_first(coord, box, metrics)
        rc = coord.returncode
        stage.join(30 if rc == 0 else 0)
        if stage.is_alive():
            _cancel(sc, group, stage, 60)
            box.pop("error", None)  # our cancellation: the coordinator's lines say why
    except BaseException:
        _stop(coord, 60)
        _cancel(sc, group, stage, 60)
        raise
    finally:
        reader.join(10)
        server.close()
    if "error" in box and rc != 0:
        raise RagtagSparkError(_stage_error(box["error"]))
    if rc != 0:
        tail = "\n".join(log.lines[-15:])
        raise RagtagSparkError(f"ragtag_spark: the coordinator exited {rc}; "
                               f"its last lines:\n{tail}")
    return RunResult(metrics=_read_metrics(metrics), weights=weights, log=list(log.lines),
                     workdir=workdir, returncode=rc, first_step_s=first[0],
                     tasks=box.get("tasks", []))
