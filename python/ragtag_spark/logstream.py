"""Workers' log lines streamed to the driver while the stage runs.

A barrier stage returns its tasks' results only when every task has ended,
so each task also sends its worker's lines, as they come, to a small TCP
server on the driver (as HorovodRunner and TorchDistributor stream to the
notebook). The first line of a connection must be the run's random token:
anyone else is hung up on. Streaming is best effort: the lines also come
back with the task's result, so the returned log is whole either way.
"""
import hmac
import socket
import threading


class LogServer:
    """Accepts task connections on (host, port) and hands each line to
    `on_line`; close() stops it."""

    def __init__(self, host, port, token, on_line):
        self.token = token
        self.on_line = on_line
        self.sock = socket.create_server((host, port), reuse_port=False)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn, conn.makefile("r", encoding="utf-8", errors="replace") as f:
            conn.settimeout(10)
            first = f.readline().rstrip("\n")
            if not hmac.compare_digest(first, self.token):
                return
            conn.settimeout(None)
            for line in f:
                self.on_line(line.rstrip("\n"))

    def close(self):
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


class LogClient:
    """A task's end of the stream; never raises: a driver that cannot be
    reached costs the live view, not the run."""

    def __init__(self, host, port, token, prefix):
        self.prefix = prefix
        self.sock = None
        try:
            self.sock = socket.create_connection((host, port), timeout=10)
            self.sock.sendall((token + "\n").encode())
        except OSError:
            self.sock = None

    def send(self, line):
        if self.sock is None:
            return
        try:
            self.sock.sendall((self.prefix + line + "\n").encode("utf-8", "replace"))
        except OSError:
            self.sock = None

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
