"""tools/serve.mjs on a free port, for the Python that drives a browser against the app: set-up's boot
snapshot (tools/boot_snapshot.py), the GPU check (tools/gpu_check.py) and the dev scripts.

    with served() as url:        # e.g. "http://127.0.0.1:40613/", the repository's web root
        page.goto(url + "dev/kernels.html")

root: the checkout to serve (default this one). ServerError when the server does not start.
dev_page(root, name): where a checkout serves a dev page (web/dev/, or web/ in an older one).
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


class ServerError(RuntimeError):
    """tools/serve.mjs did not start (its first line names no URL)."""


def dev_page(root: pathlib.Path | str, name: str) -> str:
    """The path, under the server's root, of dev page `name` ("bench.html", "bench-ready.html",
    "kernels.html") in checkout `root`: "dev/" + name, or name itself in a checkout from before
    the dev pages moved to web/dev/ (an A/B script's --before tree)."""
    return name if (pathlib.Path(root) / "web" / name).exists() else "dev/" + name


@contextlib.contextmanager
def served(root: pathlib.Path | str = ROOT):
    root = pathlib.Path(root)
    proc = subprocess.Popen(["node", str(root / "tools" / "serve.mjs")], cwd=root, env=dict(os.environ, PORT="0"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://[\d.]+:\d+/", line)
        if not m:
            raise ServerError(f"tools/serve.mjs did not start: {line.strip()!r}")
        yield m.group(0)
    finally:
        proc.kill()
        proc.wait()
