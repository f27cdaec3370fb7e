"""Tiny safetensors reader/writer for the reference tools (no `safetensors` package needed).

Format: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the data section (offsets are relative to its start).

Element types keep their meaning: BF16 -> torch.bfloat16, F32 -> torch.float32, I32 -> torch.int32,
U8 -> torch.uint8. torch 1.13 has no float8 types, so F8_E4M3 and F8_E5M2 load as their raw bytes
(torch.uint8); decode F8_E4M3 with `e4m3_to_float`. `read_dtypes` tells the stored names apart.
"""

import json
import os
import struct

import numpy as np
import torch

MAX_HEADER = 100 << 20  # same bound as src/format/safetensors.h

# safetensors dtype name -> (numpy little-endian dtype of the stored bytes, torch dtype to return)
_DTYPES = {
    "BOOL": ("u1", torch.bool),
    "U8": ("u1", torch.uint8),
    "I8": ("i1", torch.int8),
    "I16": ("<i2", torch.int16),
    "I32": ("<i4", torch.int32),
    "I64": ("<i8", torch.int64),
    "F16": ("<f2", torch.float16),
    "BF16": ("<i2", torch.bfloat16),  # numpy has no bf16: read the bits, then reinterpret
    "F32": ("<f4", torch.float32),
    "F64": ("<f8", torch.float64),
    "F8_E4M3": ("u1", torch.uint8),  # raw bytes
    "F8_E5M2": ("u1", torch.uint8),  # raw bytes
}

_TORCH_TO_NAME = {
    torch.bool: "BOOL",
    torch.uint8: "U8",
    torch.int8: "I8",
    torch.int16: "I16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float32: "F32",
    torch.float64: "F64",
}


def _read_header(f, path):
    raw = f.read(8)
    if len(raw) != 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw)
    if n > MAX_HEADER:
        raise ValueError(f"{path}: header length {n} exceeds {MAX_HEADER}")
    text = f.read(n)
    if len(text) != n:
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    return json.loads(text.decode("utf-8")), 8 + n


def read_dtypes(path):
    """Stored dtype name of every tensor in a file (e.g. to tell F8_E4M3 from U8)."""
    with open(path, "rb") as f:
        header, _ = _read_header(f, path)
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}


def load(path):
    """Returns (dict name -> torch tensor, metadata dict) for one safetensors file."""
    with open(path, "rb") as f:
        header, data_start = _read_header(f, path)
        data = f.read()
    metadata = dict(header.pop("__metadata__", {}) or {})
    tensors = {}
    for name, info in header.items():
        kind = info["dtype"]
        if kind not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has unknown dtype {kind}")
        np_dtype, torch_dtype = _DTYPES[kind]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= begin <= end <= len(data)) or end - begin != count * np.dtype(np_dtype).itemsize:
            raise ValueError(f"{path}: tensor {name} has a byte range that does not fit its shape")
        array = np.frombuffer(data, dtype=np_dtype, count=count, offset=begin).reshape(shape)
        t = torch.from_numpy(array.astype(array.dtype.newbyteorder("="), copy=True))
        if torch_dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        elif torch_dtype == torch.bool:
            t = t.to(torch.bool)
        tensors[name] = t
    return tensors, metadata


def load_dir(directory):
    """All tensors of a checkpoint directory: model.safetensors.index.json shards or model.safetensors.

    Returns (tensors, dtypes) where dtypes maps name -> stored dtype name."""
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        shards = sorted(set(weight_map.values()))
    else:
        weight_map = None
        shards = ["model.safetensors"]
    tensors, dtypes = {}, {}
    for shard in shards:
        path = os.path.join(directory, shard)
        part, _ = load(path)
        kinds = read_dtypes(path)
        for name, t in part.items():
            if weight_map is not None and weight_map.get(name) != shard:
                raise ValueError(f"{path}: tensor {name} is not mapped to this shard by the index")
            tensors[name] = t
            dtypes[name] = kinds[name]
    if weight_map is not None:
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise ValueError(f"{index_path}: tensors missing from their shards: {missing[:5]}")
    return tensors, dtypes


def _tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    elif t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()


def serialize(tensors, metadata=None):
    """Bytes of a safetensors file. Values are torch tensors, or (dtype name, tensor) pairs to
    store raw uint8 bytes under another name (e.g. ("F8_E4M3", scale_bytes))."""
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, value in tensors.items():
        kind, t = value if isinstance(value, tuple) else (_TORCH_TO_NAME[value.dtype], value)
        blob = _tensor_bytes(t)
        header[name] = {"dtype": kind, "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        chunks.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad so the data section starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def save(path, tensors, metadata=None):
    """Writes atomically (temporary file in the same directory, then rename)."""
    blob = serialize(tensors, metadata)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def e4m3_to_float(raw):
    """float8_e4m3fn bytes (uint8 tensor) -> float32: bias 7, no infinities, 0x7f/0xff are NaN."""
    v = raw.to(torch.int32)
    sign = torch.where(v >= 128, -1.0, 1.0)
    exponent = (v >> 3) & 0xF
    mantissa = (v & 7).to(torch.float32)
    normal = (1.0 + mantissa / 8.0) * torch.pow(2.0, (exponent - 7).to(torch.float32))
    subnormal = mantissa / 8.0 * 2.0**-6
    out = sign * torch.where(exponent == 0, subnormal, normal)
    return torch.where((v & 0x7F) == 0x7F, torch.tensor(float("nan")), out).to(torch.float32)
