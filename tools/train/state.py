"""Resumable training state in files of at most 16 MiB (docs/training.md): tensors split over
DIR/state-NNNNN.safetensors, everything else in DIR/state.json, written to a temporary folder and
renamed into place so an interrupted save never leaves a half state."""

import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

import safetensors_io  # noqa: E402

MAX_FILE_BYTES = 16 << 20
_HEADER_ROOM = 1 << 20  # leaves room for the JSON header inside the 16 MiB


def save_tensors_split(folder, prefix, tensors, max_bytes=MAX_FILE_BYTES):
    """Writes {name: tensor} into folder/prefix-00001.safetensors ... each <= max_bytes; a tensor
    bigger than that is split by rows into name@0, name@1, ... Returns the file names."""
    parts, current, size = [], {}, 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        nbytes = t.numel() * t.element_size()
        pieces = [(name, t)]
        if nbytes > max_bytes - _HEADER_ROOM and t.dim() > 0:
            rows = max(1, (max_bytes - _HEADER_ROOM) * t.shape[0] // nbytes)
            pieces = [(f"{name}@{i}", t[s:s + rows].contiguous())
                      for i, s in enumerate(range(0, t.shape[0], rows))]
        for piece_name, piece in pieces:
            b = piece.numel() * piece.element_size()
            if current and size + b > max_bytes - _HEADER_ROOM:
                parts.append(current)
                current, size = {}, 0
            current[piece_name] = piece
            size += b
    if current:
        parts.append(current)
    names = []
    for i, part in enumerate(parts):
        fname = f"{prefix}-{i + 1:05d}.safetensors"
        safetensors_io.save(os.path.join(folder, fname), part)
        names.append(fname)
    return names


def load_tensors_split(folder, files):
    pieces = {}
    for f in files:
        pieces.update(safetensors_io.load(os.path.join(folder, f))[0])
    out, split = {}, {}
    for name, t in pieces.items():
        if "@" in name:
            base, index = name.rsplit("@", 1)
            split.setdefault(base, {})[int(index)] = t
        else:
            out[name] = t
    for base, chunks in split.items():
        out[base] = torch.cat([chunks[i] for i in sorted(chunks)])
    return out


def save(folder, tensors, info, moments=None):
    """Atomically replaces folder with the new state. Optimizer moments go to their own files
    (moments-*.safetensors): a copy of the folder without them still resumes (the optimizer
    restarts with a short warmup), which halves what has to travel between machines."""
    tmp = folder + ".saving"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    info = dict(info, files=save_tensors_split(tmp, "state", tensors),
                moment_files=save_tensors_split(tmp, "moments", moments or {}))
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump(info, f, indent=1)
    old = folder + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(folder):
        os.rename(folder, old)
    os.rename(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


def load(folder):
    """(tensors, info) or (None, None) when there is no state yet."""
    path = os.path.join(folder, "state.json")
    if not os.path.exists(path):
        return None, None
    with open(path) as f:
        info = json.load(f)
    tensors = load_tensors_split(folder, info["files"])
    moments = info.get("moment_files", [])
    info["has_moments"] = bool(moments) and all(os.path.exists(os.path.join(folder, f)) for f in moments)
    if info["has_moments"]:
        tensors.update(load_tensors_split(folder, moments))
    return tensors, info


def optimizer_tensors(optimizer, names_of, moments_dtype=torch.bfloat16):
    """Adam moments by parameter name (stored in moments_dtype to keep the state small)."""
    out = {}
    for p, name in names_of.items():
        st = optimizer.state.get(p)
        if st:
            out["adam.m." + name] = st["exp_avg"].to(moments_dtype)
            out["adam.v." + name] = st["exp_avg_sq"].to(moments_dtype)
    return out


def restore_optimizer(optimizer, names_of, tensors, step):
    # A capturable optimizer (a CUDA graph's) keeps its step count on the parameter's device.
    on_device = optimizer.defaults.get("capturable", False)
    for p, name in names_of.items():
        if "adam.m." + name in tensors:
            optimizer.state[p] = {
                "step": torch.tensor(float(step), device=p.device if on_device else "cpu"),
                "exp_avg": tensors["adam.m." + name].to(p.device, torch.float32),
                "exp_avg_sq": tensors["adam.v." + name].to(p.device, torch.float32)}


def travel_copy(src, dst):
    """dst: the state at src as it travels between machines (docs/training.md): tensors in
    BF16, no optimizer moments; state.json says so ("travel": "bfloat16"). Resuming from it
    upcasts the weights and warms the learning rate up again (as without moments). A model state
    and its best weights then come back in 44 MB instead of 67 (the device returns 64 MiB)."""
    path = os.path.join(src, "state.json")
    if not os.path.exists(path):
        raise ValueError(f"{src}: no state")
    with open(path) as f:
        info = json.load(f)
    tensors = load_tensors_split(src, info["files"])  # the moments stay behind
    keep = {n: (t.to(torch.bfloat16) if t.is_floating_point() else t) for n, t in tensors.items()}
    info = {k: v for k, v in info.items() if k not in ("files", "moment_files")}
    save(dst, keep, dict(info, travel="bfloat16"))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "travel":
        sys.exit("usage: state.py travel SRC_STATE DST_STATE")
    travel_copy(sys.argv[2], sys.argv[3])
