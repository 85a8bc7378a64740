#!/usr/bin/env python3
"""status_check.py - checks of the coordinator's status page for
tests/test_status.sh and tests/test_status_page.sh (docs/status.md).

  status_check.py wait  URL TOKEN           until training runs and every worker has a speed
  status_check.py api   URL TOKEN BATCH N   /api/status: N workers, speeds > 0, shares sum to BATCH
  status_check.py prom  URL TOKEN BATCH N   /metrics through prometheus_client's parser: the same
  status_check.py hostile URL TOKEN         oversized headers, unknown paths, slow clients, many
                                            connections, too many requests: bounded, the page
                                            still answers (from 127.0.0.2) and training goes on
Prints one 'ok: ...' line per check; exits 1 on the first failure."""
import json
import socket
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def get(url, token, path, source=None, timeout=5.0):
    """(status, body) of GET path; source: the local address to connect from."""
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=timeout,
                                 source_address=(source, 0) if source else None)
    auth = "Authorization: Bearer %s\r\n" % token if token else ""
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n" % (path, auth)).encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/") else 0
    if b"transfer-encoding: chunked" in head.lower():
        body = dechunk(body)
    return status, body


def dechunk(b):
    out = b""
    while b:
        size, _, rest = b.partition(b"\r\n")
        n = int(size.split(b";")[0], 16)
        if n == 0:
            break
        out += rest[:n]
        b = rest[n + 2:]
    return out


def status(url, token, source=None):
    code, body = get(url, token, "/api/status", source)
    if code != 200:
        fail("/api/status answered %d" % code)
    return json.loads(body)


def wait(url, token):
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            st = status(url, token)
            ws = st["workers"]
            if (st["run"]["phase"] == "train" and st["run"]["step"] > 20 and ws and
                    all(w["images_per_s"] > 0 and w["steps"] > 0 for w in ws)):
                print("ok: training under way at step %d" % st["run"]["step"])
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    fail("the run did not reach training with speeds within 90 s")


def api(url, token, batch, n):
    code, _ = get(url, "", "/api/status")
    if code != 401:
        fail("/api/status without the token answered %d, not 401" % code)
    code, _ = get(url, "wrong" + token, "/api/status")
    if code != 401:
        fail("/api/status with a wrong token answered %d, not 401" % code)
    print("ok: /api/status and /metrics refuse a missing or wrong token (401)")
    st = status(url, token)
    ws = [w for w in st["workers"] if w["rank"] >= 0]
    if len(ws) != n or sorted(w["rank"] for w in ws) != list(range(n)):
        fail("expected ranks 0..%d, got %s" % (n - 1, [w["rank"] for w in st["workers"]]))
    for w in ws:
        for k in ("name", "host", "backend", "device", "threads", "cpu_quota", "images_per_s",
                  "share", "standby", "link", "heartbeat_age_s", "steps", "state"):
            if k not in w:
                fail("worker %s has no %s" % (w.get("name"), k))
        if not w["images_per_s"] > 0:
            fail("worker %s: speed %s" % (w["name"], w["images_per_s"]))
        if w["state"] != "training":
            fail("worker %s: state %s" % (w["name"], w["state"]))
    total = sum(w["share"] for w in ws)
    if total != batch:
        fail("shares %s sum to %d, not the batch %d" % ([w["share"] for w in ws], total, batch))
    r = st["run"]
    if r["batch"] != batch or r["workers"] != n or r["mode"] != "sync" or r["generation"] < 1:
        fail("run fields: %s" % r)
    kinds = {e["kind"] for e in st["events"]}
    if not {"join", "plan"} <= kinds:
        fail("events lack joins or plans: %s" % sorted(kinds))
    print("ok: /api/status lists %d workers, speeds %s img/s, shares %s sum to the batch %d; "
          "events %s" % (n, [round(w["images_per_s"]) for w in ws], [w["share"] for w in ws],
                         batch, sorted(kinds)))


