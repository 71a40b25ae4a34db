"""tools/boot_snapshot.py's key logic: a shipped boot snapshot counts as made for this build only when
its JSON names this Pyodide version and this archive and the files are exactly the bytes it names;
anything else (another build, a torn or edited file, a broken JSON) is made again. (Making one in
Chromium is checked end to end by tests/e2e/test_boot_snapshot.py.)"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json

import pytest

from tests.conftest import ROOT


def _tool():
    spec = importlib.util.spec_from_file_location("boot_snapshot", ROOT / "tools" / "boot_snapshot.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bs = _tool()


@pytest.fixture
def build(tmp_path):
    """A fake build: an archive, Pyodide's package.json, and a snapshot written for them."""
    (tmp_path / "bitweb.zip").write_bytes(b"PK archive one")
    (tmp_path / "package.json").write_text(json.dumps({"name": "pyodide", "version": "314.0.7"}))
    paths = {"meta": tmp_path / "s.json", "bin_path": tmp_path / "s.bin", "gz": tmp_path / "s.bin.gz"}
    key = bs.wanted_key(tmp_path / "bitweb.zip", tmp_path / "package.json")
    data = bytes(range(256)) * 1000
    meta = bs.write(key, data, **paths)
    return tmp_path, paths, key, data, meta


def test_key_names_pyodide_and_the_archive(build):
    tmp, _, key, _, _ = build
    assert key == {"pyodide": "314.0.7", "zip_sha256": hashlib.sha256(b"PK archive one").hexdigest()}


def test_written_snapshot_is_current_and_exact(build):
    _, paths, key, data, meta = build
    assert bs.is_current(key, **paths)
    assert paths["bin_path"].read_bytes() == data
    assert gzip.decompress(paths["gz"].read_bytes()) == data
    on_disk = json.loads(paths["meta"].read_text())
    assert on_disk == meta
    assert meta["bytes"] == len(data) and meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert meta["gzip_bytes"] == paths["gz"].stat().st_size
    assert {k: meta[k] for k in key} == key


def test_another_archive_or_pyodide_is_stale(build):
    tmp, paths, key, _, _ = build
    (tmp / "bitweb.zip").write_bytes(b"PK archive two")
    assert not bs.is_current(bs.wanted_key(tmp / "bitweb.zip", tmp / "package.json"), **paths)
    assert not bs.is_current({**key, "pyodide": "314.0.8"}, **paths)
    assert bs.is_current(key, **paths)                         # (the files themselves are fine)


@pytest.mark.parametrize("spoil", ["truncate bin", "flip bin", "flip gz", "drop gz", "drop bin", "json garbage",
                                   "json list", "json without sha", "drop json"])
def test_spoiled_files_are_made_again(build, spoil):
    _, paths, key, data, meta = build
    b, g, m = paths["bin_path"], paths["gz"], paths["meta"]
    if spoil == "truncate bin":
        b.write_bytes(data[:-1])
    elif spoil == "flip bin":
        b.write_bytes(bytes([data[0] ^ 1]) + data[1:])          # same length, other bytes
    elif spoil == "flip gz":
        z = g.read_bytes()
        g.write_bytes(z[:-1] + bytes([z[-1] ^ 1]))
    elif spoil == "drop gz":
        g.unlink()
    elif spoil == "drop bin":
        b.unlink()
    elif spoil == "json garbage":
        m.write_text("{not json")
    elif spoil == "json list":
        m.write_text("[]")
    elif spoil == "json without sha":
        m.write_text(json.dumps({k: v for k, v in meta.items() if k != "sha256"}))
    elif spoil == "drop json":
        m.unlink()
    assert not bs.is_current(key, **paths)


def test_missing_tools_are_named(monkeypatch):
    monkeypatch.setattr(bs, "CHROMIUM", "/nonexistent/chromium")
    why = bs.missing_tools()
    assert why and ("Playwright" in why or "/nonexistent/chromium" in why)
