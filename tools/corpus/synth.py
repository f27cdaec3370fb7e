"""Synthesizes the drama-mini corpus from Debian's own synthesizers and text (docs/training.md).

    python3 tools/corpus/synth.py --out DIR [--root ROOT] [--speakers ID,...]
        [--train-per-speaker N] [--heldout-per-speaker K [--heldout-same]]
        [--gloss-per-speaker G] [--jobs J]

Writes DIR/wav/<speaker>/<sentence id>.wav (24 kHz mono 16-bit), DIR/corpus.tsv (one line per
utterance: speaker, sentence id, split, seconds, path, text) and DIR/corpus.json (speakers,
counts, sources). Rerunning skips utterances already written (each file is written to a
temporary name, then renamed), so an interrupted run resumes. The same arguments always give
the same utterances (sentence choice per speaker is keyed by SHA-256, synthesizers are
deterministic).

--gloss-per-speaker G (default 0): each speaker also says the first G WordNet glosses
(sentences.glosses()) in its own keyed order, split "gloss": extra text for the model stage
only; readers of split "train" (the codec) see the same utterances as without it. With G=0
corpus.tsv and corpus.json are what they were before the option existed.

--root ROOT: run festival and espeak-ng from Debian's .deb files unpacked into ROOT with
`dpkg -x` (tools/corpus/fetch-debs.sh, then unpack-debs.sh), on a machine without those packages:
binaries from ROOT/usr/bin, libraries from ROOT/usr/lib/x86_64-linux-gnu, festival's library from
ROOT/usr/share/festival, espeak-ng's data from ROOT/usr/lib/x86_64-linux-gnu/espeak-ng-data,
WordNet from ROOT/usr/share/wordnet."""

import argparse
import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import audio  # noqa: E402
import sentences  # noqa: E402
import speakers  # noqa: E402

SAMPLE_RATE = 24000
ARCH = "x86_64-linux-gnu"


class Tools:
    """Command lines and environment of the synthesizers, from the system or a dpkg -x root."""

    def __init__(self, root=None):
        self.root = os.path.abspath(root) if root else None
        prefix = self.root or ""
        self.festival = [f"{prefix}/usr/bin/festival"] if root else ["festival"]
        if root:
            # Debian's festival finds init.scm through its data folder, voices and lexicons
            # through the load path; both options are needed.
            lib = f"{prefix}/usr/share/festival"
            self.festival += ["--datadir", lib, "--libdir", lib]
        self.espeak = [f"{prefix}/usr/bin/espeak-ng"] if root else ["espeak-ng"]
        if root:
            self.espeak.append(f"--path={prefix}/usr/lib/{ARCH}")
        self.wordnet = f"{prefix}/usr/share/wordnet" if root else sentences.DEFAULT_WORDNET
        self.env = dict(os.environ)
        if root:
            # libpulse finds libpulsecommon through its RUNPATH (/usr/lib/ARCH/pulseaudio), which
            # names the system folder, not the root: the GPU machine has none.
            libs = [f"{prefix}/usr/lib/{ARCH}", f"{prefix}/usr/lib/{ARCH}/pulseaudio",
                    f"{prefix}/lib/{ARCH}"]
            old = self.env.get("LD_LIBRARY_PATH")
            self.env["LD_LIBRARY_PATH"] = ":".join(libs + ([old] if old else []))
            self.env["ESPEAK_DATA_PATH"] = f"{prefix}/usr/lib/{ARCH}"

    def run(self, cmd, **kwargs):
        result = subprocess.run(cmd, env=self.env, capture_output=True, **kwargs)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:3])}... failed ({result.returncode}): "
                               f"{result.stderr.decode(errors='replace')[-400:]}")
        return result


def keyed_order(speaker_id, items):
    """Items (id, text) in a per-speaker order keyed by SHA-256 (deterministic, speaker-specific)."""
    return sorted(items, key=lambda it: hashlib.sha256(f"{speaker_id}/{it[0]}".encode()).hexdigest())


def assignments(speaker_list, train, heldout, train_per_speaker, heldout_per_speaker,
                heldout_same=False, glosses=(), gloss_per_speaker=0):
    """List of (speaker, [(id, text, split)]) in a fixed order: a speaker's training sentences,
    then its held-out ones, then (gloss_per_speaker > 0) its glosses, split "gloss"."""
    if gloss_per_speaker > 0:
        clash = {i for i, _ in glosses} & {i for i, _ in list(train) + list(heldout)}
        if clash:  # their texts differ (glosses() drops example texts): a SHA-256 prefix clash
            raise ValueError(f"gloss ids equal to sentence ids: {sorted(clash)[:5]}")
    out = []
    for s in speaker_list:
        chosen = [(i, t, "train") for i, t in keyed_order(s["id"], train)[:train_per_speaker]]
        ordered = heldout if heldout_same else keyed_order(s["id"], heldout)
        chosen += [(i, t, "heldout") for i, t in ordered[:heldout_per_speaker]]
        if gloss_per_speaker > 0:
            chosen += [(i, t, "gloss") for i, t in keyed_order(s["id"], glosses)[:gloss_per_speaker]]
        out.append((s, chosen))
    return out


