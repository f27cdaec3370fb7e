"""Cross-check tools/reference/mimi.py against Hugging Face transformers' MimiModel.

Loads the same random codec (a codec/ folder written by `drama make-checkpoint`) into both, then
compares whole-utterance decode (random codes) and encode (a random signal) and prints one JSON
object. Needs transformers (run once on a machine that has it; not part of the test suite).

    python3 tools/reference/crosscheck_hf_mimi.py CODEC_DIR [CODEC_DIR ...] > receipt.json
"""

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mimi  # noqa: E402
import safetensors_io  # noqa: E402


def check(codec_dir, frames=9, seed=0):
    import transformers
    from transformers import MimiConfig, MimiModel

    with open(os.path.join(codec_dir, "config.json")) as f:
        raw = json.load(f)
    config = MimiConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    hf = MimiModel(config).eval()
    weights, _ = safetensors_io.load(os.path.join(codec_dir, "model.safetensors"))
    state = {k: v.float() for k, v in weights.items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    ours = mimi.Mimi(codec_dir)
    gen = torch.Generator().manual_seed(seed)
    k = min(8, raw.get("num_quantizers", 8))
    codes = torch.randint(0, raw["codebook_size"], (frames, k), generator=gen)
    with torch.no_grad():
        hf_pcm = hf.decode(codes.T.unsqueeze(0)).audio_values.reshape(-1).double()
        our_pcm = torch.as_tensor(ours.decode(codes)).reshape(-1).double()
        n = min(hf_pcm.numel(), our_pcm.numel())
        diff = hf_pcm[:n] - our_pcm[:n]
        rel_l2 = float(diff.norm() / hf_pcm[:n].norm())
        # Encode a deterministic signal: a chirp plus noise, one second.
        t = torch.arange(24000, dtype=torch.float64) / 24000
        sig = 0.3 * torch.sin(2 * np.pi * (200 + 300 * t) * t) + 0.05 * torch.randn(24000, generator=gen, dtype=torch.float64)
        sig = sig.float()
        hf_codes = hf.encode(sig.view(1, 1, -1), num_quantizers=k).audio_codes[0].T  # [frames, k]
        enc = ours.encode(sig, k)
        our_codes, margin = enc
        m = min(hf_codes.shape[0], our_codes.shape[0])
        same = hf_codes[:m].long() == our_codes[:m].long()
        equal = float(same.double().mean())
        clear = margin[:m] > 1e-3  # away from near ties (float32 HF vs float64 distances here)
        equal_clear = float(same[clear].double().mean()) if clear.any() else 1.0
    return {
        "codec": os.path.basename(os.path.normpath(os.path.dirname(codec_dir))) or codec_dir,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "state_dict_missing": sorted(missing),
        "state_dict_unexpected": sorted(unexpected),
        "decode_frames": frames,
        "decode_samples": [int(hf_pcm.numel()), int(our_pcm.numel())],
        "decode_rel_l2": rel_l2,
        "decode_max_abs": float(diff.abs().max()),
        "encode_frames": [int(hf_codes.shape[0]), int(our_codes.shape[0])],
        "encode_codes_equal_fraction": equal,
        "encode_codes_equal_fraction_margin_over_1e-3": equal_clear,
        "encode_positions_margin_over_1e-3": int(clear.sum()),
    }


if __name__ == "__main__":
    torch.set_num_threads(4)
    print(json.dumps([check(d) for d in sys.argv[1:]], indent=1))
