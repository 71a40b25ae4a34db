"""tools/serve.mjs (what `npm start` runs) under hostile requests, over raw sockets: malformed
%-escapes, path traversal, overlong paths and headers, NUL bytes, bad headers, odd methods,
absolute-form targets, garbage bytes. Every request gets 400 / 404 / 405 / 416 / 431 (never a file
outside the served folders), and after every one a normal GET still works: one request cannot
take the server down."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import ROOT, need

INDEX = (ROOT / "web" / "index.html").read_bytes()
SECRET = (ROOT / "package.json").read_bytes()           # outside every mount: must never be served


@pytest.fixture(scope="module")
def server():
    need(shutil.which("node") is not None, "node is not installed")
    proc = subprocess.Popen(["node", str(ROOT / "tools" / "serve.mjs")], cwd=ROOT, env=dict(os.environ, PORT="0"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    m = re.search(r"http://([\d.]+):(\d+)/", line)
    assert m, f"server did not start: {line!r}"
    yield proc, (m.group(1), int(m.group(2)))
    proc.kill()
    proc.wait()


def exchange(addr, raw: bytes, timeout=10.0) -> bytes:
    """Send raw bytes, read until the server closes (or the timeout): the whole answer.
    (No half-close: Node drops the answer to a client that shuts down its sending side.)"""
    with socket.create_connection(addr, timeout=timeout) as s:
        try:
            s.sendall(raw)
        except OSError:                      # the server may close before reading it all
            pass
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
        return out


def status(resp: bytes) -> int | None:
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", resp)
    return int(m.group(1)) if m else None


def request(method, target, headers=None, body=b""):
    h = {"Host": "127.0.0.1", "Connection": "close", **(headers or {})}
    head = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") if isinstance(target, str) \
        else method.encode() + b" " + target + b" HTTP/1.1\r\n"
    return head + b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in h.items()) + b"\r\n" + body


def still_serving(server):
    proc, addr = server
    assert proc.poll() is None, f"the server died: {proc.stdout.read()}"
    resp = exchange(addr, request("GET", "/"))
    assert status(resp) == 200 and resp.endswith(INDEX), resp[:300]


TRAVERSAL = ["/../package.json", "/../../../../etc/passwd", "/..%2fpackage.json", "/%2e%2e/package.json",
             "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "/node_modules/pyodide/../../package.json",
             "/node_modules/pyodide/..%2f..%2fpackage.json", "/shaders/../package.json",
             "/build/web/%2e%2e/%2e%2e/package.json", "/..\\package.json", "/%5c..%5cpackage.json",
             "//etc/passwd", "/./../package.json", "/web/../../package.json"]

CASES = [
    # (name, raw request, allowed statuses)
    *[(f"malformed escape {t}", request("GET", t), {400})
      for t in ("/%E0%A4%A", "/%", "/%zz", "/%E0%A4", "/index.html%", "/%C0%AF", "/%ED%A0%80", "/?x=%E0%A4%A".replace("?", "%"))],
    ("escape in the query only", request("GET", "/index.html?x=%E0%A4%A"), {200}),
    *[(f"traversal {t}", request("GET", t), {400, 404}) for t in TRAVERSAL],
    ("NUL escaped", request("GET", "/index.html%00.png"), {400, 404}),
    ("NUL raw in the path", request("GET", b"/index\x00.html"), {400}),
    ("NUL in a header", request("GET", "/", {"X-A": "a\x00b"}), {400}),
    ("overlong path", request("GET", "/" + "a" * 8000), {404}),
    ("overlong path of segments", request("GET", "/" + "a/" * 3000 + "x"), {404}),
    ("path over the header limit", request("GET", "/" + "a" * 70000), {400, 431}),
    ("header over the limit", request("GET", "/", {"X-Big": "b" * 70000}), {400, 431}),
    ("10000 headers", request("GET", "/", {f"X-{i}": "v" for i in range(10000)}), {400, 431}),
    *[(f"method {m}", request(m, "/"), {405}) for m in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE")],
    ("POST with a body", request("POST", "/index.html", {"Content-Length": "5"}, b"hello"), {405}),
    ("PUT over a file", request("PUT", "/index.html", {"Content-Length": "3"}, b"xyz"), {405}),
    ("OPTIONS *", request("OPTIONS", "*"), {400, 405}),
    ("CONNECT", request("CONNECT", "127.0.0.1:443"), {405}),
    ("unknown method", request("FROB", "/"), {400, 405}),
    ("lower-case method", request("get", "/"), {400, 405}),
    ("target without a slash", request("GET", "index.html"), {400}),
    ("target *", request("GET", "*"), {400}),
    ("absolute-form traversal", request("GET", "http://127.0.0.1/../../package.json"), {400, 404}),
    ("absolute-form bad escape", request("GET", "http://127.0.0.1/%E0%A4%A"), {400}),
    ("absolute-form other scheme", request("GET", "file:///etc/passwd"), {400}),
    ("header without a colon", b"GET / HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", {400}),
    ("header name with a space", b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", {400}),
    ("control byte in a header", request("GET", "/", {"X-A": "a\x01b"}), {400}),
    ("bad content-length", request("GET", "/", {"Content-Length": "abc"}), {400}),
    ("two content-lengths", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", {400}),
    ("bad chunked body", request("POST", "/", {"Transfer-Encoding": "chunked"}, b"zz\r\nxx\r\n"), {400, 405}),
    ("no Host header", b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", {400}),
    ("HTTP version 9.9", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", {400, 505}),
    ("HTTP/0.9 request", b"GET /\r\n\r\n", {200, 400, None}),         # Node answers it as a GET
    ("upgrade to websocket", request("GET", "/", {"Connection": "Upgrade", "Upgrade": "websocket"}), {405}),
    ("garbage bytes", bytes(range(256)) * 4, {400, None}),
    ("only CRLFs", b"\r\n" * 100, {400, None}),
    *[(f"range {r}", request("GET", "/index.html", {"Range": r}), {416})
      for r in ("bytes=999999999999999999999-", "bytes=5-1", f"bytes={len(INDEX)}-")],
    ("range garbage is ignored", request("GET", "/index.html", {"Range": "bytes=a-b"}), {200}),
]


def test_normal_requests(server):
    _, addr = server
    resp = exchange(addr, request("GET", "/index.html?x=1"))
    assert status(resp) == 200 and resp.endswith(INDEX)
    resp = exchange(addr, request("HEAD", "/index.html"))
    assert status(resp) == 200 and resp.endswith(b"\r\n\r\n") and f"content-length: {len(INDEX)}".encode() in resp.lower()
    resp = exchange(addr, request("GET", "/index.html", {"Range": "bytes=0-9"}))
    assert status(resp) == 206 and resp.endswith(INDEX[:10])
    resp = exchange(addr, request("GET", "http://127.0.0.1:1/index.html"))       # absolute-form
    assert status(resp) == 200 and resp.endswith(INDEX)
    assert status(exchange(addr, request("GET", "/no/such/file"))) == 404
    resp = exchange(addr, request("OPTIONS", "/"))
    assert status(resp) == 405 and b"allow: GET, HEAD" in resp.lower().replace(b"get, head", b"GET, HEAD")


def test_boot_snapshot_goes_gzip_compressed(server):
    """build/web/boot-snapshot.bin (tools/boot_snapshot.py) goes as its precompressed .gz to a client
    that accepts gzip, as itself to one that does not or asks for a range."""
    _, addr = server
    snap = ROOT / "build" / "web" / "boot-snapshot.bin"
    need(snap.exists() and snap.with_name(snap.name + ".gz").exists(),
         "no shipped boot snapshot (tools/boot_snapshot.py needs Playwright and Chromium)")
    gz = snap.with_name(snap.name + ".gz").read_bytes()
    resp = exchange(addr, request("GET", "/build/web/boot-snapshot.bin", {"Accept-Encoding": "br, gzip, deflate"}))
    head, body = resp.split(b"\r\n\r\n", 1)
    assert status(resp) == 200 and b"content-encoding: gzip" in head.lower() and b"vary: accept-encoding" in head.lower()
    assert body == gz and f"content-length: {len(gz)}".encode() in head.lower()
    resp = exchange(addr, request("HEAD", "/build/web/boot-snapshot.bin"))
    assert status(resp) == 200 and b"content-encoding" not in resp.lower()
    assert f"content-length: {snap.stat().st_size}".encode() in resp.lower()
    resp = exchange(addr, request("GET", "/build/web/boot-snapshot.bin", {"Accept-Encoding": "gzip", "Range": "bytes=0-9"}))
    assert status(resp) == 206 and b"content-encoding" not in resp.lower() and resp.endswith(snap.read_bytes()[:10])
    resp = exchange(addr, request("GET", "/index.html", {"Accept-Encoding": "gzip"}))      # nothing else is
    assert status(resp) == 200 and resp.endswith(INDEX) and b"content-encoding" not in resp.lower()


@pytest.mark.parametrize("raw,allowed", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_request_answered_and_server_lives(server, raw, allowed):
    _, addr = server
    # blank lines only: Node waits for a request line after them and never answers (None); 2 s of
    # silence says so as well as the default 10 s did
    resp = exchange(addr, raw, timeout=2.0 if not raw.strip(b"\r\n") else 10.0)
    assert status(resp) in allowed, resp[:300]
    assert SECRET not in resp and b"root:" not in resp
    still_serving(server)


def test_client_that_hangs_up_early(server):
    _, addr = server
    for raw in (b"GET /index.html HTTP/1.1\r\nHost: x\r\n", b"GE", request("GET", "/index.html")):
        s = socket.create_connection(addr)
        s.sendall(raw)
        s.close()                                         # before (or while) the answer is sent
    still_serving(server)


_segment = st.one_of(
    st.sampled_from(["..", ".", "", "%", "%2e%2e", "%2f", "%00", "%E0%A4%A", "%ff", "index.html", "node_modules",
                     "pyodide", "shaders", "build", "web", "\\", "%5c", "~", "*", "?", "#", ";", "%25"]),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7e), max_size=12))


@settings(max_examples=int(os.environ.get("SERVE_FUZZ_EXAMPLES", 150)), deadline=None, derandomize=True,
          database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "HEAD", "GET", "POST", "OPTIONS", "PUT", "DELETE", "BREW"]),
       segments=st.lists(_segment, max_size=8), absolute=st.booleans())
def test_fuzz_paths_and_methods(server, method, segments, absolute):
    _, addr = server
    target = "/" + "/".join(segments)
    if absolute:
        target = "http://127.0.0.1" + target
    resp = exchange(addr, request(method, target))
    code = status(resp)
    assert code in {200, 400, 404, 405}, (target, resp[:300])
    if code == 200:
        assert method in ("GET", "HEAD")
    assert SECRET not in resp
    still_serving(server)
