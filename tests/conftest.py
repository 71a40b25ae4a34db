"""Shared test helpers.

`need(ok, why)`: a test that cannot run here (no GPU adapter, no browser) fails
when CI=true and is skipped with the reason elsewhere. It never passes silently.
"""
from __future__ import annotations

import asyncio
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(ok: bool, why: str) -> None:
    if ok:
        return
    if IN_CI:
        pytest.fail(f"required in CI but missing: {why}")
    pytest.skip(why)


def run(coro):
    return asyncio.run(coro)


_dev = None


@pytest.fixture(scope="session")
def gpu():
    """The native wgpu-py device (lavapipe here), shared by the session."""
    global _dev
    if _dev is None:
        from bitweb.gpu import GPUError, request_device
        try:
            _dev = run(request_device("native"))
        except GPUError as e:
            need(False, f"no native WebGPU adapter: {e}")
    return _dev


def pytest_collection_modifyitems(items):
    """Browser tests (tests/e2e) run last: the sync Playwright API leaves an event loop running in
    this thread until the session ends, after which asyncio.run() (`run` above) would fail."""
    items.sort(key=lambda item: item.path.parent.name == "e2e")
