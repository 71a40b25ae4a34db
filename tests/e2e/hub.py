"""A local server that imitates a model hub, for the download tests (tests/e2e/test_downloads.py).

Two origins on 127.0.0.1 (two ports): the hub answers `/<owner>/<repo>/resolve/main/<file>` with a
302 to the CDN, as huggingface.co does; the CDN serves the bytes with CORS, `Range` (206,
Content-Range), `If-Range`, `ETag` and `Last-Modified`. Both answer CORS preflights (the client's
Range / If-Range headers are not CORS-safelisted). Faults are planned per file, one per request in
order ("drop@N": send N bytes of the answer, wait for go, then close the connection; "stall@N": send
N bytes then nothing until released; an HTTP status such as "503" or "404": that answer, empty), and
a file can change (new bytes, new ETag), serve without ranges, lose its CORS headers, or be refused
by the hub itself (`status`: 401 / 403 for a gated repository, 404 for one that is gone, as
huggingface.co answers its resolve route). Every request is logged: (origin, method, file, Range,
If-Range, status).
"""
from __future__ import annotations

import http.server
import socket
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate


@dataclass
class File:
    data: bytes
    etag: str
    modified: str = field(default_factory=lambda: formatdate(time.time() - 3600, usegmt=True))
    ranges: bool = True                 # the CDN honours Range
    cors: bool = True                   # the CDN sends CORS headers
    faults: list = field(default_factory=list)     # one per GET of the bytes, in order
    then: tuple | None = None           # (data, etag): what the file becomes after its next fault
    status: int | None = None           # the hub's answer to every request of it instead of the redirect


class Hub:
    def __init__(self):
        self.files: dict[str, File] = {}
        self.log: list[tuple] = []
        self.release = threading.Event()       # lets the stalled answers go (set by close())
        self.stalled = threading.Event()       # set when an answer stalls
        self.go = threading.Event()            # a held "drop@N" answer closes once this is set
        self.lock = threading.Lock()
        self.cdn = self._serve("cdn")
        self.hub = self._serve("hub")

    # ---------------------------------------------------------------- set-up
    def put(self, name: str, data: bytes, etag: str | None = None, **kw) -> str:
        """Serve `data` as `name`; returns its resolve URL on the hub."""
        with self.lock:
            self.files[name] = File(data, etag or f'"{name}-{len(data)}-{hash(data) & 0xffffffff:x}"', **kw)
        return self.url(name)

    def url(self, name: str) -> str:
        return f"{self.hub_origin}/owner/repo/resolve/main/{name}"

    def plan(self, name: str, *faults: str):
        with self.lock:
            self.files[name].faults = list(faults)

    def gets(self, name: str, origin: str = "cdn") -> list[tuple]:
        """The logged GETs of `name` at `origin`: [(range, if_range, status)]."""
        return [(r, ir, st) for (o, m, n, r, ir, st) in self.log if o == origin and m == "GET" and n == name]

    def close(self):
        self.release.set()
        self.go.set()
        for srv in (self.hub_srv, self.cdn_srv):
            srv.shutdown()
            srv.server_close()

    # ---------------------------------------------------------------- servers
    def _serve(self, role: str):
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def cors(self, f: File | None = None):
                if f is None or f.cors:
                    self.send_header("Access-Control-Allow-Origin", "*")
                    self.send_header("Access-Control-Expose-Headers",
                                     "Content-Range, Content-Length, ETag, Accept-Ranges, Last-Modified")

            def do_OPTIONS(self):
                name = self.path.split("?")[0].rsplit("/", 1)[-1]
                f = hub.files.get(name)
                hub.log.append((role, "OPTIONS", name, None, None, 204))
                self.send_response(204)
                if role == "hub" or f is None or f.cors:
                    self.send_header("Access-Control-Allow-Origin", "*")
                    self.send_header("Access-Control-Allow-Methods", "GET, HEAD")
                    self.send_header("Access-Control-Allow-Headers", "Range, If-Range")
                    self.send_header("Access-Control-Max-Age", "0")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self):
                self.answer(head=True)

            def do_GET(self):
                self.answer(head=False)

            def answer(self, head: bool):
                path = self.path.split("?")[0]
                name = path.rsplit("/", 1)[-1]
                f = hub.files.get(name)
                rng, if_range = self.headers.get("Range"), self.headers.get("If-Range")
                if f is None:
                    return self.plain(404, name, rng, if_range, head)
                if role == "hub" and f.status:          # gated (401 / 403) or gone (404), with CORS as the hub sends
                    return self.plain(f.status, name, rng, if_range, head)
                if role == "hub":                       # resolve -> the CDN, as the hub does
                    hub.log.append((role, "HEAD" if head else "GET", name, rng, if_range, 302))
                    self.send_response(302)
                    self.cors()
                    self.send_header("Location", f"{hub.cdn_origin}/cdn/{name}?sig=abc")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with hub.lock:
                    fault = f.faults.pop(0) if f.faults and not head else None
                    if fault and f.then:                # the file changes once this answer is sent
                        data2, etag2 = f.then
                        f.then = None
                        hub.files[name] = File(data2, etag2, ranges=f.ranges, cors=f.cors, faults=f.faults)
                if fault and fault.isdigit():           # an HTTP status, e.g. "503" or "404"
                    return self.plain(int(fault), name, rng, if_range, head, f)
                data, status, start = f.data, 200, 0
                if f.ranges and rng and (if_range is None or if_range in (f.etag, f.modified)):
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    if start >= len(data):
                        return self.plain(416, name, rng, if_range, head, f)
                    status = 206
                hub.log.append((role, "HEAD" if head else "GET", name, rng, if_range, status))
                body = data[start:]
                self.send_response(status)
                self.cors(f)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", f.etag)
                self.send_header("Last-Modified", f.modified)
                if f.ranges:
                    self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if head:
                    return
                if fault and fault.startswith(("drop@", "stall@")):
                    n = int(fault.split("@")[1])
                    self.wfile.write(body[:n])
                    self.wfile.flush()
                    if fault.startswith("stall@"):
                        hub.stalled.set()
                        hub.release.wait(120)
                    else:                               # the client has the bytes it keeps: now drop
                        hub.go.wait(120)
                        hub.go.clear()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def plain(self, status, name, rng, if_range, head, f=None):
                hub.log.append((role, "HEAD" if head else "GET", name, rng, if_range, status))
                self.send_response(status)
                self.cors(f)
                self.send_header("Content-Length", "0")
                self.end_headers()

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        origin = f"http://127.0.0.1:{srv.server_address[1]}"
        setattr(self, f"{role}_srv", srv)
        setattr(self, f"{role}_origin", origin)
        return origin
