#!/usr/bin/env python3
"""safetensors_read.py - a strict reader of safetensors files, written from the format's
specification (huggingface/safetensors README, "Format"), python3 standard library only.

The file is: 8 bytes, an unsigned little-endian 64-bit integer N, the size of the header;
N bytes of UTF-8 JSON, an object whose keys are tensor names (plus an optional
"__metadata__" object of string to string), each value {"dtype", "shape", "data_offsets":
[BEGIN, END]}, offsets relative to the start of the byte buffer that follows the header;
the header may be padded with trailing spaces (0x20); the byte buffer is the rest of the
file. The reader refuses, with a message naming the tensor: a header longer than the file,
a header that is not a JSON object, an unknown dtype, a negative or non-integer dimension,
END - BEGIN other than the shape's element count times the dtype's size, a tensor outside
the buffer, overlapping tensors, and bytes of the buffer no tensor covers (the spec asks
for a buffer "entirely indexed", without holes). It also checks that the data starts at
an 8-byte boundary, as writers are told to pad the header.

As a library: load(path) -> (metadata, {name: (dtype, shape, bytes)}), raising
SafetensorsError. As a command: safetensors_read.py FILE prints one JSON line per tensor
(name, dtype, shape, sha256) and exits 1 naming the fault when the file is not valid.
"""
import hashlib
import json
import struct
import sys
from array import array

DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
              "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


class SafetensorsError(Exception):
    pass


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError(f"{path}: {len(blob)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise SafetensorsError(f"{path}: header of {n} bytes, but only {len(blob) - 8} bytes follow")
    if (8 + n) % 8:
        raise SafetensorsError(f"{path}: the data starts at byte {8 + n}, not 8-byte aligned")
    try:
        text = blob[8:8 + n].decode("utf-8")
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: the header is not UTF-8 JSON: {e}")
    if not isinstance(header, dict) or not text.startswith("{"):
        raise SafetensorsError(f"{path}: the header is not a JSON object")
    if text.rstrip(" ") != text.rstrip():
        raise SafetensorsError(f"{path}: the header is padded with something other than spaces")
    buf = blob[8 + n:]
    meta = header.pop("__metadata__", None)
    if meta is not None and (not isinstance(meta, dict) or
                             not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())):
        raise SafetensorsError(f"{path}: __metadata__ is not an object of strings")
    spans = []
    tensors = {}
    for name, t in header.items():
        if not isinstance(t, dict) or set(t) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"{path}: tensor '{name}': entry {t!r} is not dtype, shape, data_offsets")
        dt, shape, offs = t["dtype"], t["shape"], t["data_offsets"]
        if dt not in DTYPE_SIZE:
            raise SafetensorsError(f"{path}: tensor '{name}': unknown dtype {dt!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise SafetensorsError(f"{path}: tensor '{name}': bad shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2 or
                not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)):
            raise SafetensorsError(f"{path}: tensor '{name}': bad data_offsets {offs!r}")
        count = 1
        for d in shape:
            count *= d
        b, e = offs
        if b < 0 or e < b or e - b != count * DTYPE_SIZE[dt]:
            raise SafetensorsError(f"{path}: tensor '{name}': data_offsets {offs} hold {e - b} bytes, "
                                   f"shape {shape} of {dt} needs {count * DTYPE_SIZE[dt]}")
        if e > len(buf):
            raise SafetensorsError(f"{path}: tensor '{name}': data_offsets {offs} run past the "
                                   f"{len(buf)}-byte buffer (a truncated file?)")
        spans.append((b, e, name))
        tensors[name] = (dt, shape, buf[b:e])
    at = 0
    for b, e, name in sorted(spans):
        if b < at:
            raise SafetensorsError(f"{path}: tensor '{name}' at [{b}, {e}) overlaps the one before it")
        if b > at:
            raise SafetensorsError(f"{path}: bytes [{at}, {b}) before tensor '{name}' belong to no tensor")
        at = e
    if at != len(buf):
        raise SafetensorsError(f"{path}: bytes [{at}, {len(buf)}) at the end belong to no tensor")
    return meta or {}, tensors


def transpose_f32(data, rows, cols):
    """The bytes of the transpose of a row-major [rows, cols] f32 matrix."""
    a = array("f")
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    out = array("f", bytes(4 * rows * cols))
    for r in range(rows):
        out[r::rows] = a[r * cols:(r + 1) * cols]
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def main(argv):
    if len(argv) != 2:
        print("usage: safetensors_read.py FILE", file=sys.stderr)
        return 2
    try:
        meta, tensors = load(argv[1])
    except (SafetensorsError, OSError) as e:
        print(f"invalid: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"__metadata__": meta}))
    for name, (dt, shape, data) in tensors.items():
        print(json.dumps({"name": name, "dtype": dt, "shape": shape, "sha256": hashlib.sha256(data).hexdigest()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
