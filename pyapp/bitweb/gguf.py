"""GGUF reader (versions 2 and 3), stdlib only: runs unchanged in Pyodide.

File layout (little endian; v2 and v3 are identical, v1 used u32 counts and is
not supported):

    magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
    kv_count x   (string key, u32 value_type, value)
    tensor_count x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset)
    padding to `general.alignment` (u32, default 32) -> data_offset
    tensor data: tensor i at data_offset + offset_i, offset_i % alignment == 0

    string = u64 length + UTF-8 bytes
    value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool (1 byte),
                 8 string, 9 array (u32 item type, u64 count, items), 10 u64,
                 11 i64, 12 f64

The reader works on a byte-range source (`.size`, `.read(offset, n)`), so only
the header bytes are read; tensor data is read on demand with tensor_data().
Every count and length is checked against the bytes left in the file before
anything is allocated, and every loop is bounded by the file size. Any
malformed input raises GGUFError naming the field and the byte offset.

Header bounds (a valid file may still be hostile): the header (everything before the
tensor data) may take at most MAX_HEADER_BYTES = 64 MiB, and its arrays at most
MAX_HEADER_ITEMS = 2^22 items in all. Real headers are far smaller: the Llama 3
tokenizer (128256 tokens, 280147 merges) is ~7 MiB and 536k items, Gemma 3's
(262144 tokens with scores and types) ~786k items. Every string length, array count,
kv / tensor count is checked against the room left under the bound before it is read
or allocated, so a file claiming more fails at once (GGUFError naming the field and
the bound) instead of growing memory: in Pyodide the wasm heap never shrinks.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from bitweb import formats

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4                      # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 8               # nested arrays deeper than this are rejected (no recursion blow-up)
INT64_MAX = (1 << 63) - 1
_CHUNK = 1 << 20                  # header bytes fetched from the source per read
MAX_HEADER_BYTES = 64 << 20       # header bound (see the module docstring)
MAX_HEADER_ITEMS = 1 << 22        # array items in the whole header

# value type id -> (name, struct code); string/array handled separately
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)
VALUE_TYPES = {
    T_UINT8: ("u8", "B"), T_INT8: ("i8", "b"), T_UINT16: ("u16", "H"), T_INT16: ("i16", "h"),
    T_UINT32: ("u32", "I"), T_INT32: ("i32", "i"), T_FLOAT32: ("f32", "f"), T_BOOL: ("bool", "B"),
    T_STRING: ("str", None), T_ARRAY: ("array", None),
    T_UINT64: ("u64", "Q"), T_INT64: ("i64", "q"), T_FLOAT64: ("f64", "d"),
}
# fewest bytes one value of a type can take (to bound counts before looping)
_MIN_SIZE = {t: (struct.calcsize(c) if c else 0) for t, (_, c) in VALUE_TYPES.items()}
_MIN_SIZE[T_STRING] = 8
_MIN_SIZE[T_ARRAY] = 12
_MIN_KV = 8 + 4 + 1               # empty key, type, 1-byte value
_MIN_TENSOR_INFO = 8 + 4 + 8 + 4 + 8
_U64 = struct.Struct("<Q")


class GGUFError(ValueError):
    """A malformed or unsupported GGUF file. .field and .offset say where."""

    def __init__(self, message: str, field: str | None = None, offset: int | None = None):
        if field is not None:
            message += f" [field {field}" + (f" at byte {offset}]" if offset is not None else "]")
        super().__init__(message)
        self.field = field
        self.offset = offset


class NeedMoreBytes(Exception):
    """PrefixSource: the parse needs the first `needed` bytes of the file; fetch them and retry."""

    def __init__(self, needed: int):
        super().__init__(f"need the first {needed} bytes of the file")
        self.needed = needed


# ---------------------------------------------------------------- sources

class BytesSource:
    """A whole file held in memory (bytes, bytearray or memoryview)."""

    def __init__(self, data):
        self._data = memoryview(data).cast("B")
        self.size = len(self._data)

    def read(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise GGUFError(f"read of {n} bytes at byte {offset} outside the data (size {self.size})")
        return bytes(self._data[offset:offset + n])


class FileSource:
    """A local file, read by ranges (never the whole file)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._f = open(self.path, "rb")
        self.size = os.fstat(self._f.fileno()).st_size

    def read(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise GGUFError(f"read of {n} bytes at byte {offset} outside {self.path} (size {self.size})")
        self._f.seek(offset)
        data = self._f.read(n)
        if len(data) != n:
            raise GGUFError(f"{self.path}: short read at byte {offset} ({len(data)} of {n} bytes); file changed?")
        return data

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PrefixSource:
    """The first bytes of a larger file (the browser fetches a prefix first).

    A read past the prefix raises NeedMoreBytes(end): fetch at least `end` bytes and retry.
    """

    def __init__(self, prefix, size: int):
        self._data = memoryview(prefix).cast("B")
        self.available = len(self._data)
        self.size = size
        if self.available > size:
            raise ValueError(f"prefix of {self.available} bytes is longer than the file ({size})")

    def read(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise GGUFError(f"read of {n} bytes at byte {offset} outside the file (size {self.size})")
        if offset + n > self.available:
            raise NeedMoreBytes(offset + n)
        return bytes(self._data[offset:offset + n])


# ---------------------------------------------------------------- result types

@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple            # GGUF order: ne0 (contiguous) first
    format: formats.Format  # its GGML type (bitweb.formats), e.g. formats.I2_S
    offset: int             # relative to data_offset
    abs_offset: int         # from the start of the file
    nbytes: int
    n_elements: int
    info_offset: int        # byte offset of this tensor's record in the tensor table
    stored_type_id: int | None = None   # the type id in the file when it differs from type_id (a type-42
                                        # tensor in 128-value blocks reads as Q2_0_G128, see read_gguf)

    @property
    def type_id(self) -> int:
        return self.format.type_id

    @property
    def np_shape(self) -> tuple:
        """numpy shape: GGUF dims reversed (a linear weight ne=[n_in, n_out] -> (n_out, n_in))."""
        return tuple(reversed(self.shape))


class GGUFFile:
    """A parsed header: version, alignment, data_offset, file_size, metadata, metadata_types, tensors."""

    def __init__(self, source, version, alignment, data_offset, metadata, metadata_types, tensors):
        self.source = source
        self.file_size = source.size
        self.version = version
        self.alignment = alignment
        self.data_offset = data_offset
        self.metadata = metadata                # key -> python value (arrays are lists)
        self.metadata_types = metadata_types    # key -> (value type, array item type or None)
        self.tensors = tensors                  # name -> TensorInfo, file order

    def tensor_data(self, name: str) -> bytes:
        t = self.tensors.get(name)
        if t is None:
            raise KeyError(f"no tensor {name!r} in this file ({len(self.tensors)} tensors)")
        return self.source.read(t.abs_offset, t.nbytes)

    @property
    def arch(self) -> str:
        a = self.metadata.get("general.architecture")
        if not isinstance(a, str):
            raise GGUFError("no string metadata key 'general.architecture'", "general.architecture")
        return a

    _MISSING = object()

    def get(self, key_suffix: str, default=_MISSING):
        """metadata[f"{arch}.{key_suffix}"], e.g. get("block_count")."""
        key = f"{self.arch}.{key_suffix}"
        if key in self.metadata:
            return self.metadata[key]
        if default is GGUFFile._MISSING:
            raise GGUFError(f"missing metadata key {key!r}", key)
        return default

    def close(self):
        if hasattr(self.source, "close"):
            self.source.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------- parser

class _Parser:
    def __init__(self, src):
        self.src = src
        self.size = src.size
        self.limit = getattr(src, "available", src.size)   # never prefetch past a prefix
        self.buf = b""
        self.buf_at = 0
        self.pos = 0
        self.items = 0                                      # array items read so far

    def fail(self, what, field, at=None):
        raise GGUFError(what, field, self.pos if at is None else at)

    def left(self) -> int:
        return self.size - self.pos

    def bound(self, need: int, what: str, field: str, at: int) -> None:
        """Fail unless `need` more header bytes fit in the file and under MAX_HEADER_BYTES."""
        if need > self.left():
            self.fail(f"{what} exceeds the {self.left()} bytes left in the file (size {self.size})", field, at)
        if self.pos + need > MAX_HEADER_BYTES:
            self.fail(f"{what} takes the header past {MAX_HEADER_BYTES >> 20} MiB "
                      f"(it would end at byte {self.pos + need}): bitweb refuses GGUF headers over "
                      f"{MAX_HEADER_BYTES >> 20} MiB ({MAX_HEADER_BYTES} bytes)", field, at)

    def take(self, n: int, field: str) -> int:
        """Advance over n bytes; return their offset in self.buf."""
        at, end = self.pos, self.pos + n
        if end > self.size:
            self.fail(f"unexpected end of file: {n} bytes needed at byte {at}, file size {self.size}", field, at)
        if end > MAX_HEADER_BYTES:
            self.bound(n, f"{n} bytes at byte {at}", field, at)
        if at < self.buf_at or end > self.buf_at + len(self.buf):
            hi = min(self.size, max(end, at + _CHUNK))
            if hi > self.limit:
                hi = max(end, self.limit)
            self.buf = self.src.read(at, hi - at)
            self.buf_at = at
        self.pos = end
        return at - self.buf_at

    def unpack(self, code: str, field: str):
        o = self.take(struct.calcsize("<" + code), field)
        return struct.unpack_from("<" + code, self.buf, o)[0]

    def raw_string(self, field: str) -> bytes:
        at = self.pos
        n = self.unpack("Q", field)
        self.bound(n, f"string length {n}", field, at)
        o = self.take(n, field)
        return self.buf[o:o + n]

    def text(self, field: str) -> str:
        at = self.pos
        raw = self.raw_string(field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"string is not valid UTF-8 ({e.reason} at string byte {e.start})", field, at)

    def value(self, vtype: int, field: str, depth: int = 0):
        """One value of a known type. Invalid-UTF-8 string values are kept as bytes."""
        if vtype == T_STRING:
            raw = self.raw_string(field)
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw
        if vtype == T_ARRAY:
            return self.array(field, depth)[0]
        code = VALUE_TYPES[vtype][1]
        at = self.pos
        v = self.unpack(code, field)
        if vtype == T_BOOL:
            if v > 1:
                self.fail(f"bool value {v} (must be 0 or 1)", field, at)
            v = bool(v)
        return v

    def vtype(self, field: str, what: str) -> int:
        at = self.pos
        t = self.unpack("I", field)
        if t not in VALUE_TYPES:
            self.fail(f"unknown {what} {t} (known: 0..12)", field, at)
        return t

    def array(self, field: str, depth: int):
        """-> (list of values, item type)."""
        if depth >= MAX_ARRAY_DEPTH:
            self.fail(f"arrays nested more than {MAX_ARRAY_DEPTH} deep", field)
        itype = self.vtype(field + ".array_type", "array item type")
        at = self.pos
        count = self.unpack("Q", field + ".array_length")
        need = count * _MIN_SIZE[itype]
        if need > self.left():
            self.fail(f"array of {count} {VALUE_TYPES[itype][0]} needs at least {need} bytes, "
                      f"only {self.left()} left in the file (size {self.size})", field + ".array_length", at)
        self.bound(need, f"array of {count} {VALUE_TYPES[itype][0]} (at least {need} bytes)",
                   field + ".array_length", at)
        self.items += count
        if self.items > MAX_HEADER_ITEMS:
            self.fail(f"array of {count} {VALUE_TYPES[itype][0]} brings the header's array items to "
                      f"{self.items}: bitweb refuses GGUF headers with over {MAX_HEADER_ITEMS} array items",
                      field + ".array_length", at)
        code = VALUE_TYPES[itype][1]
        if code is not None:                          # scalars: one struct call
            at = self.pos
            o = self.take(need, field)
            vals = list(struct.unpack_from(f"<{count}{code}", self.buf, o))
            if itype == T_BOOL:
                bad = next((i for i, v in enumerate(vals) if v > 1), None)
                if bad is not None:
                    self.fail(f"bool value {vals[bad]} at index {bad} (must be 0 or 1)", field, at + bad)
                vals = [v == 1 for v in vals]
            return vals, itype
        if itype == T_STRING:
            return self.strings(count, field), itype
        return [self.value(itype, field, depth + 1) for _ in range(count)], itype

    def strings(self, count: int, field: str) -> list:
        """count strings (a tokenizer vocabulary): a fast path while inside the buffer, else value()."""
        out = []
        append = out.append
        unpack = _U64.unpack_from
        for _ in range(count):
            buf = self.buf
            o = self.pos - self.buf_at
            if o + 8 <= len(buf):
                end = o + 8 + unpack(buf, o)[0]
                if end <= len(buf):                 # the buffer never extends past the file
                    raw = buf[o + 8:end]
                    self.pos += end - o
                    try:
                        append(raw.decode("utf-8"))
                    except UnicodeDecodeError:
                        append(raw)
                    continue
            append(self.value(T_STRING, field))     # refills the buffer, checks the length
        return out


def read_gguf(source, tensors: bool = True) -> GGUFFile:
    """Parse the header of a GGUF file from a byte-range source (BytesSource, FileSource, PrefixSource).
    tensors=False: the metadata only (no tensor table, data_offset None), so a file whose tensor
    types bitweb does not know still gives its tokenizer (`bitweb tokenize`)."""
    p = _Parser(source)
    o = p.take(4, "header.magic")
    magic = p.buf[o:o + 4]
    if magic != GGUF_MAGIC:
        p.fail(f"bad magic {magic!r} (expected {GGUF_MAGIC!r}): not a GGUF file", "header.magic", 0)
    version = p.unpack("I", "header.version")
    if version not in (2, 3):
        if version == 1:
            why = "GGUF version 1 (u32 counts) is not supported; re-convert the model (versions 2 and 3 are)"
        elif version & 0xFFFF == 0 and (version >> 24) in (2, 3):
            why = f"big-endian GGUF (version {version >> 24} byte-swapped) is not supported"
        else:
            why = f"unsupported GGUF version {version} (supported: 2, 3)"
        p.fail(why, "header.version", 4)
    n_tensors = p.unpack("Q", "header.tensor_count")
    n_kv = p.unpack("Q", "header.kv_count")
    if n_kv * _MIN_KV > p.left():
        p.fail(f"kv_count {n_kv} cannot fit: each entry takes at least {_MIN_KV} bytes, "
               f"{p.left()} bytes left in the file (size {p.size})", "header.kv_count", 16)
    if n_tensors * _MIN_TENSOR_INFO > p.left():
        p.fail(f"tensor_count {n_tensors} cannot fit: each tensor record takes at least {_MIN_TENSOR_INFO} bytes, "
               f"{p.left()} bytes left in the file (size {p.size})", "header.tensor_count", 8)
    p.bound(n_kv * _MIN_KV, f"kv_count {n_kv} (at least {_MIN_KV} bytes each)", "header.kv_count", 16)
    p.bound(n_tensors * _MIN_TENSOR_INFO, f"tensor_count {n_tensors} (at least {_MIN_TENSOR_INFO} bytes each)",
            "header.tensor_count", 8)

    metadata, types, key_at = {}, {}, {}
    for _ in range(n_kv):
        at = p.pos
        key = p.text("kv.key")
        if key in metadata:
            p.fail(f"duplicate metadata key {key!r} (first at byte {key_at[key]})", "kv.key", at)
        key_at[key] = at
        field = f"kv[{key!r}]"
        vt = p.vtype(field + ".type", "value type")
        if vt == T_ARRAY:
            metadata[key], item_type = p.array(field, 0)
        else:
            metadata[key], item_type = p.value(vt, field), None
        types[key] = (vt, item_type)

    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        at = key_at["general.alignment"]
        if types["general.alignment"][0] != T_UINT32:
            p.fail(f"general.alignment has type {VALUE_TYPES[types['general.alignment'][0]][0]} (must be u32)",
                   "general.alignment", at)
        alignment = metadata["general.alignment"]
        if alignment == 0 or alignment & (alignment - 1):
            p.fail(f"general.alignment {alignment} is not a nonzero power of two", "general.alignment", at)

    if not tensors:
        return GGUFFile(source, version, alignment, None, metadata, types, {})
    infos = []
    for _ in range(n_tensors):
        rec_at = p.pos
        name = p.text("tensor_info.name")
        at = p.pos
        n_dims = p.unpack("I", "tensor_info.n_dims")
        if not 1 <= n_dims <= MAX_DIMS:
            p.fail(f"tensor {name!r}: n_dims {n_dims} (must be 1..{MAX_DIMS})", "tensor_info.n_dims", at)
        at = p.pos
        o = p.take(8 * n_dims, "tensor_info.dims")
        shape = struct.unpack_from(f"<{n_dims}Q", p.buf, o)
        n = 1
        for i, d in enumerate(shape):
            if d < 1 or d > INT64_MAX:
                p.fail(f"tensor {name!r}: dim {i} is {d} (must be 1..2^63-1)", "tensor_info.dims", at + 8 * i)
            n *= d
            if n > INT64_MAX:
                p.fail(f"tensor {name!r}: element count of shape {list(shape)} overflows int64",
                       "tensor_info.dims", at)
        at = p.pos
        type_id = p.unpack("I", "tensor_info.type")
        fmt = formats.TYPES.get(type_id)
        if fmt is None:
            p.fail(f"tensor {name!r}: unknown GGML type id {type_id} (known: "
                   + ", ".join(f"{f.name}={i}" for i, f in formats.TYPES.items()) + ")", "tensor_info.type", at)
        if shape[0] % fmt.block_size:
            p.fail(f"tensor {name!r}: ne0 = {shape[0]} is not a multiple of the {fmt.name} block size "
                   f"{fmt.block_size}", "tensor_info.dims", at - 8 * n_dims)
        off_at = p.pos
        offset = p.unpack("Q", "tensor_info.offset")
        if offset % alignment:
            p.fail(f"tensor {name!r}: data offset {offset} is not a multiple of the alignment {alignment}",
                   "tensor_info.offset", off_at)
        infos.append((name, shape, fmt, offset, n, rec_at, off_at))

    data_offset = -(-p.pos // alignment) * alignment
    q2 = _q2_0_layouts(p, infos, alignment, data_offset)
    tensors = {}
    for name, shape, fmt, offset, n, rec_at, off_at in infos:
        if name in tensors:
            p.fail(f"duplicate tensor name {name!r} (first record at byte {tensors[name].info_offset})",
                   "tensor_info.name", rec_at)
        stored = None
        if fmt.type_id == Q2_0_TYPE:
            fmt = q2[name]
            stored = Q2_0_TYPE if fmt.type_id != Q2_0_TYPE else None
        nbytes = fmt.nbytes(n)
        start = data_offset + offset
        if start + nbytes > p.size:
            p.fail(f"tensor {name!r}: data range {start}..{start + nbytes} past end of file (size {p.size})",
                   "tensor_info.offset", off_at)
        tensors[name] = TensorInfo(name, tuple(shape), fmt, offset, start, nbytes, n, rec_at, stored)
    return GGUFFile(source, version, alignment, data_offset, metadata, types, tensors)


Q2_0_TYPE = 42          # upstream Q2_0 (64-value blocks); PrismML's first files used it for 128-value blocks


def _q2_0_layouts(p, infos, alignment, data_offset) -> dict:
    """name -> Format of every type-42 tensor: upstream Q2_0 (18 bytes per 64 values) or PrismML's
    34 bytes per 128 values (read as Q2_0_G128). GGUF stores no tensor sizes, so the layout comes
    from the tensor's byte span (to the next tensor's data, or the end of the file): a layout fits
    when its size padded to the alignment is the span. A tensor both fit (under 64 x alignment
    values) takes the layout the file's other type-42 tensors show, when they all show one; a
    tensor neither fits, or both fit with nothing to decide, is an error naming it."""
    layouts = (formats.Q2_0, formats.Q2_0_G128)
    ends = sorted({offset for _, _, _, offset, *_ in infos} | {max(0, p.size - data_offset)})
    fits = {}
    for name, shape, fmt, offset, n, rec_at, off_at in infos:
        if fmt.type_id != Q2_0_TYPE:
            continue
        span = next((e for e in ends if e > offset), offset) - offset
        fits[name] = [f for f in layouts if n % f.block_size == 0 and shape[0] % f.block_size == 0
                      and 0 <= span - f.nbytes(n) < alignment], span, n, off_at
    shown = {ok[0].type_id for ok, *_ in fits.values() if len(ok) == 1}
    out = {}
    for name, (ok, span, n, at) in fits.items():
        if len(ok) == 2 and len(shown) == 1:
            ok = [f for f in ok if f.type_id in shown]
        if len(ok) != 1:
            sizes = ", ".join(f"{f.name} {f.nbytes(n)}" for f in layouts if n % f.block_size == 0)
            p.fail(f"tensor {name!r}: type 42 (Q2_0) with {n} values spans {span} bytes to the next tensor "
                   f"(alignment {alignment}); the 64-value and 128-value layouts need {sizes} bytes: "
                   + ("both fit and no other type-42 tensor decides, the layout is ambiguous" if ok
                      else "neither fits"), "tensor_info.offset", at)
        out[name] = ok[0]
    return out


def open_gguf(path, tensors: bool = True) -> GGUFFile:
    """Parse a local GGUF file (header only; tensor data is read on demand; tensors as read_gguf)."""
    src = FileSource(path)
    try:
        return read_gguf(src, tensors)
    except BaseException:
        src.close()
        raise


# ---------------------------------------------------------------- metadata as JSON

def _jsonable(v):
    if isinstance(v, (bytes, bytearray)):   # a string value that is not UTF-8
        return bytes(v).decode("utf-8", "backslashreplace")
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


def to_json_dict(gf: GGUFFile) -> dict:
    return {
        "version": gf.version,
        "alignment": gf.alignment,
        "data_offset": gf.data_offset,
        "metadata": gf.metadata,
        "tensors": [{"name": t.name, "type": t.format.name, "shape": list(t.shape), "offset": t.offset,
                     "nbytes": t.nbytes, **({"stored_type_id": t.stored_type_id} if t.stored_type_id is not None else {})}
                    for t in gf.tensors.values()],
    }
