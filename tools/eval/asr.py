"""Word error rate with pocketsphinx_batch and Debian's US English model (packages pocketsphinx,
pocketsphinx-en-us), as issue 14 measures intelligibility.

    recognize(items, jobs) -> {utterance id: hypothesis}   items: (id, wav path)
    word_errors(reference, hypothesis) -> (edits, reference words)
    wer(pairs) -> corpus WER over (reference, hypothesis) pairs (total edits / total words)

Audio is resampled to 16 kHz mono 16-bit raw (tools/corpus/audio.py) and decoded with the
default language model (en-us.lm.bin) and dictionary, so the figures compare across runs. Text
is normalised before scoring: lower case, hyphens to spaces, everything but letters, digits and
apostrophes dropped. $DRAMA_ASR_ROOT (a dpkg -x root) runs pocketsphinx from there."""

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "corpus"))

import audio  # noqa: E402

ARCH = "x86_64-linux-gnu"


def _paths():
    root = os.environ.get("DRAMA_ASR_ROOT", "")
    model = f"{root}/usr/share/pocketsphinx/model/en-us"
    env = dict(os.environ)
    if root:
        env["LD_LIBRARY_PATH"] = ":".join(
            [f"{root}/usr/lib/{ARCH}", f"{root}/usr/lib/{ARCH}/blas", f"{root}/usr/lib/{ARCH}/lapack"]
            + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    binary = f"{root}/usr/bin/pocketsphinx_batch" if root else "pocketsphinx_batch"
    return binary, model, env


def normalize(text):
    text = text.lower().replace("-", " ")
    return re.sub(r"[^a-z0-9' ]", " ", text).split()


def word_errors(reference, hypothesis):
    """(substitutions + deletions + insertions, number of reference words)."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)], len(ref)


def wer(pairs):
    edits = words = 0
    for reference, hypothesis in pairs:
        e, n = word_errors(reference, hypothesis)
        edits, words = edits + e, words + n
    return edits / max(words, 1)


def _decode(binary, model, env, ctl, cepdir, hyp):
    cmd = [binary, "-adcin", "yes", "-cepdir", cepdir, "-cepext", ".raw", "-ctl", ctl,
           "-hyp", hyp, "-samprate", "16000", "-hmm", f"{model}/en-us",
           "-lm", f"{model}/en-us.lm.bin", "-dict", f"{model}/cmudict-en-us.dict",
           "-logfn", os.devnull]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def recognize(items, jobs=2):
    """{id: hypothesis text} for (id, wav path) items; ids must be [A-Za-z0-9_.-]."""
    binary, model, env = _paths()
    items = list(items)
    with tempfile.TemporaryDirectory(prefix="drama-asr-") as tmp:
        for uid, path in items:
            x, rate = audio.read_wav(path)
            y = audio.resample(x, rate, 16000)
            pcm = (y.clip(-1, 1) * 32767).round().astype("<i2")
            pcm.tofile(os.path.join(tmp, uid + ".raw"))
        procs = []
        for j in range(max(1, min(jobs, len(items)))):
            part = items[j::max(1, min(jobs, len(items)))]
            ctl, hyp = os.path.join(tmp, f"ctl{j}.txt"), os.path.join(tmp, f"hyp{j}.txt")
            with open(ctl, "w") as f:
                f.writelines(uid + "\n" for uid, _ in part)
            procs.append((_decode(binary, model, env, ctl, tmp, hyp), hyp))
        out = {}
        for proc, hyp in procs:
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"pocketsphinx_batch failed ({proc.returncode}): {err[-400:]}")
            with open(hyp) as f:
                for line in f:
                    m = re.match(r"^(.*)\((\S+)(?: -?\d+)?\)\s*$", line)
                    if m:
                        out[m.group(2)] = m.group(1).strip()
    for uid, _ in items:
        out.setdefault(uid, "")
    return out
