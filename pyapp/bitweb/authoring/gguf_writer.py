"""A small GGUF v3 writer (CPython): typed metadata, any tensor type of formats.TYPES, streamed data.

File layout (little endian; GGUF spec, gguf-py GGUFWriter):

    magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
    n_kv times:      key (string) | value type u32 | value
    n_tensors times: name (string) | n_dims u32 | ne[n_dims] u64 (ne0 first) | type u32 | offset u64
    zero padding to `alignment`            <- data section starts here
    tensor data, each tensor at data_start + offset, offset % alignment == 0,
    zero padding after every tensor (so the file ends aligned, as gguf-py does)

    string = length u64 + utf-8 bytes; array = element type u32 + count u64 + elements
    (elements of an array may themselves be arrays: nested arrays).

Value type ids: UINT8 0, INT8 1, UINT16 2, INT16 3, UINT32 4, INT32 5, FLOAT32 6, BOOL 7,
STRING 8, ARRAY 9, UINT64 10, INT64 11, FLOAT64 12.

Python types are ambiguous (an int may be u32, i32 or u64), so metadata values can be given
explicitly typed: `u32(5)`, `f64(0.1)`, `array(INT32, [1, 2])`, `array(ARRAY, [array(UINT8, b"ab")])`.
Plain values are typed the way gguf-py does: str -> STRING, bool -> BOOL, int -> INT32 (INT64 /
UINT64 when it does not fit), float -> FLOAT32, list -> ARRAY of the element type inferred from
its elements (which must all infer the same type).

`general.alignment` (u32, a power of two, multiple of 8; default 32) sets the data alignment:
pass `alignment=` to the writer or add the key yourself (typed u32).

Streaming: declare every tensor first (name, GGUF shape, type); the header is then written
and tensor data is appended in declaration order with `write_tensor(name, data)`, which may be
called several times per tensor with consecutive chunks. Nothing but the header is held in
memory. The file is written to `<path>.partial` and renamed to `path` by `close()` once every
tensor is complete; on an error inside a `with` block the partial file is removed.
"""
from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass

from bitweb import formats

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_NAME_BYTES = 63          # GGML_MAX_NAME (64) including the terminating NUL
MAX_DIMS = 4                 # GGML_MAX_DIMS

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
TYPE_NAMES = ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL",
              "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"]

# scalar type -> (struct code, numpy dtype, integer range or None)
_SCALARS = {
    UINT8: ("B", "<u1", (0, 2**8 - 1)), INT8: ("b", "<i1", (-2**7, 2**7 - 1)),
    UINT16: ("H", "<u2", (0, 2**16 - 1)), INT16: ("h", "<i2", (-2**15, 2**15 - 1)),
    UINT32: ("I", "<u4", (0, 2**32 - 1)), INT32: ("i", "<i4", (-2**31, 2**31 - 1)),
    UINT64: ("Q", "<u8", (0, 2**64 - 1)), INT64: ("q", "<i8", (-2**63, 2**63 - 1)),
    FLOAT32: ("f", "<f4", None), FLOAT64: ("d", "<f8", None), BOOL: ("?", "<u1", None),
}


class GGUFWriteError(ValueError):
    """Bad input to the writer: names the key / tensor and what is wrong."""


@dataclass(frozen=True)
class Value:
    """A metadata value with an explicit GGUF type. For arrays, `subtype` is the element type."""
    vtype: int
    value: object
    subtype: int | None = None


def u8(v): return Value(UINT8, v)
def i8(v): return Value(INT8, v)
def u16(v): return Value(UINT16, v)
def i16(v): return Value(INT16, v)
def u32(v): return Value(UINT32, v)
def i32(v): return Value(INT32, v)
def u64(v): return Value(UINT64, v)
def i64(v): return Value(INT64, v)
def f32(v): return Value(FLOAT32, v)
def f64(v): return Value(FLOAT64, v)
def boolean(v): return Value(BOOL, v)
def string(v): return Value(STRING, v)


def array(subtype: int, values) -> Value:
    """An array of `subtype` elements; values is a sequence (or numpy array / bytes for numbers).
    For nested arrays use subtype ARRAY and give each element as a Value (or a plain list)."""
    return Value(ARRAY, values, subtype)


