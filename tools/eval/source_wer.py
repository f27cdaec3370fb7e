"""pocketsphinx WER of the corpus's own audio (the source voices), per speaker and per voice.

    python3 tools/eval/source_wer.py --corpus DIR [--split heldout] [--per-speaker N]
        [--jobs J] [--json OUT]

Reads DIR/corpus.tsv (tools/corpus/synth.py), decodes the chosen utterances with
pocketsphinx_batch (tools/eval/asr.py) and prints / writes WER per speaker, per voice (all of a
voice's pitch/rate settings) and overall."""

import argparse
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import asr  # noqa: E402


def read_corpus(corpus_dir):
    rows = []
    with open(os.path.join(corpus_dir, "corpus.tsv"), encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            rows.append(dict(zip(header, line.rstrip("\n").split("\t"))))
    return rows


def voice_of(speaker):
    return speaker.rsplit("-", 1)[0]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--split", default="heldout")
    p.add_argument("--per-speaker", type=int, default=0, help="first N per speaker (0: all)")
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--json")
    args = p.parse_args(argv)
    rows = [r for r in read_corpus(args.corpus) if r["split"] == args.split]
    if args.per_speaker:
        count, chosen = {}, []
        for r in rows:
            count[r["speaker"]] = count.get(r["speaker"], 0) + 1
            if count[r["speaker"]] <= args.per_speaker:
                chosen.append(r)
        rows = chosen
    start = time.time()
    hyp = asr.recognize([(f"{r['speaker']}.{r['sentence']}", os.path.join(args.corpus, r["path"]))
                         for r in rows], args.jobs)
    by_speaker, by_voice = {}, {}
    for r in rows:
        pair = (r["text"], hyp[f"{r['speaker']}.{r['sentence']}"])
        by_speaker.setdefault(r["speaker"], []).append(pair)
        by_voice.setdefault(voice_of(r["speaker"]), []).append(pair)
    result = {
        "what": "pocketsphinx_batch WER (Debian pocketsphinx-en-us, en-us.lm.bin) of the corpus "
                "voices' own audio",
        "split": args.split,
        "utterances": len(rows),
        "per_speaker_utterances": args.per_speaker or None,
        "overall_wer": round(asr.wer(p for pairs in by_speaker.values() for p in pairs), 4),
        "voices": {v: {"wer": round(asr.wer(pairs), 4), "utterances": len(pairs)}
                   for v, pairs in sorted(by_voice.items())},
        "speakers": {s: {"wer": round(asr.wer(pairs), 4), "utterances": len(pairs)}
                     for s, pairs in sorted(by_speaker.items())},
        "decode_seconds": round(time.time() - start, 1),
        "machine": platform.machine(),
    }
    for v, r in result["voices"].items():
        print(f"{v:24s} WER {100 * r['wer']:5.1f}%  ({r['utterances']} utterances)")
    print(f"overall WER {100 * result['overall_wer']:.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
