"""The barrier task: one ragtag worker per task, on the task's CPUs or GPU.

Runs on the executors (pickled with its spec by Spark). The join string
reaches the worker in its environment (RAGTAG_JOIN), never on its command
line, which every user of the machine can read in ps.
"""
import os
import socket
import subprocess

from .binary import RagtagSparkError, locate, version
from .logstream import LogClient


def task_resources(ctx, conf_cpus=1):
    """(cpus, gpu addresses) of a task: TaskContext.cpus() (spark.task.cpus;
    PySpark 3.3 and later) and the addresses of its 'gpu' resource
    (spark.task.resource.gpu.amount with a discovery script)."""
    cpus = conf_cpus
    if hasattr(ctx, "cpus"):
        try:
            cpus = int(ctx.cpus())
        except Exception:  # older PySpark, or a context without the property
            pass
    gpus = []
    try:
        res = ctx.resources() or {}
        if "gpu" in res:
            gpus = list(res["gpu"].addresses)
    except Exception:
        gpus = []
    return max(1, cpus), gpus


def worker_argv(path, spec, partition, attempt, cpus, gpus):
    """The worker's command line: no secret in it. A task with a GPU runs on
    the cuda backend, on the first GPU Spark gave it; a CPU task runs
    --threads spark.task.cpus."""
    argv = [path, "worker", "--join", spec["join_endpoint"],
            "--name", f"spark-{partition:03d}-{attempt}",
            "--parent", str(os.getpid()),
            "--connect-timeout", str(spec["connect_timeout"])]
    if spec.get("ring_port"):
        argv += ["--ring-port", str(spec["ring_port"] + partition)]
    if gpus:
        argv += ["--backend", spec.get("gpu_backend", "cuda"), "--device", str(gpus[0])]
    else:
        argv += ["--backend", spec.get("cpu_backend", "cpu")]
    argv += ["--threads", str(cpus)]
    argv += list(spec.get("worker_args", []))
    return argv


def ended_line(argv, host, rc, lines):
    """The task's last streamed line: its worker's name, host, status and
    whether the run had admitted it (launcher.py reads it)."""
    when = "after" if any(" joined run " in x for x in lines) else "before"
    return (f"ragtag_spark: worker {argv[argv.index('--name') + 1]} on {host} ended with "
            f"status {rc} {when} joining")


def run_worker(spec, partition, attempt, cpus, gpus):
    """Starts the worker, streams its lines, returns the task's result."""
    host = socket.gethostname()
    path, env, where = locate(spec["executor_ragtag"], spec.get("ship"))
    if path is None:
        raise RagtagSparkError(f"ragtag_spark: executor {host} cannot run ragtag: "
                               f"no ragtag binary: looked for {where} (docs/spark.md)")
    penv = dict(os.environ, **env)
    penv["RAGTAG_JOIN"] = spec["join"]
    got = version(path, env)
    if got != spec["version"]:
        raise RagtagSparkError(
            f"ragtag_spark: version mismatch: executor {host} has '{got}' ({path}) "
            f"but the driver has '{spec['version']}' (docs/spark.md)")
    argv = worker_argv(path, spec, partition, attempt, cpus, gpus)
    client = LogClient(spec["log_host"], spec["log_port"], spec["log_token"],
                       f"[task {partition}] ")
    lines = []
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=penv)
    try:
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            client.send(line)
        rc = proc.wait()
        # the driver stops a run that cannot begin at once on this line
        # instead of waiting --join-timeout for a worker that is gone
        client.send(ended_line(argv, host, rc, lines))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        client.close()
    return {"partition": partition, "attempt": attempt, "host": host,
            "returncode": rc, "argv": argv, "lines": lines}


def barrier_task(spec, iterator):
    """mapPartitions body of the barrier stage. A worker that fails is a
    lost worker: the task still ends normally, so Spark does not tear down
    the others' tasks, and the coordinator goes on with the rest (elastic
    membership); the coordinator's status is the run's."""
    from pyspark import BarrierTaskContext
    for _ in iterator:
        pass
    ctx = BarrierTaskContext.get()
    cpus, gpus = task_resources(ctx, spec.get("task_cpus", 1))
    yield run_worker(spec, ctx.partitionId(), ctx.attemptNumber(), cpus, gpus)