def scheme_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def synth_festival(tools, speaker, items, tmp):
    """Raw festival wavs of items into tmp; returns paths in item order."""
    paths = [os.path.join(tmp, f"{i}.wav") for i, _, _ in items]
    script = [f"(voice_{speaker['voice']})",
              f"(Parameter.set 'Duration_Stretch {speaker['stretch'] * speaker['pitch']:.4f})"]
    for (i, text, _), path in zip(items, paths):
        script.append(f"(utt.save.wave (utt.synth (Utterance Text {scheme_string(text)})) "
                      f"{scheme_string(path)} 'riff)")
    script_path = os.path.join(tmp, "synth.scm")
    with open(script_path, "w") as f:
        f.write("\n".join(script) + "\n")
    tools.run(tools.festival + ["-b", script_path])
    return paths


def synth_espeak(tools, speaker, items, tmp):
    paths = []
    for i, text, _ in items:
        path = os.path.join(tmp, f"{i}.wav")
        tools.run(tools.espeak + ["-v", speaker["voice"], "-p", str(speaker["pitch"]), "-s",
                                  str(speaker["rate"]), "-w", path, text])
        paths.append(path)
    return paths


def synth_task(task):
    """One speaker's chunk of utterances; skips those already written."""
    root, out_dir, speaker, items = task
    tools = Tools(root)
    folder = os.path.join(out_dir, "wav", speaker["id"])
    os.makedirs(folder, exist_ok=True)
    todo = [it for it in items if not os.path.exists(os.path.join(folder, f"{it[0]}.wav"))]
    if not todo:
        return 0
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".synth-") as tmp:
        synth = synth_festival if speaker["engine"] == "festival" else synth_espeak
        for (i, _, _), raw in zip(todo, synth(tools, speaker, todo, tmp)):
            x, rate = audio.read_wav(raw)
            # Festival speakers: played `pitch` times faster (the rate it is read at is raised).
            rate_in = rate * speaker.get("pitch", 1.0) if speaker["engine"] == "festival" else rate
            y = audio.resample(x, rate_in, SAMPLE_RATE)
            final = os.path.join(folder, f"{i}.wav")
            audio.write_wav(final + ".tmp", y, SAMPLE_RATE)
            os.replace(final + ".tmp", final)
    return len(todo)


def wav_seconds(path):
    return (os.path.getsize(path) - 44) / 2 / SAMPLE_RATE


def main(argv=None):
    p = argparse.ArgumentParser(description="Synthesize the drama-mini corpus")
    p.add_argument("--out", required=True)
    p.add_argument("--root", help="folder holding Debian's .deb files unpacked by dpkg -x")
    p.add_argument("--speakers", help="comma-separated speaker ids (default: all)")
    p.add_argument("--train-per-speaker", type=int, default=400)
    p.add_argument("--heldout-per-speaker", type=int, default=300)
    p.add_argument("--heldout-same", action="store_true",
                   help="every speaker says the first K held-out sentences by id (evaluation)")
    p.add_argument("--gloss-per-speaker", type=int, default=0,
                   help="each speaker also says G WordNet glosses, split \"gloss\" (model-stage text)")
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--chunk", type=int, default=40, help="utterances per synthesizer process")
    args = p.parse_args(argv)

    tools = Tools(args.root)
    train, heldout = sentences.load(tools.wordnet)
    glosses = sentences.glosses(tools.wordnet) if args.gloss_per_speaker > 0 else []
    speaker_list = speakers.by_id(args.speakers.split(",") if args.speakers else None)
    plan = assignments(speaker_list, train, heldout, args.train_per_speaker,
                       args.heldout_per_speaker, args.heldout_same, glosses,
                       args.gloss_per_speaker)
    os.makedirs(args.out, exist_ok=True)
    tasks = [(args.root, args.out, s, items[k:k + args.chunk])
             for s, items in plan for k in range(0, len(items), args.chunk)]
    done = 0
    with multiprocessing.Pool(max(1, args.jobs)) as pool:
        for n in pool.imap_unordered(synth_task, tasks):
            done += n
    rows, seconds = [], {}
    for s, items in plan:
        for i, text, split in items:
            rel = os.path.join("wav", s["id"], f"{i}.wav")
            sec = wav_seconds(os.path.join(args.out, rel))
            seconds[split] = seconds.get(split, 0.0) + sec
            rows.append(f"{s['id']}\t{i}\t{split}\t{sec:.3f}\t{rel}\t{text}\n")
    with open(os.path.join(args.out, "corpus.tsv"), "w") as f:
        f.write("speaker\tsentence\tsplit\tseconds\tpath\ttext\n")
        f.writelines(rows)
    summary = {
        "format": "drama-corpus/1", "sample_rate": SAMPLE_RATE, "speakers": speaker_list,
        "utterances": len(rows), "synthesized_now": done,
        "hours": {k: round(v / 3600, 3) for k, v in seconds.items()},
        "train_per_speaker": args.train_per_speaker,
        "heldout_per_speaker": args.heldout_per_speaker,
        "text": "WordNet 3.0 example sentences (Debian wordnet-base, WordNet 3.0 license)",
        "tools": "festival + festvox-us-slt-hts, festvox-kallpc16k, festvox-kdlpc16k; espeak-ng",
        "mode": "dpkg -x root" if args.root else "system packages",
    }
    if args.gloss_per_speaker > 0:
        # Only then, so that a corpus without glosses keeps its corpus.json byte for byte.
        summary["gloss_per_speaker"] = args.gloss_per_speaker
        summary["text"] += ("; split gloss: WordNet 3.0 gloss definitions (first segment, "
                            f"{len(glosses)} usable; model-stage training text only)")
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"corpus: {len(rows)} utterances ({done} synthesized now), hours {summary['hours']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