def _type_name(t) -> str:
    return TYPE_NAMES[t] if isinstance(t, int) and 0 <= t < len(TYPE_NAMES) else repr(t)


def infer(value) -> Value:
    """Plain Python value -> Value, typed as gguf-py types it (see the module docstring)."""
    if isinstance(value, Value):
        return value
    if isinstance(value, (str, bytes, bytearray)):
        return Value(STRING, value)
    if isinstance(value, bool):
        return Value(BOOL, value)
    if isinstance(value, int):
        if -2**31 <= value < 2**31:
            return Value(INT32, value)
        return Value(INT64 if -2**63 <= value < 2**63 else UINT64, value)
    if isinstance(value, float):
        return Value(FLOAT32, value)
    if isinstance(value, (list, tuple)):
        if not value:
            raise GGUFWriteError("cannot infer the element type of an empty array: use array(TYPE, [])")
        items = [infer(v) for v in value]
        sub = {v.vtype for v in items}
        if sub == {INT32, INT64}:
            sub = {INT64}
        if len(sub) != 1:
            raise GGUFWriteError(f"array elements have mixed types {sorted(_type_name(t) for t in sub)}: "
                                 "give the type explicitly with array(TYPE, values)")
        sub = sub.pop()
        return Value(ARRAY, items if sub == ARRAY else [v.value for v in items], sub)
    raise GGUFWriteError(f"cannot store a {type(value).__name__} as GGUF metadata")


def _enc_string(s, what: str) -> bytes:
    if isinstance(s, str):
        b = s.encode("utf-8")
    elif isinstance(s, (bytes, bytearray, memoryview)):
        b = bytes(s)
    else:
        raise GGUFWriteError(f"{what}: expected a string, got {type(s).__name__}")
    return struct.pack("<Q", len(b)) + b


def _check_scalar(vtype: int, v, what: str):
    code, _, rng = _SCALARS[vtype]
    if vtype == BOOL:
        if not isinstance(v, bool) and not (hasattr(v, "dtype") and v.dtype == bool):
            raise GGUFWriteError(f"{what}: BOOL needs True/False, got {v!r}")
    elif rng is not None:
        if isinstance(v, bool) or not isinstance(v, int) and not (hasattr(v, "dtype") and v.dtype.kind in "iu"):
            raise GGUFWriteError(f"{what}: {_type_name(vtype)} needs an integer, got {v!r}")
        if not rng[0] <= int(v) <= rng[1]:
            raise GGUFWriteError(f"{what}: {int(v)} is out of range for {_type_name(vtype)} [{rng[0]}, {rng[1]}]")
    elif isinstance(v, bool) or not isinstance(v, (int, float)) and not (hasattr(v, "dtype") and v.dtype.kind in "iuf"):
        raise GGUFWriteError(f"{what}: {_type_name(vtype)} needs a number, got {v!r}")
    return code


def _enc_numbers(sub: int, values, what: str) -> bytes:
    """Numeric / bool array elements, vectorised with numpy (token score and type lists are long)."""
    import numpy as np
    _, dtype, rng = _SCALARS[sub]
    if isinstance(values, (bytes, bytearray)) and sub in (UINT8, INT8):
        values = np.frombuffer(values, dtype=dtype)
    a = np.asarray(values)
    if a.ndim != 1:
        raise GGUFWriteError(f"{what}: array values must be one-dimensional (nest with array(ARRAY, ...))")
    if a.size == 0:
        return b""
    if sub == BOOL:
        if a.dtype != bool:
            raise GGUFWriteError(f"{what}: BOOL array elements must be True/False")
    elif rng is not None:
        exact = a.dtype.kind in "iu" and isinstance(values, np.ndarray)
        if not exact:      # python ints: numpy may have made them float or object; check them exactly
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise GGUFWriteError(f"{what}: {_type_name(sub)} array elements must be integers")
            lo, hi = min(values), max(values)
        else:
            lo, hi = int(a.min()), int(a.max())
        if lo < rng[0] or hi > rng[1]:
            bad = lo if lo < rng[0] else hi
            raise GGUFWriteError(f"{what}: element {bad} is out of range for {_type_name(sub)} [{rng[0]}, {rng[1]}]")
        if not exact:
            a = np.array(values, dtype=dtype)
    elif a.dtype.kind not in "iuf":
        raise GGUFWriteError(f"{what}: {_type_name(sub)} array elements must be numbers")
    return a.astype(dtype).tobytes()


