"""`bitweb inspect MODEL.gguf [--json]`: a GGUF file's metadata and tensor table."""
from __future__ import annotations

import json
import sys

from bitweb.gguf import T_ARRAY, VALUE_TYPES, _jsonable, open_gguf, to_json_dict


def _short(v, width=72):
    if isinstance(v, list):
        head = ", ".join(_short(x, 24) for x in v[:6])
        return f"[{head}{', ...' if len(v) > 6 else ''}] ({len(v)} items)"
    s = repr(v)
    return s if len(s) <= width else s[:width - 3] + "..."


def _type_str(t):
    vt, sub = t
    return f"array[{VALUE_TYPES[sub][0]}]" if vt == T_ARRAY else VALUE_TYPES[vt][0]


def main(args) -> int:
    """`bitweb inspect MODEL.gguf [--json]`."""
    gf = open_gguf(args.model)
    try:
        if args.json:
            json.dump(to_json_dict(gf), sys.stdout, default=_jsonable)
            sys.stdout.write("\n")
            return 0
        out = [f"GGUF v{gf.version}  alignment {gf.alignment}  data offset {gf.data_offset}  "
               f"file size {gf.file_size}",
               f"metadata ({len(gf.metadata)} keys):"]
        kw = max((len(k) for k in gf.metadata), default=0)
        for k, v in gf.metadata.items():
            out.append(f"  {k:<{kw}}  {_type_str(gf.metadata_types[k]):<12} {_short(v)}")
        out.append(f"tensors ({len(gf.tensors)}, {sum(t.nbytes for t in gf.tensors.values())} bytes):")
        nw = max((len(n) for n in gf.tensors), default=4)
        out.append(f"  {'name':<{nw}}  {'type':<6} {'shape':<22} {'offset':>12} {'nbytes':>12}")
        for t in gf.tensors.values():
            ty = t.format.name + (f" (stored as type {t.stored_type_id})" if t.stored_type_id is not None else "")
            out.append(f"  {t.name:<{nw}}  {ty:<6} {str(list(t.shape)):<22} {t.offset:>12} {t.nbytes:>12}")
        print("\n".join(out))
        return 0
    finally:
        gf.close()
