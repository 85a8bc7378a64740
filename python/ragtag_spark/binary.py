"""Finding the ragtag binary and its version, on the driver and on executors.

The coordinator (driver) and the workers (executors) speak one protocol, so
they must run the same ragtag version. An executor's binary is either on its
PATH or shipped with the job (SparkContext.addFile of a static build or of an
installed tree, PREFIX/bin/ragtag with PREFIX/lib).
"""
import os
import shutil
import socket
import subprocess


class RagtagSparkError(RuntimeError):
    """A launch that cannot go on; the message says what and where."""


def resolve(cmd):
    """The absolute path of program `cmd` (a path, or a name looked up on
    the PATH), or None when there is no executable file there."""
    if os.sep in cmd:
        path = os.path.abspath(cmd)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(cmd)


def version(path, env=None):
    """`ragtag --version`'s line ('ragtag 0.1.0'), or raises
    RagtagSparkError naming the program and what it said. `env`: variables
    added to this process's environment for it."""
    try:
        out = subprocess.run([path, "--version"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=60,
                             env=dict(os.environ, **env) if env else None)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RagtagSparkError(f"{path} --version failed: {e}") from None
    text = out.stdout.decode("utf-8", "replace").strip()
    if out.returncode != 0 or not text.startswith("ragtag "):
        raise RagtagSparkError(
            f"{path} --version exited {out.returncode} saying {text[:200]!r}: "
            "is it a ragtag binary?")
    return text.splitlines()[0]


def shipped_tree(root):
    """For a file or directory shipped with SparkContext.addFile: the program
    and the environment it needs. A directory is an installed tree
    (PREFIX/bin/ragtag, PREFIX/lib, PREFIX/lib/ragtag/backends) or holds the
    program itself."""
    env = {}
    if os.path.isdir(root):
        prog = os.path.join(root, "bin", "ragtag")
        if not os.path.exists(prog):
            prog = os.path.join(root, "ragtag")
        lib = os.path.join(root, "lib")
        if os.path.isdir(lib):
            env["LD_LIBRARY_PATH"] = lib + (
                ":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else "")
            env["RAGTAG_BACKEND_PATH"] = os.path.join(lib, "ragtag", "backends")
    else:
        prog = root
    # addFile keeps the bytes; make sure the owner may run them
    if os.path.isfile(prog) and not os.access(prog, os.X_OK):
        os.chmod(prog, os.stat(prog).st_mode | 0o100)
    return prog, env


def locate(cmd, ship):
    """The executor's program and extra environment: the shipped one when
    `ship` names what the job shipped (its base name), else `cmd` on the
    PATH. Returns (path or None, env, where-it-looked)."""
    if ship:
        from pyspark import SparkFiles
        root = SparkFiles.get(ship)
        prog, env = shipped_tree(root)
        if not os.path.exists(prog):
            return None, env, f"the shipped {ship} ({root}) holds no bin/ragtag or ragtag"
        path = resolve(prog)
        return path, env, f"the shipped {ship} ({prog})"
    where = (f"'{cmd}' on its PATH ({os.environ.get('PATH', '')})" if os.sep not in cmd
             else f"'{cmd}'")
    return resolve(cmd), {}, where


def probe(cmd, ship):
    """What an executor has: a dict with host, path, version and error."""
    host = socket.gethostname()
    path, env, where = locate(cmd, ship)
    if path is None:
        return {"host": host, "path": None, "version": None,
                "error": f"no ragtag binary: looked for {where}"}
    try:
        return {"host": host, "path": path, "version": version(path, env), "error": None}
    except RagtagSparkError as e:
        return {"host": host, "path": path, "version": None, "error": str(e)}


def check(found, driver_path, driver_version):
    """Raises RagtagSparkError for the first executor whose probe shows no
    binary or another version than the driver's."""
    for p in found:
        if p["error"]:
            raise RagtagSparkError(
                f"ragtag_spark: executor {p['host']} cannot run ragtag: {p['error']}. "
                "Install ragtag on every executor (the same version as the driver's, "
                f"{driver_version}), or ship it with the job: run(..., ship='/opt/ragtag') "
                "for an installed tree or a static build (docs/spark.md)")
        if p["version"] != driver_version:
            raise RagtagSparkError(
                f"ragtag_spark: version mismatch: executor {p['host']} has "
                f"'{p['version']}' ({p['path']}) but the driver has '{driver_version}' "
                f"({driver_path}); the coordinator and its workers must run the same "
                "version: install the driver's on the executors or ship it with "
                "run(..., ship=...) (docs/spark.md)")
