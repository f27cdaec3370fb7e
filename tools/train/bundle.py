#!/usr/bin/env python3
"""Turns a training state into the bundled default model (docs/training.md, "Bundling").

    tools/train/bundle.py WORK OUT_DIR --corpus CORPUS --voices SPK1,SPK2,...
        [--drama build/drama] [--config tools/train/drama-mini.json]
        [--pin checkpoints/drama-mini.json] [--max-mib 48]

1. `train.py export --work WORK` (BF16) into a temporary sibling of OUT_DIR;
2. `drama quantize` to NVFP4, manifest named drama-mini with weights "drama-mini" (the pinned
   manifest the engine verifies the bundled model against, src/engine/launcher.h);
3. one built-in voice per listed corpus speaker, its id the speaker id, from the speaker's
   held-out recording of the smallest sentence id all of them recorded (as tools/eval/evaluate.py
   picks its reference; the evaluation's corpus, made with synth.py --heldout-same):
   `drama voice write REF --transcript TEXT --into DIR --id SPK --backend cpu`, each re-pinning
   DIR/manifest.json (so the last one is the final manifest);
4. `drama verify` against that manifest, refusal if the directory exceeds --max-mib, then the
   directory is renamed to OUT_DIR (which must not exist) and the manifest copied to --pin.

Standard library only (the export runs train.py with this interpreter, which needs torch)."""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
NAME = "drama-mini"  # the bundled weights (kBundledWeights in src/engine/launcher.h)


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bundle: {what} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-600:]}")
    return r


def references(corpus, speakers):
    """{speaker: (wav path, transcript)} from corpus.tsv: every speaker's held-out recording of
    the smallest sentence id that all of them recorded, as tools/eval/evaluate.py picks its
    voices' reference, so the evaluation measures the voices shipped (a corpus made with
    `synth.py --heldout-same`). Each speaker's own smallest id was taken until 2026-12-04, and a
    corpus without --heldout-same then gave built-in voices from other sentences than the
    evaluated ones (docs/training.md)."""
    rows = {}
    with open(os.path.join(corpus, "corpus.tsv"), newline="") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if row["split"] == "heldout" and row["speaker"] in speakers:
                rows.setdefault(row["speaker"], {})[row["sentence"]] = row
    missing = [s for s in speakers if s not in rows]
    if missing:
        raise SystemExit(f"bundle: {corpus}/corpus.tsv has no held-out recording of {', '.join(missing)}")
    common = set.intersection(*(set(rows[s]) for s in speakers))
    if not common:
        raise SystemExit(f"bundle: {corpus}/corpus.tsv has no held-out sentence that every voice recorded "
                         "(synthesize the corpus with tools/corpus/synth.py --heldout-same)")
    first = min(common)
    return {s: (os.path.join(corpus, rows[s][first]["path"]), rows[s][first]["text"]) for s in speakers}


def directory_bytes(folder):
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder) for n in names)


def write_json_atomic(path, value):
    tmp = f"{path}.partial-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True) + "\n")  # as drama writes manifests
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def bundle(args):
    speakers = [s for s in args.voices.split(",") if s]
    if not speakers:
        raise SystemExit("bundle: --voices names no speaker")
    out = os.path.abspath(args.out_dir)
    if os.path.lexists(out):
        raise SystemExit(f"bundle: {out} already exists; it is never replaced")
    refs = references(args.corpus, speakers)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out)}.partial-{os.getpid()}")
    os.makedirs(tmp)
    try:
        export, model = os.path.join(tmp, "export"), os.path.join(tmp, "model")
        run([sys.executable, os.path.join(HERE, "train.py"), "export", "--work", args.work,
             "--config", args.config, "-o", export], "train.py export")
        run([args.drama, "quantize", export, model, "--name", NAME], "drama quantize")
        manifest_path = os.path.join(model, "manifest.json")
        with open(manifest_path) as f:
            manifest = json.load(f)
        # The bundled weights' own label; the revision stays content-derived (it hashes the files
        # only), so `voice write --into` can re-pin it.
        manifest.update(name=NAME, weights=NAME, repo="local/" + NAME)
        write_json_atomic(manifest_path, manifest)
        for s in speakers:
            wav, text = refs[s]
            run([args.drama, "voice", "write", wav, "--transcript", text, "--into", model, "--id", s,
                 "--backend", "cpu"], f"drama voice write ({s})")
        run([args.drama, "verify", model, "--manifest", manifest_path], "drama verify")
        with open(manifest_path) as f:
            manifest = json.load(f)
        size = directory_bytes(model)
        if size > args.max_mib * (1 << 20):
            raise SystemExit(f"bundle: the model is {size} bytes ({size / (1 << 20):.1f} MiB), over the "
                             f"{args.max_mib:g} MiB limit; nothing was written")
        if os.path.lexists(out):
            raise SystemExit(f"bundle: {out} appeared meanwhile; it is never replaced")
        os.rename(model, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.pin)), exist_ok=True)
    write_json_atomic(args.pin, manifest)
    print(f"bundle: {out} ({size} bytes, {len(manifest['files'])} files, voices {', '.join(speakers)}, "
          f"revision {manifest['revision']}); pinned manifest {args.pin}")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", help="the training state (train.py --work)")
    p.add_argument("out_dir", help="the model directory to write (must not exist), e.g. models/drama-mini")
    p.add_argument("--corpus", required=True, help="corpus folder with corpus.tsv (tools/corpus/synth.py)")
    p.add_argument("--voices", required=True, help="comma-separated corpus speaker ids: the built-in voices")
    p.add_argument("--drama", default=os.path.join(ROOT, "build", "drama"))
    p.add_argument("--config", default=os.path.join(HERE, "drama-mini.json"), help="the model config trained")
    p.add_argument("--pin", default=os.path.join(ROOT, "checkpoints", NAME + ".json"),
                   help="where the final manifest is copied (embedded at build time)")
    p.add_argument("--max-mib", type=float, default=48)
    return bundle(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