def encode_value(value, what: str = "value") -> bytes:
    """The bytes of a value after its key: type u32 then the payload."""
    v = infer(value)
    return struct.pack("<I", v.vtype) + _encode_payload(v, what)


def _encode_payload(v: Value, what: str) -> bytes:
    if v.vtype == STRING:
        return _enc_string(v.value, what)
    if v.vtype in _SCALARS:
        code = _check_scalar(v.vtype, v.value, what)
        return struct.pack("<" + code, v.value)
    if v.vtype != ARRAY:
        raise GGUFWriteError(f"{what}: unknown GGUF value type {v.vtype!r}")
    sub, values = v.subtype, v.value
    if sub not in _SCALARS and sub not in (STRING, ARRAY):
        raise GGUFWriteError(f"{what}: unknown array element type {sub!r}")
    n = len(values)
    head = struct.pack("<IQ", sub, n)
    if sub == STRING:
        return head + b"".join(_enc_string(s, f"{what}[{i}]") for i, s in enumerate(values))
    if sub == ARRAY:
        parts = []
        for i, item in enumerate(values):
            item = infer(item)
            if item.vtype != ARRAY:
                raise GGUFWriteError(f"{what}[{i}]: element of an ARRAY array must be an array, "
                                     f"got {_type_name(item.vtype)}")
            parts.append(_encode_payload(item, f"{what}[{i}]"))
        return head + b"".join(parts)
    return head + _enc_numbers(sub, values, what)


@dataclass
class TensorEntry:
    name: str
    shape: tuple          # GGUF order, ne0 first
    fmt: formats.Format | None
    type_id: int
    nbytes: int
    offset: int = 0       # relative to the data section
    written: int = 0


