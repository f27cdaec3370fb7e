"""Self-tests of tools/eval/ that need no recognizer and no model (system python3, numpy):
the speaker classifier and speaker_check.py on a small synthetic corpus whose "speakers" are
harmonic tones of different pitch and brightness."""

import json
import math
import os
import shutil
import sys
import tempfile
import unittest
import wave
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import speaker_check  # noqa: E402
import speaker_id  # noqa: E402


def tone(f0, brightness, seconds, seed, rate=24000):
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    vibrato = 1 + 0.02 * np.sin(2 * np.pi * rng.uniform(3, 6) * t)
    x = sum(brightness ** k * np.sin(2 * np.pi * f0 * (k + 1) * vibrato * t) for k in range(8))
    return 0.3 * x / np.abs(x).max() + 0.003 * rng.standard_normal(len(t))


def write_wav(path, x, rate=24000):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())


def make_corpus(root, speakers, train, heldout):
    lines = ["speaker\tsentence\tsplit\tseconds\tpath\ttext"]
    for s, (f0, bright) in speakers.items():
        os.makedirs(os.path.join(root, "wav", s))
        for i in range(train + heldout):
            split = "train" if i < train else "heldout"
            rel = f"wav/{s}/{i:04d}.wav"
            write_wav(os.path.join(root, rel), tone(f0, bright, 1.0, zlib.crc32(f"{s}-{i}".encode())))
            lines.append(f"{s}\t{i:04d}\t{split}\t1.000\t{rel}\tsome words")
    with open(os.path.join(root, "corpus.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")


MODEL = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "drama-mini"))
CODEC = os.path.join(MODEL, "codec")


