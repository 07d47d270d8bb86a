"""A plain-HTTP front (a load balancer, a port-forward) before one real Ray dashboard, with faults on demand.

Modes, for every request or for the next `count` only (a blip):
- "pass": forward to the dashboard;
- "503": a load balancer with no healthy backend;
- "404": a stray 404 that is not Ray's (an ingress default backend);
- "slow": answer after `delay_s` (then forward);
- "refused": stop listening; the port refuses connections until `mode("pass")`;
- "drip": forward, then send the answer (padded with `pad` spaces, still valid JSON) one byte every
  `delay_s`: each read is quick, the whole answer is not (a trickling proxy, a very large log).
`only` restricts the fault to paths containing that text (e.g. "/api/jobs/").
"""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
import urllib.request

from tests.ray_fixtures import QuietHandler


class FaultFront:
    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self._mode, self._count, self._only, self.delay_s, self.pad = "pass", None, "", 0.0, 0
        self.seen: list[tuple[str, str, str]] = []  # (method, path, what the front did)
        self._lock = threading.Lock()
        self._server = None
        self.port = 0
        self._listen()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def mode(self, mode: str, count: int | None = None, only: str = "", delay_s: float = 0.0,
             pad: int = 0) -> FaultFront:
        with self._lock:
            self._mode, self._count, self._only, self.delay_s, self.pad = mode, count, only, delay_s, pad
        if mode == "refused":
            self._close()
        elif self._server is None:
            self._listen()
        return self

    def __enter__(self) -> FaultFront:
        return self

    def __exit__(self, *_exc) -> None:
        self._close()

    def _listen(self) -> None:
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        # A client that gives up on a slow or dripping answer breaks the pipe under its handler thread, which
        # may outlive the test: socketserver would print that traceback to whatever sys.stderr is then (another
        # test's captured output, or an in-process plan's).
        self._server.handle_error = lambda *_: None
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _fault_for(self, path: str) -> str:
        with self._lock:
            if self._mode == "pass" or (self._only and self._only not in path):
                return "pass"
            if self._count is not None:
                if self._count <= 0:
                    return "pass"
                self._count -= 1
            return self._mode

    def _handler(self):
        front = self

        class Handler(QuietHandler):
            def _reply(self, status: int, body: bytes, ctype: str = "text/plain", drip: bool = False) -> None:
                if drip:
                    body += b" " * front.pad
                self._head(status, ctype, len(body))
                if not drip:
                    return self.wfile.write(body)
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(front.delay_s)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = front._fault_for(self.path)
                front.seen.append((self.command, self.path, fault))
                if fault == "503":
                    return self._reply(503, b"no healthy upstream")
                if fault == "404":
                    return self._reply(404, b"default backend - 404")
                if fault == "slow":
                    time.sleep(front.delay_s)
                request = urllib.request.Request(front.upstream + self.path, data=body, method=self.command)
                if self.headers.get("Content-Type"):
                    request.add_header("Content-Type", self.headers["Content-Type"])
                try:
                    with urllib.request.urlopen(request, timeout=60) as resp:
                        self._reply(resp.status, resp.read(), resp.headers.get("Content-Type", "text/plain"),
                                    drip=fault == "drip")
                except urllib.error.HTTPError as err:
                    self._reply(err.code, err.read(), err.headers.get("Content-Type", "text/plain"))
                except OSError:
                    self._reply(502, b"bad gateway")

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                try:
                    self._handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a slow answer

            do_POST = do_GET  # noqa: N815
            do_DELETE = do_GET  # noqa: N815

        return Handler
