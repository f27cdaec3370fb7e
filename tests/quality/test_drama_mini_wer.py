"""Quality regression test of the bundled model (issue 14): intelligibility of drama-mini.

`drama serve` with the default model (models/drama-mini, verified against the shipped
checkpoints/drama-mini.json), seed 1, guidance gamma 1.5 with the built-in voice VOICE (else the
first built-in voice by id),
says the first 20 held-out sentences (tools/corpus/heldout-ids.txt order, texts from
tools/corpus/sentences.py; a sentence that is the voice's own transcript is skipped and the next
one taken), and pocketsphinx_batch (tools/eval/asr.py) must recognise them within MAX_WER.

Registered by CMakeLists.txt only when models/drama-mini exists (labels quality, slow); about a
minute on 2 cores for a model of drama-mini's size. Needs pocketsphinx(-en-us) and wordnet-base.

    DRAMA_BIN=build/drama DRAMA_SOURCE_DIR=. python3 tests/quality/test_drama_mini_wer.py"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import urllib.request

SOURCE = os.environ.get("DRAMA_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "tools", "eval"))
sys.path.insert(0, os.path.join(SOURCE, "tools", "corpus"))

import asr  # noqa: E402
import sentences  # noqa: E402

# The bound, unchanged since the first bundled model (run 3, revision 2c7742af: 0.951 on the
# 2-vCPU AVX2 VM with festival-slt-a; over five sampling settings 0.888-0.972). 0.99 holds back
# what this test exists for: a model that says noise (the random model gives 1.00, the memorised
# first model 1.32). Tighten it as the model improves.
# Run 4 (25 frames/s, revision c9b87cd4, bundled 2026-12-04), measured on the 2-vCPU Zen 5 VM:
# espeak-klatt2-a 0.936 on the AVX-512 path and on the forced AVX2 path alike (DRAMA_CPU_ISA=avx2),
# festival-slt-a 0.993, kal 1.085, ked 1.071 on these 20 sentences.
# Run 5 (the same codec, a model trained 8000 steps; revision fc82570e, bundled 2026-12-04),
# on the 2-vCPU Zen 5 VM: festival-kal-a 0.809 (AVX-512) and 0.830 (forced AVX2: the paths'
# bytes differ, so their samples do), ked 0.816, slt 0.872, espeak-klatt2-a 0.915. The bound is
# tightened from 0.99 to 0.92: 9 points above both paths' figures for sampling differences
# between CPU paths, and below what run 4 (1.085 with this voice) and the random model (1.00)
# give, so a return to either fails.
MAX_WER = 0.92

SENTENCES = 20
# The built-in voice drama-mini says the 300 held-out sentences best with (the evaluation of the
# bundled model, results/eval-drama-mini-300.json; chosen by that rule, docs/training.md). It was
# festival-slt-a for run 3, which pocketsphinx follows best in the source audio, espeak-klatt2-a
# for run 4, and is festival-kal-a for run 5 (84.4% against 85.8-86.4% for the others).
VOICE = "festival-kal-a"
SEED = 1
GAMMA = 1.5
MAX_DURATION_S = 12


def drama_bin():
    return os.environ.get("DRAMA_BIN", os.path.join(SOURCE, "build", "drama"))


def http(port, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST" if body else "GET",
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"} if body else {})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read()


class DramaMiniIntelligibility(unittest.TestCase):
    def test_heldout_sentences_are_recognised_within_the_bound(self):
        texts = dict(sentences.load()[1])
        ids = sentences.read_ids(sentences.HELDOUT_FILE)
        with tempfile.TemporaryDirectory(prefix="drama-quality-") as tmp:
            env = dict(os.environ, DRAMA_LOCK_DIR=os.path.join(tmp, "locks"),
                       DRAMA_CACHE=os.path.join(tmp, "cache"))
            env.setdefault("DRAMA_MODELS_DIR", os.path.join(SOURCE, "models"))
            log_file = open(os.path.join(tmp, "serve.log"), "w")
            server = subprocess.Popen(
                [drama_bin(), "serve", "--port", "0", "--backend", "cpu", "--threads", "2",
                 "--gamma", str(GAMMA), "--voices", os.path.join(tmp, "voices")],
                stdout=subprocess.PIPE, stderr=log_file, text=True, env=env)
            try:
                port = None
                for line in server.stdout:
                    m = re.search(r"listening on http://[^:]+:(\d+)", line)
                    if m:
                        port = int(m.group(1))
                        break
                with open(os.path.join(tmp, "serve.log")) as f:
                    log = f.read()
                self.assertIsNotNone(port, log)
                health = json.loads(http(port, "/health"))
                # The trained model's pin, not the placeholder shipped before training ended.
                self.assertTrue(health["provenance"].startswith("pinned:local/drama-mini@"), health)
                voices = sorted(json.loads(http(port, "/v1/audio/voices"))["voices"], key=lambda v: v["id"])
                builtin = [v for v in voices if v.get("built_in")]
                self.assertTrue(builtin, "the bundled model has no built-in voice")
                voice = next((v for v in builtin if v["id"] == VOICE), builtin[0])
                chosen = [i for i in ids if texts[i] != voice["transcript"]][:SENTENCES]
                items = []
                for i in chosen:
                    wav = http(port, "/v1/audio/speech", {"input": texts[i], "voice": voice["id"], "seed": SEED,
                                                           "max_duration_s": MAX_DURATION_S,
                                                           "response_format": "wav"})
                    path = os.path.join(tmp, i + ".wav")
                    with open(path, "wb") as f:
                        f.write(wav)
                    items.append((i, path))
            finally:
                server.terminate()
                server.wait(timeout=60)
                server.stdout.close()
                log_file.close()
            hyps = asr.recognize(items, jobs=2)
            pairs = [(texts[i], hyps.get(i, "")) for i in chosen]
            wer = asr.wer(pairs)
            for (ref, hyp), i in zip(pairs, chosen):
                print(f"{i}\t{ref}\t{hyp}")
            print(f"drama-mini WER {wer:.3f} over {len(pairs)} held-out sentences (voice {voice['id']}, "
                  f"seed {SEED}, gamma {GAMMA}; bound {MAX_WER}; {health['provenance']})")
            self.assertEqual(len(pairs), SENTENCES)
            self.assertLessEqual(wer, MAX_WER)


if __name__ == "__main__":
    unittest.main()
