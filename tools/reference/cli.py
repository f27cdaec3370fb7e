"""Command line of the reference model; the C++ tests call it to make golden data at test time.

    /usr/bin/python3 tools/reference/cli.py logits --checkpoint DIR --text T [--voice FILE] --codes FILE -o OUT
    ... generate --checkpoint DIR --text T [--voice FILE] --seed N --temperature T --top-k K --top-p P
                 --gamma G --max-frames N -o CODES
    ... random-codes --checkpoint DIR --frames F --seed N -o FILE
    ... make-voice --checkpoint DIR --frames F --seed N --transcript T -o VOICE
    ... quantize --checkpoint BF16_DIR [--keep-experts FILE] -o EXPERTS.safetensors
    ... text-tokens --frontend bytes|espeak-ipa [--language en-us] --texts TEXTS.json -o TOKENS.json

Exit status: 0 on success, 2 for bad arguments (argparse), 1 for any other failure (one line).
"""

import argparse
import hashlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import drama3  # noqa: E402
import safetensors_io  # noqa: E402


def cmd_logits(args):
    model = drama3.Drama3(args.checkpoint)
    voice = drama3.read_voice(args.voice, model) if args.voice else None
    codes = drama3.read_codes_file(args.codes, drama3.CODES_FORMAT, model)["codes"]
    logits = drama3.teacher_forced_logits(model, args.text, codes, voice)
    safetensors_io.save(args.output, logits, {"format": "drama-logits/1"})


def cmd_generate(args):
    model = drama3.Drama3(args.checkpoint)
    voice = drama3.read_voice(args.voice, model) if args.voice else None
    codes = drama3.generate(model, args.text, voice, seed=args.seed, temperature=args.temperature,
                            top_k=args.top_k, top_p=args.top_p, gamma=args.gamma,
                            max_frames=args.max_frames)
    drama3.write_codes_file(args.output, codes, drama3.audio_metadata(model, drama3.CODES_FORMAT))


def random_codes(model, frames, seed):
    """Valid codes [frames, K] in 0..codebook_size-1 (never eos), from a seeded torch generator."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.codebook_size, (frames, model.num_codebooks), generator=generator,
                         dtype=torch.int64)


def cmd_random_codes(args):
    model = drama3.Drama3(args.checkpoint)
    codes = random_codes(model, args.frames, args.seed)
    drama3.write_codes_file(args.output, codes, drama3.audio_metadata(model, drama3.CODES_FORMAT))


def cmd_make_voice(args):
    model = drama3.Drama3(args.checkpoint)
    codec = os.path.join(args.checkpoint, "codec", "model.safetensors")
    digest = ""
    if os.path.exists(codec):
        with open(codec, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    metadata = drama3.audio_metadata(model, drama3.VOICE_FORMAT)
    metadata.update(transcript=args.transcript, codec_sha256=digest)
    drama3.write_codes_file(args.output, random_codes(model, args.frames, args.seed), metadata)


def cmd_quantize(args):
    """The expert tensors `drama quantize` must write, from the reference quantizer."""
    import json

    import nvfp4

    tensors, _ = safetensors_io.load_dir(args.checkpoint)
    kept = None
    if args.keep_experts:
        with open(args.keep_experts) as f:
            listed = json.load(f)
        if isinstance(listed, dict):
            listed = listed["kept_experts"]
        kept = [set(ids or []) for ids in listed]
    safetensors_io.save(args.output, nvfp4.quantize_experts(tensors, kept),
                        {"format": "drama-quantized-experts/1"})


def cmd_text_tokens(args):
    """Token ids of each text of a JSON list, under a frontend (parity with the engine's)."""
    import json

    import text_frontend

    with open(args.texts, encoding="utf-8") as f:
        texts = json.load(f)
    tokens = [text_frontend.text_tokens(t, args.frontend, args.language) for t in texts]
    with open(args.output, "w") as f:
        json.dump(tokens, f)


def uint64(text):
    value = int(text)
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"{text} is not in 0..2^64-1")
    return value


def non_negative(text):
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a non-negative number")
    return value


def parser():
    p = argparse.ArgumentParser(prog="reference", description="Drama-3 reference model (PyTorch)")
    sub = p.add_subparsers(dest="command", required=True)

    def command(name, handler, help_text):
        s = sub.add_parser(name, help=help_text)
        s.add_argument("--checkpoint", required=True)
        s.add_argument("-o", "--output", required=True)
        s.set_defaults(handler=handler)
        return s

    s = command("logits", cmd_logits, "teacher-forced logits (same output as `drama logits`)")
    s.add_argument("--text", required=True)
    s.add_argument("--voice")
    s.add_argument("--codes", required=True)
    s = command("generate", cmd_generate, "sampled codes with guidance")
    s.add_argument("--text", required=True)
    s.add_argument("--voice")
    s.add_argument("--seed", type=uint64, required=True)
    s.add_argument("--temperature", type=non_negative, required=True)
    s.add_argument("--top-k", type=uint64, required=True)
    s.add_argument("--top-p", type=non_negative, required=True)
    s.add_argument("--gamma", type=non_negative, required=True)
    s.add_argument("--max-frames", type=uint64, required=True)
    s = command("random-codes", cmd_random_codes, "a codes file of random valid codes")
    s.add_argument("--frames", type=uint64, required=True)
    s.add_argument("--seed", type=uint64, required=True)
    s = command("make-voice", cmd_make_voice, "a voice file with random codes")
    s.add_argument("--frames", type=uint64, required=True)
    s.add_argument("--seed", type=uint64, required=True)
    s.add_argument("--transcript", required=True)
    s = sub.add_parser("text-tokens", help="token ids of texts under a text frontend")
    s.add_argument("--frontend", required=True, choices=["bytes", "espeak-ipa"])
    s.add_argument("--language", default="en-us")
    s.add_argument("--texts", required=True, help="a JSON list of strings")
    s.add_argument("-o", "--output", required=True)
    s.set_defaults(handler=cmd_text_tokens)
    s = command("quantize", cmd_quantize, "the NVFP4 expert tensors of a BF16 checkpoint")
    s.add_argument("--keep-experts")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    torch.set_num_threads(1)
    try:
        args.handler(args)
    except (ValueError, OSError, KeyError) as error:
        print(f"reference {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
