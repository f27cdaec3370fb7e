"""NVFP4 weights (spec section 4): E2M1 codes, two per byte, one float8_e4m3fn scale per block of 16
inputs, one float32 per-tensor scale. Dequantization and the ModelOpt-style quantizer."""

import torch

from safetensors_io import e4m3_to_float

BLOCK = 16
E2M1_MAGNITUDES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_MAX = 6.0
E4M3_MAX = 448.0


def e2m1_to_float(codes):
    """4-bit codes (any int tensor, values 0..15) -> float32; bit 3 is the sign."""
    codes = codes.to(torch.int64)
    magnitude = E2M1_MAGNITUDES[codes & 7]
    return torch.where((codes & 8) != 0, -magnitude, magnitude)


def unpack_codes(packed):
    """uint8 [out, in/2] -> int64 codes [out, in]; element 2j is the LOW nibble of byte j."""
    packed = packed.to(torch.int64)
    low, high = packed & 0xF, packed >> 4
    return torch.stack([low, high], dim=-1).reshape(packed.shape[0], packed.shape[1] * 2)


def pack_codes(codes):
    """int codes [out, in] (in even) -> uint8 [out, in/2], element 2j in the low nibble."""
    codes = codes.to(torch.int64)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)


def dequantize(weight, weight_scale, weight_scale_2):
    """w[o, i] = e2m1(code[o, i]) * float(weight_scale[o, i/16]) * weight_scale_2, in float32.

    weight: uint8 [out, in/2]; weight_scale: raw float8_e4m3fn bytes (uint8) [out, in/16];
    weight_scale_2: float32 scalar."""
    values = e2m1_to_float(unpack_codes(weight))
    scales = e4m3_to_float(weight_scale).repeat_interleave(BLOCK, dim=1)
    return values * scales * weight_scale_2.to(torch.float32).reshape(())


def _round_to_grid(x, grid):
    """Round-to-nearest-even onto an increasing non-negative grid whose index parity is the
    mantissa parity (true of E2M1 and E4M3); x >= 0; beyond the last point saturates.
    Returns grid indices."""
    distance = (x.to(torch.float64).unsqueeze(-1) - grid.to(torch.float64)).abs()
    nearest = distance == distance.min(dim=-1, keepdim=True).values
    index = torch.arange(grid.numel())
    preference = nearest.to(torch.int64) * (2 - index % 2)  # on a tie the even index wins
    return preference.argmax(dim=-1)


def _e4m3_grid():
    """The 127 finite non-negative float8_e4m3fn values, indexed by their code (0x00..0x7e)."""
    return e4m3_to_float(torch.arange(0x7F, dtype=torch.uint8))


def float_to_e4m3(x):
    """float32 -> float8_e4m3fn bytes (uint8), round to nearest even, saturating to +-448."""
    x = x.to(torch.float32)
    code = _round_to_grid(x.abs().clamp(max=E4M3_MAX), _e4m3_grid())
    return (code | torch.where(x < 0, 0x80, 0)).to(torch.uint8)


def float_to_e2m1(x):
    """float32 -> E2M1 codes (int64 0..15), round to nearest even, saturating to +-6;
    the sign bit is set iff the value is < 0."""
    code = _round_to_grid(x.abs().clamp(max=E2M1_MAX), E2M1_MAGNITUDES)
    return code | torch.where(x < 0, 8, 0)


def tensor_scale(w):
    """weight_scale_2 of a matrix: amax(W) / (6 * 448), float32; 1.0 for an all-zero matrix."""
    amax = w.to(torch.float32).abs().max()
    # An all-zero matrix gets weight_scale_2 = 1.0 (as src/format/nvfp4.cpp), never 0.
    return amax / torch.tensor(E2M1_MAX * E4M3_MAX) if amax > 0 else torch.tensor(1.0)


def quantize(w, scale_2=None):
    """ModelOpt-style NVFP4 quantization of a float weight [out, in] (in divisible by 16).
    `scale_2` overrides the tensor scale (gate and up of one expert share the larger of theirs).

    Returns (weight uint8 [out, in/2], weight_scale e4m3 bytes [out, in/16], weight_scale_2 f32 [])."""
    w = w.to(torch.float32)
    out_features, in_features = w.shape
    if in_features % BLOCK:
        raise ValueError(f"NVFP4 needs the input size to be a multiple of {BLOCK}, got {in_features}")
    if not torch.isfinite(w).all():
        raise ValueError("NVFP4 quantize: the matrix holds NaN or infinity")
    scale_2 = tensor_scale(w) if scale_2 is None else torch.as_tensor(scale_2, dtype=torch.float32)
    blocks = w.reshape(out_features, in_features // BLOCK, BLOCK)
    block_scale = blocks.abs().amax(dim=-1) / (scale_2 * E2M1_MAX)
    scale_bytes = float_to_e4m3(block_scale)
    # A zero scale is stored as 1.0 (its block quantizes to zeros instead of dividing by zero).
    # Checked after encoding, so a nonzero scale that rounds to zero in E4M3 is covered too.
    scale_bytes = torch.where(scale_bytes == 0, float_to_e4m3(torch.tensor(1.0)), scale_bytes)
    denominator = e4m3_to_float(scale_bytes) * scale_2
    codes = float_to_e2m1(blocks / denominator.unsqueeze(-1)).reshape(out_features, in_features)
    return pack_codes(codes), scale_bytes, scale_2.reshape(())


EXPERT_PARTS = ("gate_proj", "up_proj", "down_proj")


def quantize_experts(tensors, kept=None):
    """The NVFP4 triples `drama quantize` writes for a BF16 checkpoint's tensors (name -> tensor):
    every routed and shared expert projection, gate and up of one expert sharing the larger of their
    two tensor scales (as ModelOpt writes a fused gate_up). `kept` (per layer, original ids, or None)
    drops the routed experts not listed. Returns name -> tensor or (dtype name, raw bytes) pairs."""
    out = {}
    for name in sorted(tensors):
        parts = name.split(".")
        if not (name.startswith("backbone.layers.") and parts[-1] == "weight"
                and parts[-2] in EXPERT_PARTS and parts[3] == "mlp"
                and (parts[4] == "shared_expert" or parts[4] == "experts")):
            continue
        layer = int(parts[2])
        if parts[4] == "experts" and kept is not None and int(parts[5]) not in kept[layer]:
            continue
        prefix = name[: -len(".weight")]
        scale_2 = None
        if parts[-2] != "down_proj":
            base = prefix[: -len(parts[-2])]
            scale_2 = torch.maximum(tensor_scale(tensors[base + "gate_proj.weight"]),
                                    tensor_scale(tensors[base + "up_proj.weight"]))
        codes, scales, s2 = quantize(tensors[name], scale_2)
        out[prefix + ".weight"] = codes
        out[prefix + ".weight_scale"] = ("F8_E4M3", scales)
        out[prefix + ".weight_scale_2"] = s2.to(torch.float32)
    return out