class GGUFWriter:
    """Write one GGUF file: add metadata and declare tensors, then stream tensor data in order.

        with GGUFWriter(path) as w:
            w.add("general.architecture", "bitnet-b1.58")
            w.add("bitnet-b1.58.block_count", u32(30))
            w.add_tensor("token_embd.weight", (2560, 128256), "F16")
            w.write_tensor("token_embd.weight", chunk1)   # chunks, in order
            w.write_tensor("token_embd.weight", chunk2)
    """

    def __init__(self, path, alignment: int | None = None, version: int = 3):
        if version not in (2, 3):
            raise GGUFWriteError(f"GGUF version must be 2 or 3, got {version}")
        self.path = os.fspath(path)
        self.version = version
        self.alignment = DEFAULT_ALIGNMENT
        self._alignment_given = None
        if alignment is not None:
            self._set_alignment(alignment, "alignment argument")
            self._alignment_given = alignment
        self._kv: dict[str, bytes] = {}
        self._tensors: dict[str, TensorEntry] = {}
        self._order: list[TensorEntry] = []
        self._next = 0                      # index of the tensor being written
        self._file = None
        self._data_start = None
        self._closed = False

    # -- metadata -------------------------------------------------------------
    def _set_alignment(self, a, what):
        if isinstance(a, bool) or not isinstance(a, int) or a < 8 or a % 8 or a & (a - 1):
            raise GGUFWriteError(f"{what}: general.alignment must be a power of two and a multiple of 8, got {a!r}")
        self.alignment = a

    def add(self, key: str, value) -> None:
        """Add one metadata key. `value` is a Value (explicit type) or a plain Python value."""
        self._check_open_header("add metadata")
        if not isinstance(key, str) or not key:
            raise GGUFWriteError(f"metadata key must be a non-empty string, got {key!r}")
        if len(key.encode("utf-8")) > 65535:
            raise GGUFWriteError(f"metadata key {key[:40]!r}...: longer than 65535 bytes")
        if key in self._kv:
            raise GGUFWriteError(f"duplicate metadata key {key!r}")
        v = infer(value)
        if key == "general.alignment":
            if v.vtype != UINT32:
                raise GGUFWriteError(f"general.alignment must be UINT32 (use u32(...)), got {_type_name(v.vtype)}")
            if self._alignment_given is not None and v.value != self._alignment_given:
                raise GGUFWriteError(f"general.alignment {v.value} disagrees with alignment={self._alignment_given}")
            self._set_alignment(v.value, "general.alignment")
        self._kv[key] = _enc_string(key, "key") + encode_value(v, key)

    def add_many(self, items) -> None:
        """Add (key, value) pairs (a dict or an iterable of pairs) in order."""
        for k, v in (items.items() if isinstance(items, dict) else items):
            self.add(k, v)

    # -- tensors --------------------------------------------------------------
    def add_tensor(self, name: str, shape, ttype, nbytes: int | None = None) -> None:
        """Declare a tensor: GGUF shape (ne0 first), type (Format, id or name, e.g. "I2_S").

        nbytes defaults to formats' size for the type (I2_S: n/4 + 32). A type id that formats
        does not know can be written only with an explicit nbytes."""
        self._check_open_header("declare a tensor")
        if not isinstance(name, str) or not name:
            raise GGUFWriteError(f"tensor name must be a non-empty string, got {name!r}")
        if len(name.encode("utf-8")) > MAX_NAME_BYTES:
            raise GGUFWriteError(f"tensor {name!r}: name is {len(name.encode())} bytes, the limit is {MAX_NAME_BYTES}")
        if name in self._tensors:
            raise GGUFWriteError(f"duplicate tensor name {name!r}")
        shape = tuple(shape)
        if not 1 <= len(shape) <= MAX_DIMS:
            raise GGUFWriteError(f"tensor {name!r}: {len(shape)} dims, must be 1..{MAX_DIMS}")
        for i, d in enumerate(shape):
            if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d < 2**63:
                raise GGUFWriteError(f"tensor {name!r}: dim {i} is {d!r}, must be an integer >= 1")
        n = math.prod(shape)
        if n >= 2**63:
            raise GGUFWriteError(f"tensor {name!r}: {n} elements overflow int64")
        fmt = None
        if isinstance(ttype, int) and not isinstance(ttype, bool) and ttype not in formats.TYPES:
            if nbytes is None:
                raise GGUFWriteError(f"tensor {name!r}: type id {ttype} is unknown to bitweb.formats; "
                                     "give nbytes explicitly")
            type_id = ttype
        else:
            try:
                fmt = formats.get(ttype)
            except formats.FormatError as e:
                raise GGUFWriteError(f"tensor {name!r}: {e}") from None
            type_id = fmt.type_id
            if shape[0] % fmt.block_size:
                raise GGUFWriteError(f"tensor {name!r}: ne0 = {shape[0]} is not a multiple of the "
                                     f"{fmt.name} block size {fmt.block_size}")
            want = fmt.nbytes(n)
            if nbytes is not None and nbytes != want:
                raise GGUFWriteError(f"tensor {name!r}: nbytes {nbytes} != {want} for {n} {fmt.name} values")
            nbytes = want
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise GGUFWriteError(f"tensor {name!r}: nbytes must be an integer >= 0, got {nbytes!r}")
        e = TensorEntry(name, shape, fmt, type_id, nbytes)
        self._tensors[name] = e
        self._order.append(e)

    # -- writing --------------------------------------------------------------
    def _check_open_header(self, what):
        if self._closed:
            raise GGUFWriteError(f"cannot {what}: the writer is closed")
        if self._file is not None:
            raise GGUFWriteError(f"cannot {what}: the header is already written")

    def _pad(self, n: int) -> int:
        return -n % self.alignment

    def header_bytes(self) -> bytes:
        """Header, metadata and tensor infos, padded to the alignment (offsets assigned here)."""
        if self._alignment_given is not None and "general.alignment" not in self._kv \
                and self._alignment_given != DEFAULT_ALIGNMENT:
            self.add("general.alignment", u32(self._alignment_given))
        offset = 0
        infos = []
        for e in self._order:
            e.offset = offset
            offset += e.nbytes + self._pad(e.nbytes)
            infos.append(_enc_string(e.name, "tensor name") + struct.pack("<I", len(e.shape))
                         + struct.pack(f"<{len(e.shape)}Q", *e.shape) + struct.pack("<IQ", e.type_id, e.offset))
        head = GGUF_MAGIC + struct.pack("<IQQ", self.version, len(self._order), len(self._kv))
        out = head + b"".join(self._kv.values()) + b"".join(infos)
        return out + bytes(self._pad(len(out)))

    def write_header(self) -> None:
        """Open `<path>.partial` and write the header; called by the first write_tensor if needed."""
        self._check_open_header("write the header")
        header = self.header_bytes()
        self._file = open(self.path + ".partial", "wb")
        self._file.write(header)
        self._data_start = len(header)

    @property
    def data_offset(self) -> int | None:
        """Absolute file offset of the data section (known once the header is written)."""
        return self._data_start

    def write_tensor(self, name: str, data) -> None:
        """Append data (bytes-like or numpy array, raw little-endian bytes) to tensor `name`.

        Tensors must be written in declaration order; a tensor may be written in several
        consecutive chunks. When a tensor is complete the alignment padding follows it."""
        if self._closed:
            raise GGUFWriteError(f"cannot write tensor {name!r}: the writer is closed")
        if self._file is None:
            self.write_header()
        if self._next >= len(self._order):
            raise GGUFWriteError(f"cannot write tensor {name!r}: every declared tensor is already complete")
        e = self._order[self._next]
        if name != e.name:
            what = "was not declared" if name not in self._tensors else "is out of order"
            raise GGUFWriteError(f"tensor {name!r} {what}: the next tensor to write is {e.name!r} "
                                 f"({e.written} of {e.nbytes} bytes written)")
        mv = _as_bytes(data)
        if e.written + mv.nbytes > e.nbytes:
            raise GGUFWriteError(f"tensor {name!r}: {e.written + mv.nbytes} bytes given, "
                                 f"its {e.fmt.name if e.fmt else e.type_id} data is {e.nbytes} bytes")
        self._file.write(mv)
        e.written += mv.nbytes
        if e.written == e.nbytes:
            self._file.write(bytes(self._pad(e.nbytes)))
            self._next += 1

    def close(self) -> None:
        """Check every tensor is complete, then move the finished file into place."""
        if self._closed:
            return
        if self._file is None:
            self.write_header()
        missing = [f"{e.name} ({e.written}/{e.nbytes} bytes)" for e in self._order[self._next:]]
        if missing:
            self.abort()
            raise GGUFWriteError(f"{len(missing)} tensor(s) not fully written: {', '.join(missing[:5])}"
                                 f"{' ...' if len(missing) > 5 else ''}")
        self._file.close()
        os.replace(self.path + ".partial", self.path)
        self._closed = True

    def abort(self) -> None:
        """Close and delete the partial file."""
        if self._file is not None and not self._file.closed:
            self._file.close()
            try:
                os.remove(self.path + ".partial")
            except FileNotFoundError:
                pass
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def _as_bytes(data) -> memoryview:
    if hasattr(data, "dtype"):                  # numpy array: its raw bytes, C order
        import numpy as np
        data = np.ascontiguousarray(data)
        if data.dtype.byteorder == ">":
            raise GGUFWriteError("big-endian numpy arrays are not supported: GGUF here is little endian")
        return memoryview(data).cast("B")
    try:
        return memoryview(data).cast("B")
    except TypeError:
        raise GGUFWriteError(f"tensor data must be bytes-like or a numpy array, got {type(data).__name__}") from None


def write_gguf(path, metadata, tensors, alignment: int | None = None, version: int = 3) -> None:
    """One-shot helper: metadata (dict or pairs), tensors = [(name, shape, type, data)]."""
    with GGUFWriter(path, alignment=alignment, version=version) as w:
        w.add_many(metadata)
        for name, shape, ttype, _ in tensors:
            w.add_tensor(name, shape, ttype)
        for name, _, _, data in tensors:
            w.write_tensor(name, data)