class SpeakerCheck(unittest.TestCase):
    def test_distinct_speakers_are_named_and_settings_of_one_voice_count_as_the_voice(self):
        speakers = {"low-a": (110, 0.6), "low-b": (112, 0.6), "high-a": (260, 0.3)}
        with tempfile.TemporaryDirectory() as d:
            make_corpus(d, speakers, train=10, heldout=3)
            out = os.path.join(d, "check.json")
            self.assertEqual(speaker_check.main(["--corpus", d, "--train-per-speaker", "6",
                                                 "--test-per-speaker", "4", "--json", out]), 0)
            r = json.load(open(out))
            self.assertEqual(r["settings"]["speakers"], 3)
            self.assertEqual(r["heldout"]["utterances"], 9)
            self.assertEqual(r["unseen_train_sentences"]["utterances"], 12)
            # high-a is unlike the others: always named; low-a and low-b are one voice.
            for part in ("heldout", "unseen_train_sentences"):
                self.assertEqual(r[part]["per_speaker"]["high-a"], 1.0)
                self.assertEqual(r[part]["voice_accuracy"], 1.0)
            self.assertFalse(os.path.exists(out + ".partial"))

    def codec_check(self, d, options):
        """speaker_check through the bundled codec on two tone speakers an octave apart (8 training
        and 3 held-out utterances each; the classifier on 6, the codec on the first 2 held-out):
        its receipt."""
        make_corpus(d, {"low-a": (110, 0.6), "high-a": (260, 0.3)}, train=8, heldout=3)
        out = os.path.join(d, "check.json")
        self.assertEqual(speaker_check.main(["--corpus", d, "--train-per-speaker", "6", "--codec",
                                             CODEC, "--codec-per-speaker", "2", "--json", out]
                                            + options), 0)
        return json.load(open(out))

    @unittest.skipUnless(os.path.exists(CODEC), "no bundled codec")
    def test_codec_round_trip_scores_the_same_utterances_recorded_and_decoded(self):
        with tempfile.TemporaryDirectory() as d:
            result = self.codec_check(d, ["--test-per-speaker", "2", "--codec-probes"])
            r = result["codec_round_trip"]
            self.assertEqual(r["utterances"], 4)  # the first 2 held-out of each speaker
            self.assertEqual(r["accuracy_recorded"], 1.0)
            for name in ("through_codec", "through_autoencoder"):
                self.assertTrue(0.0 <= r["accuracy_" + name] <= 1.0)
            # the probes train on the 6 training utterances of each speaker after the codec and
            # score the same 4: two tones an octave apart stay apart in the codes and the decodes
            probes = result["codec_probes"]
            self.assertEqual((probes["train_utterances"], probes["utterances"]), (12, 4))
            self.assertEqual((probes["accuracy_codes"], probes["accuracy_matched"]), (1.0, 1.0))

    @unittest.skipUnless(os.path.exists(CODEC), "no bundled codec")
    def test_codec_colour_scores_each_kind_of_correction_on_the_same_utterances(self):
        with tempfile.TemporaryDirectory() as d:
            result = self.codec_check(d, ["--test-per-speaker", "0", "--codec-colour"])
            colour = result["codec_colour"]
            self.assertEqual((colour["train_utterances"], colour["utterances"]), (12, 4))
            # the check's own features give codec_round_trip's figures on the same utterances
            self.assertEqual(colour["as_checked"]["recorded"], result["codec_round_trip"]["accuracy_recorded"])
            self.assertEqual(colour["as_checked"]["through_codec"],
                             result["codec_round_trip"]["accuracy_through_codec"])
            for name in ("static_shift", "linear_map", "without_delta_means", "speech_frames"):
                self.assertEqual(colour[name]["recorded"], 1.0, name)
                self.assertTrue(0.0 <= colour[name]["through_codec"] <= 1.0, name)
            with self.assertRaises(SystemExit):
                speaker_check.main(["--corpus", d, "--codec-colour"])

    def test_speech_frames_leave_out_silence(self):
        x = tone(150, 0.5, 1.0, 7, rate=16000)
        silent = np.concatenate([np.zeros(16000), x, np.zeros(16000)])
        speech = speaker_id.features(x, 16000, speech_db=40)
        # a second of silence each side moves the statistics of all frames far more than those
        # of the speech frames (which keep only the few frames straddling the edges)
        moved_all = np.abs(speaker_id.features(silent, 16000) - speaker_id.features(x, 16000))[:26]
        moved_speech = np.abs(speaker_id.features(silent, 16000, speech_db=40) - speech)[:26]
        self.assertGreater(moved_all.max(), 100.0)
        self.assertLess(moved_speech.max(), 0.05 * moved_all.max())
        np.testing.assert_array_equal(speaker_id.features(x, 16000, speech_db=None), speaker_id.features(x, 16000))

    @unittest.skipUnless(os.path.exists(CODEC), "no bundled codec")
    def test_outputs_of_an_evaluation_are_named_by_both_classifiers(self):
        speakers = {"low-a": (110, 0.6), "high-a": (260, 0.3)}
        with tempfile.TemporaryDirectory() as d:
            make_corpus(d, speakers, train=8, heldout=3)
            # an evaluate.py work folder: each voice's "outputs" are its held-out tones decoded
            # through the codec (as a model's outputs are), plus the unguided outputs (no
            # speaker) and a codec round trip folder, which are not scored
            import torch
            codec, rate = speaker_check.load_codec(CODEC)
            work = os.path.join(d, "work")
            for s in speakers:
                for gamma in ("1", "1.5"):
                    os.makedirs(os.path.join(work, "audio", f"{s}-g{gamma}"))
                    for i in (8, 9):
                        row = {"path": f"wav/{s}/{i:04d}.wav"}
                        with torch.no_grad():
                            y = codec.decode(codec.encode(speaker_check.read_pcm(d, row, rate)))
                        write_wav(os.path.join(work, "audio", f"{s}-g{gamma}", f"{i:04d}.wav"),
                                  y[0].numpy(), rate)
            for extra in ("none-g1", "codec-low-a"):
                os.makedirs(os.path.join(work, "audio", extra))
                shutil.copy(os.path.join(d, "wav", "high-a", "0008.wav"),
                            os.path.join(work, "audio", extra, "0008.wav"))
            out = os.path.join(d, "check.json")
            self.assertEqual(speaker_check.main(["--corpus", d, "--train-per-speaker", "6",
                                                 "--test-per-speaker", "2", "--codec", CODEC,
                                                 "--codec-per-speaker", "1", "--outputs", work,
                                                 "--json", out]), 0)
            r = json.load(open(out))["model_outputs"]
            self.assertEqual(r["train_utterances"], 12)
            self.assertEqual(r["folders"], ["high-a-g1", "high-a-g1.5", "low-a-g1", "low-a-g1.5"])
            self.assertEqual(sorted(k for k in r if k.startswith("gamma")), ["gamma 1", "gamma 1.5"])
            for gamma in ("gamma 1", "gamma 1.5"):
                recorded, matched = r[gamma]["recorded_classifier"], r[gamma]["matched_classifier"]
                self.assertEqual((recorded["utterances"], matched["utterances"]), (4, 4))
                # the recorded one names decodes as it may; the matched one, trained on decodes,
                # tells two tones an octave apart (as codec_probes' test has it)
                self.assertTrue(0.0 <= recorded["accuracy"] <= 1.0)
                self.assertEqual(matched["accuracy"], 1.0)
                self.assertEqual(matched["per_speaker"], {"high-a": 1.0, "low-a": 1.0})
                self.assertEqual(matched["top_confusions"], [])
                # each miss counted once
                self.assertEqual(sum(c["count"] for c in recorded["top_confusions"]),
                                 round(4 * (1 - recorded["accuracy"])))
            with self.assertRaises(SystemExit):
                speaker_check.main(["--corpus", d, "--outputs", work])

    @unittest.skipUnless(os.path.exists(CODEC), "no bundled codec")
    def test_routing_overlap_compares_the_branches_row_by_row(self):
        import routing_overlap
        model_dir = os.path.dirname(CODEC)
        with tempfile.TemporaryDirectory() as d:
            make_corpus(d, {"festival-kal-a": (110, 0.6)}, train=0, heldout=2)
            out = os.path.join(d, "overlap.json")
            self.assertEqual(routing_overlap.main(["--checkpoint", model_dir, "--corpus", d,
                                                   "--voices", "festival-kal-a", "--sentences", "2",
                                                   "--json", out]), 0)
            r = json.load(open(out))
            k = r["settings"]["experts_per_token"]
            self.assertEqual(r["uniform_routing_mean_shared"], round(k * k / r["settings"]["experts"], 4))
            # 1 s recordings: 13 frames at 12.5 frames/s or 25 at 25; one decode row per frame plus
            # the text's end, for each of the 2 utterances
            frames = math.ceil(r["settings"].get("frame_rate", 25) * 1.0)
            self.assertEqual(r["per_voice"]["festival-kal-a"]["decode_rows"], 2 * (frames + 1))
            self.assertTrue(0 <= r["mean_shared"] <= k and 0 <= r["fraction_same_set"] <= 1)
            # planted: the same prompt in both branches shares every expert at every row
            model = routing_overlap.drama3.Drama3(model_dir)
            log = routing_overlap.RouteLog(model)
            x = model.prompt("some words")
            a, b = log.run(model, x), log.run(model, x)
            self.assertTrue(a and all(a[i] == b[i] for i in a))
            self.assertTrue(all(len(s) == k for rows in a.values() for s in rows))

    @unittest.skipUnless(os.path.exists(CODEC) and os.environ.get("DRAMA_BIN") and shutil.which("pocketsphinx_batch"),
                         "needs the bundled model, DRAMA_BIN and pocketsphinx")
    def test_evaluation_puts_the_codec_bound_beside_source_and_model(self):
        import evaluate
        with tempfile.TemporaryDirectory() as d:
            corpus, work, out = os.path.join(d, "corpus"), os.path.join(d, "work"), os.path.join(d, "eval.json")
            make_corpus(corpus, {"low-a": (110, 0.6), "high-a": (260, 0.3)}, train=3, heldout=3)
            saved = os.environ.get("DRAMA_LOCK_DIR")
            os.environ["DRAMA_LOCK_DIR"] = os.path.join(d, "locks")  # beside other tests' drama
            try:
                self.assertEqual(evaluate.main([
                    "--corpus", corpus, "--voices", "low-a,high-a", "--sentences", "2", "--gammas", "1.5",
                    "--drama", os.environ["DRAMA_BIN"], "--max-duration", "2", "--jobs", "2",
                    "--model-args", f"--checkpoint {MODEL} --manifest {MODEL}/manifest.json",
                    "--codec-bound", "--work", work, "--json", out]), 0)
            finally:
                if saved is None:
                    os.environ.pop("DRAMA_LOCK_DIR", None)
                else:
                    os.environ["DRAMA_LOCK_DIR"] = saved
            r = json.load(open(out))
            self.assertTrue(r["settings"]["codec_bound"])
            self.assertEqual(sorted(r["codec_wer"]), ["high-a", "low-a"])
            self.assertEqual(sorted(r["codec_wer"]), sorted(r["source_wer"]))
            self.assertTrue(all(w >= 0 for w in r["codec_wer"].values()))
            self.assertTrue(0 <= r["cloning"]["classifier_on_codec_round_trip"] <= 1)
            for v in ("low-a", "high-a"):  # each target's round trip (the first held-out
                folder = os.path.join(work, "audio", f"codec-{v}")  # recording is the voice)
                self.assertEqual(sorted(os.listdir(folder)), ["0004.wav", "0005.wav"])
                for name in os.listdir(folder):  # the recording's second, in whole frames
                    with wave.open(os.path.join(folder, name)) as w:
                        self.assertEqual(w.getframerate(), 24000)
                        self.assertLess(abs(w.getnframes() - 24000), 960 + 1)

    def test_classifier_is_deterministic(self):
        rng = np.random.default_rng(1)
        feats = rng.standard_normal((20, 52))
        labels = ["a"] * 10 + ["b"] * 10
        feats[10:] += 1.5
        p1 = speaker_id.SpeakerClassifier().fit(feats, labels).probabilities(feats)
        p2 = speaker_id.SpeakerClassifier().fit(feats, labels).probabilities(feats)
        self.assertTrue(np.array_equal(p1, p2))


if __name__ == "__main__":
    unittest.main()