def prom(url, token, batch, n):
    from prometheus_client.parser import text_string_to_metric_families
    code, body = get(url, token, "/metrics")
    if code != 200:
        fail("/metrics answered %d" % code)
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    st = status(url, token)  # rendered with /metrics, or later

    def by_rank(name):
        return {int(s.labels["rank"]): s for s in fams[name].samples if int(s.labels["rank"]) >= 0}
    for need in ("ragtag_worker_images_per_second", "ragtag_worker_share", "ragtag_worker_standby",
                 "ragtag_worker_steps", "ragtag_worker_heartbeat_age_seconds", "ragtag_steps",
                 "ragtag_samples", "ragtag_epoch", "ragtag_loss"):
        if need not in fams:
            fail("/metrics has no %s (has %s)" % (need, sorted(fams)))
    share, ips = by_rank("ragtag_worker_share"), by_rank("ragtag_worker_images_per_second")
    if sorted(share) != list(range(n)):
        fail("/metrics ranks %s" % sorted(share))
    if sum(s.value for s in share.values()) != batch:
        fail("/metrics shares sum to %s" % sum(s.value for s in share.values()))
    if not all(s.value > 0 for s in ips.values()):
        fail("/metrics speeds %s" % [s.value for s in ips.values()])
    hosts = {w["rank"]: (w["name"], w["host"]) for w in st["workers"] if w["rank"] >= 0}
    for r, s in share.items():
        if (s.labels["name"], s.labels["host"]) != hosts[r]:
            fail("rank %d: /metrics says %s, /api/status %s" % (r, s.labels, hosts[r]))
    steps = fams["ragtag_steps"].samples[0].value
    if not 0 < steps <= st["run"]["step"]:
        fail("ragtag_steps_total %s against /api/status step %s" % (steps, st["run"]["step"]))
    print("ok: /metrics parsed by prometheus_client: %d families, per-worker gauges by rank, "
          "name and host agree with /api/status, shares sum to %d, step %d" %
          (len(fams), batch, steps))


def hostile(url, token):
    u = urlparse(url)
    addr = (u.hostname, u.port)
    step0 = status(url, token)["run"]["step"]
    # oversized headers: refused (431) or cut, never a hang
    s = socket.create_connection(addr, timeout=5)
    try:
        s.sendall(b"GET /api/status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
    except OSError:
        pass
    try:
        reply = s.recv(4096)
    except OSError:
        reply = b""
    s.close()
    if reply and b" 431 " not in reply.split(b"\r\n")[0] and b" 413 " not in reply.split(b"\r\n")[0]:
        fail("oversized headers answered %r" % reply[:60])
    print("ok: 200 kB of headers: %s" % (reply.split(b"\r\n")[0].decode() if reply else "cut"))
    for path, want in (("/nope", 404), ("/../etc/passwd", 404), ("/api/status/x", 404)):
        code, _ = get(url, token, path)
        if code != want:
            fail("%s answered %d, not %d" % (path, code, want))
    s = socket.create_connection(addr, timeout=5)
    s.sendall(b"POST /api/status HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
    if b" 405 " not in s.recv(4096).split(b"\r\n")[0]:
        fail("POST was not refused with 405")
    s.close()
    print("ok: unknown paths 404, POST 405")
    # too many requests on one connection: 429 and the connection closes
    s = socket.create_connection(addr, timeout=5)
    req = ("GET /api/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n" % token).encode()
    s.sendall(req * 40)
    data = b""
    s.settimeout(5)
    try:
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            data += c
    except OSError:
        pass
    s.close()
    if b"HTTP/1.1 429" not in data:
        fail("40 pipelined requests at once: no 429")
    print("ok: 40 requests at once on one connection: %d answered, then 429 and closed" %
          data.count(b"HTTP/1.1 200"))
    # slow clients and many connections from 127.0.0.1, held open
    held = []
    for i in range(300):
        try:
            c = socket.create_connection(addr, timeout=2)
            c.sendall(b"GET /api/status HTTP/1.1\r\nHo")
            held.append(c)
        except OSError:
            break
    t0 = time.time()
    times = []
    while time.time() - t0 < 4:
        for c in held[:20]:  # slow: a byte now and then
            try:
                c.send(b"s")
            except OSError:
                pass
        a = time.time()
        st = status(url, token, source="127.0.0.2")
        times.append(time.time() - a)
        time.sleep(0.5)
    for c in held:
        c.close()
    if max(times) > 2.0:
        fail("the page took %.1f s to answer during the attack" % max(times))
    print("ok: %d connections opened from 127.0.0.1 and held (20 of them trickling bytes): the page answered "
          "127.0.0.2 within %.3f s each time" % (len(held), max(times)))
    time.sleep(1)
    try:
        step1 = status(url, token)["run"]["step"]
    except OSError:
        # The page closes with the run; test_status.sh then checks that
        # the run ended well, which is training having gone on to its end.
        print("ok: the run reached its end during all that (step %d before); the page closed with it" % step0)
        return
    if not (step1 > step0 or status(url, token)["run"]["phase"] != "train"):
        fail("training did not go on: step %d then %d" % (step0, step1))
    print("ok: training went on during all that: step %d -> %d" % (step0, step1))


def main():
    cmd, url, token = sys.argv[1], sys.argv[2], sys.argv[3]
    if cmd == "wait":
        wait(url, token)
    elif cmd == "api":
        api(url, token, int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "prom":
        prom(url, token, int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "hostile":
        hostile(url, token)
    else:
        fail("unknown check " + cmd)


if __name__ == "__main__":
    main()
