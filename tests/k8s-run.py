#!/usr/bin/env python3
"""k8s-run.py — run the pods of deploy/k8s/*.yaml in Docker, the way a
Kubernetes node would, to check that every command line there is one ragtag
accepts and that the coordinator Job and the worker Jobs train together.

  k8s-run.py IMAGE SECRETDIR PREFIX MANIFEST... [-- EXTRA COORD ARGS]

What is emulated: a Service is a network alias of the pods its selector
matches; a Secret is SECRETDIR's files (owned by root, group fsGroup, mode
defaultMode, as the kubelet mounts them); secretKeyRef env values come from
the same files and reach docker through its environment, never its
arguments; emptyDir and PersistentVolumeClaim are host directories (root,
group fsGroup, setgid, 2775); securityContext runAsUser/runAsGroup/fsGroup
become --user and --group-add; limits.cpu becomes --cpus; an Indexed Job
runs `completions` pods with JOB_COMPLETION_INDEX; $(VAR) in args is
expanded from the container's env; initContainers run first and must exit
0. Every image is IMAGE. A pod asking for nvidia.com/gpu runs too: without
a GPU its worker must be refused for its backend (exit 1, naming cuda), not
for its command line (exit 2).

Prints one line per container (name, exit status) and exits 0 when the
coordinator and the CPU workers exited 0. Containers and the network are
named PREFIX-*; the caller removes them (docker rm -f, network rm).
"""
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml


def sh(args, env=None, check=True):
    r = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if check and r.returncode != 0:
        sys.exit("k8s-run: %s failed (%d): %s" % (" ".join(args[:3]), r.returncode, r.stdout))
    return r


def cpus(q):
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def host_dir(root, name, group):
    d = os.path.join(root, name)
    if not os.path.isdir(d):
        os.makedirs(d)
        os.chown(d, 0, group)
        os.chmod(d, 0o2775)
    return d


def secret_dir(root, secretdir, mode, group):
    d = os.path.join(root, "secret-%o" % mode)
    if not os.path.isdir(d):
        os.makedirs(d)
        for f in os.listdir(secretdir):
            with open(os.path.join(secretdir, f), "rb") as src, \
                    open(os.path.join(d, f), "wb") as dst:
                dst.write(src.read())
            os.chown(os.path.join(d, f), 0, group)
            os.chmod(os.path.join(d, f), mode)
    return d


def docker_args(ctx, pod, c, name, env_extra):
    """The docker run arguments of container c of pod spec `pod`, and its env."""
    sc = pod.get("securityContext", {})
    uid, gid, fsg = sc.get("runAsUser"), sc.get("runAsGroup"), sc.get("fsGroup")
    args = ["docker", "run", "--name", name, "--network", ctx["net"]]
    for alias in ctx["aliases"]:
        args += ["--network-alias", alias]
    if uid is not None:
        args += ["--user", "%d:%d" % (uid, gid if gid is not None else uid)]
    if fsg is not None:
        args += ["--group-add", str(fsg)]
    lim = c.get("resources", {}).get("limits", {})
    if "cpu" in lim:
        args += ["--cpus", "%g" % cpus(lim["cpu"])]
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = vols[m["name"]]
        if "secret" in v:
            src = secret_dir(ctx["root"], ctx["secretdir"], v["secret"].get("defaultMode", 0o644),
                             fsg or 0)
        elif "persistentVolumeClaim" in v:
            src = host_dir(ctx["root"], "pvc-" + v["persistentVolumeClaim"]["claimName"], fsg or 0)
        else:
            src = host_dir(ctx["root"], "%s-%s" % (ctx["pod"], m["name"]), fsg or 0)
        args += ["-v", "%s:%s%s" % (src, m["mountPath"], ":ro" if m.get("readOnly") else "")]
    env = dict(env_extra)
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            with open(os.path.join(ctx["secretdir"], ref["key"])) as f:
                env[e["name"]] = f.read().strip()
    for k in env:
        args += ["-e", k]  # the value travels in docker's environment
    cmd = [re.sub(r"\$\((\w+)\)", lambda mo: env.get(mo.group(1), mo.group(0)), a)
           for a in list(c.get("command", [])) + list(c.get("args", []))]
    if c.get("command"):
        args += ["--entrypoint", cmd[0], ctx["image"]] + cmd[1:]
    else:
        args += [ctx["image"]] + cmd
    return args, dict(os.environ, **env)


def run_pod(ctx, job, index, coord_extra):
    pod = job["spec"]["template"]["spec"]
    labels = job["spec"]["template"].get("metadata", {}).get("labels", {})
    ctx["aliases"] = [s["metadata"]["name"] for s in ctx["services"]
                      if all(labels.get(k) == v for k, v in s["spec"]["selector"].items())]
    ctx["pod"] = "%s-%s" % (job["metadata"]["name"], index if index is not None else 0)
    env = {"JOB_COMPLETION_INDEX": str(index)} if index is not None else {}
    for i, c in enumerate(pod.get("initContainers", [])):
        name = "%s-%s-init%d" % (ctx["prefix"], ctx["pod"], i)
        args, e = docker_args(ctx, pod, c, name, env)
        r = sh(args[:2] + ["--rm"] + args[2:], env=e, check=False)
        print("k8s-run: %s (init %s): exit %d %s" % (ctx["pod"], c["name"], r.returncode,
                                                     r.stdout.strip()))
        if r.returncode != 0:
            sys.exit(1)
    started = []
    for c in pod["containers"]:
        name = "%s-%s-%s" % (ctx["prefix"], ctx["pod"], c["name"])
        args, e = docker_args(ctx, pod, c, name, env)
        if "coord" in c.get("args", [])[:1]:
            args += coord_extra
        gpu = "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
        sh(args[:2] + ["-d"] + args[2:], env=e)
        started.append((name, c, gpu))
    return started


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    image, secretdir, prefix, files = argv[0], argv[1], argv[2], argv[3:]
    docs = [d for f in files for d in yaml.safe_load_all(open(f)) if d]
    ctx = {"image": image, "secretdir": secretdir, "prefix": prefix, "net": prefix + "-net",
           "root": tempfile.mkdtemp(prefix=prefix + "-"),
           "services": [d for d in docs if d["kind"] == "Service"]}
    os.chmod(ctx["root"], 0o755)
    sh(["docker", "network", "create", ctx["net"]])
    print("k8s-run: volumes under %s" % ctx["root"])
    jobs = [d for d in docs if d["kind"] == "Job"]
    # the coordinator first, as a Service's pods usually are up before clients
    jobs.sort(key=lambda j: "coord" not in j["metadata"]["name"])
    started = []
    for job in jobs:
        spec = job["spec"]
        idx = range(spec.get("completions", 1)) if spec.get("completionMode") == "Indexed" \
            else [None]
        for i in idx:
            started += run_pod(ctx, job, i, extra)
    ok = True
    deadline = time.time() + 420
    for name, c, gpu in started:
        left = max(1, int(deadline - time.time()))
        r = sh(["timeout", str(left), "docker", "wait", name], check=False)
        rc = int(r.stdout.strip()) if r.returncode == 0 else -1
        log = sh(["docker", "logs", name], check=False).stdout
        tail = log.strip().splitlines()[-1] if log.strip() else ""
        print("k8s-run: %s: exit %d: %s" % (name, rc, tail))
        if gpu:
            good = rc == 0 or (rc == 1 and "cuda" in log)
        else:
            good = rc == 0
        if not good:
            ok = False
            print(log[-3000:])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
