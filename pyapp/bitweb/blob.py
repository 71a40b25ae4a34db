"""A model's bytes from a JS Blob in the library's worker (Pyodide; stdlib only): the GGUF header in
growing prefixes, and the few small host reads the engine makes.

Loading a model, and where its bytes go:

    blob (File / OPFS File)                       JS memory        wasm heap
      header:  blob.slice(0, n) -> PrefixSource    n bytes          n bytes (n ~ header, doubled
               -> gguf.read_gguf; NeedMoreBytes(m)                    until the header parses;
               -> retry with max(m, 2n)                               at most gguf.MAX_HEADER_BYTES)
      weights: engine -> dev.upload(buf, off, blob, ...)             0: web/gpu.mjs uploadBlob reads
               -> uploadBlob: blob.slice(chunk) -> BYOB reader        one chunk at a time from the
               -> queue.writeBuffer                                   Blob and hands it to WebGPU
      small host reads (norms, scales) the engine may ask gguf_file.source for go through
      BlobSource: FileReaderSync over blob.slice (only the bytes asked for).
"""
from __future__ import annotations

from bitweb import gguf

try:                                    # Pyodide; the module still imports in CPython (tests)
    import js
except ImportError:                     # CPython (tests of the plain parts)
    js = None

HEADER_FIRST = 256 << 10                # first header read; doubled until the header parses


class BlobSource:
    """gguf byte source over a JS Blob: synchronous ranged reads with FileReaderSync (workers only).

    Only for the few small reads the engine may make on the host; weights go through dev.upload.
    """

    def __init__(self, blob):
        self.blob = blob
        self.size = int(blob.size)

    def read(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise gguf.GGUFError(f"read of {n} bytes at byte {offset} outside the file (size {self.size})")
        if getattr(self.blob, "readSync", None) is not None:       # web/models.mjs GrowingFile
            return self.blob.readSync(offset, n).to_bytes()
        ab = js.FileReaderSync.new().readAsArrayBuffer(self.blob.slice(offset, offset + n))
        return ab.to_bytes()


async def blob_bytes(blob, start: int, end: int) -> bytes:
    ab = await blob.slice(start, end).arrayBuffer()
    return ab.to_bytes()


async def parse_header(blob) -> gguf.GGUFFile:
    """Parse only the header: read a prefix, grow it while the parser says NeedMoreBytes.
    One prefix at a time (the last is dropped before the next is read), never past
    gguf.MAX_HEADER_BYTES: the parser refuses a header that would go further before asking."""
    size = int(blob.size)
    n = min(size, HEADER_FIRST)
    while True:
        prefix = await blob_bytes(blob, 0, n)
        try:
            gf = gguf.read_gguf(gguf.PrefixSource(prefix, size))
        except gguf.NeedMoreBytes as e:
            prefix = None      # drop this copy before reading the next one (the heap never shrinks)
            if n >= size or e.needed > gguf.MAX_HEADER_BYTES:    # cannot happen: the parser checks first
                raise gguf.GGUFError(f"header parse needs {e.needed} bytes of a {size}-byte file") from None
            n = min(size, gguf.MAX_HEADER_BYTES, max(e.needed, 2 * n))
            continue
        gf.header_read = n
        return gf
