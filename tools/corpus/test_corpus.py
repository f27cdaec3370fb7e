"""Self-tests of tools/corpus/ (system python3, numpy): the WordNet glosses kept as extra training
text (sentences.glosses()), the per-speaker plan with and without them (synth.assignments()) and,
where festival and espeak-ng are installed, a tiny synthesis with --gloss-per-speaker (a few
seconds).

    python3 tools/corpus/test_corpus.py
"""

import json
import os
import re
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import sentences  # noqa: E402
import speakers  # noqa: E402
import synth  # noqa: E402

HAVE_WORDNET = os.path.exists(os.path.join(sentences.DEFAULT_WORDNET, "data.noun"))
HAVE_SYNTH = HAVE_WORDNET and bool(shutil.which("festival")) and bool(shutil.which("espeak-ng"))
GLOSS_TEXT = re.compile(r"[A-Z][a-z ,'\-]*[a-z]\.")


@unittest.skipUnless(HAVE_WORDNET, "WordNet (wordnet-base) is not installed")
class Glosses(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.glosses = sentences.glosses()

    def test_glosses_follow_the_rules(self):
        self.assertGreater(len(self.glosses), 50000)
        self.assertEqual(self.glosses, sorted(self.glosses))
        ids = [i for i, _ in self.glosses]
        self.assertEqual(len(ids), len(set(ids)))
        for i, text in self.glosses:
            self.assertEqual(i, sentences.sentence_id(text))
            self.assertRegex(text, GLOSS_TEXT)
            self.assertTrue(4 <= len(text.split()) <= 14, text)
            self.assertNotIn('"', text)

    def test_no_gloss_is_held_out_or_an_example_sentence(self):
        heldout = set(sentences.read_ids(sentences.HELDOUT_FILE))
        self.assertEqual(len(heldout), sentences.HELDOUT_COUNT)
        examples = sentences.extract(sentences.DEFAULT_WORDNET)
        example_ids, example_texts = {i for i, _ in examples}, {t for _, t in examples}
        for i, text in self.glosses:
            self.assertNotIn(i, heldout)
            self.assertNotIn(i, example_ids)
            self.assertNotIn(text, example_texts)

    def test_glosses_are_deterministic(self):
        self.assertEqual(sentences.glosses(sentences.DEFAULT_WORDNET), self.glosses)


@unittest.skipUnless(HAVE_WORDNET, "WordNet (wordnet-base) is not installed")
class Plan(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.train, cls.heldout = sentences.load()
        cls.glosses = sentences.glosses()
        cls.speakers = speakers.by_id(["festival-kal-a", "espeak-klatt-a", "espeak-klatt2-b"])

    def plan(self, **kwargs):
        return synth.assignments(self.speakers, self.train, self.heldout, 30, 5, **kwargs)

    def test_no_glosses_leaves_the_plan_unchanged(self):
        old = self.plan()
        self.assertEqual(self.plan(glosses=self.glosses, gloss_per_speaker=0), old)
        self.assertEqual(self.plan(glosses=self.glosses), old)
        self.assertEqual({sp for _, items in old for _, _, sp in items}, {"train", "heldout"})

    def test_gloss_items_come_last_with_split_gloss_in_keyed_order(self):
        old = self.plan()
        new = self.plan(glosses=self.glosses, gloss_per_speaker=7)
        texts = dict(self.glosses)
        for (s, before), (s2, after) in zip(old, new):
            self.assertEqual(s, s2)
            self.assertEqual(after[:len(before)], before)  # train and heldout items untouched
            added = after[len(before):]
            self.assertEqual(len(added), 7)
            self.assertEqual({sp for _, _, sp in added}, {"gloss"})
            self.assertEqual([(i, t) for i, t, _ in added],
                             synth.keyed_order(s["id"], self.glosses)[:7])
            for i, t, _ in added:
                self.assertEqual(texts[i], t)
        # Each speaker its own glosses.
        firsts = [[i for i, _, sp in items if sp == "gloss"] for _, items in new]
        self.assertEqual(len({tuple(f) for f in firsts}), len(firsts))

    def test_a_gloss_id_equal_to_a_sentence_id_is_refused(self):
        clash = [(self.train[0][0], "Some other text.")]
        with self.assertRaises(ValueError):
            self.plan(glosses=clash, gloss_per_speaker=1)


@unittest.skipUnless(HAVE_SYNTH, "festival, espeak-ng or WordNet is not installed")
class Synthesis(unittest.TestCase):
    SPEAKERS = "festival-kal-a,espeak-klatt-a"

    def run_synth(self, out, glosses):
        argv = ["--out", out, "--speakers", self.SPEAKERS, "--train-per-speaker", "1",
                "--heldout-per-speaker", "1", "--jobs", "2"]
        self.assertEqual(synth.main(argv + (["--gloss-per-speaker", str(glosses)] if glosses else [])), 0)
        with open(os.path.join(out, "corpus.tsv")) as f:
            tsv = f.read()
        with open(os.path.join(out, "corpus.json")) as f:
            return tsv, json.load(f)

    def test_glosses_add_utterances_and_leave_the_rest_alone(self):
        with tempfile.TemporaryDirectory() as out:
            tsv0, json0 = self.run_synth(out, 0)
            self.assertNotIn("gloss_per_speaker", json0)
            self.assertEqual(json0["synthesized_now"], 4)
            tsv2, json2 = self.run_synth(out, 2)  # resumes: only the 4 glosses are new
            self.assertEqual(json2["synthesized_now"], 4)
            self.assertEqual(json2["gloss_per_speaker"], 2)
            self.assertIn("gloss", json2["text"])
            self.assertEqual(json2["utterances"], 8)
            rows = [line.split("\t") for line in tsv2.splitlines()[1:]]
            kept = [r for r in rows if r[2] != "gloss"]
            self.assertEqual(kept, [line.split("\t") for line in tsv0.splitlines()[1:]])
            gloss = [r for r in rows if r[2] == "gloss"]
            self.assertEqual(len(gloss), 4)
            texts = dict(sentences.glosses())
            for speaker, i, _, seconds, path, text in gloss:
                self.assertEqual(texts[i], text)
                self.assertEqual(path, f"wav/{speaker}/{i}.wav")
                self.assertGreater(float(seconds), 0.5)
            # Without the option again: corpus.tsv byte for byte as the first time, corpus.json
            # too but for the count synthesized now.
            tsv0b, json0b = self.run_synth(out, 0)
            self.assertEqual(tsv0b, tsv0)
            self.assertEqual(json0b["synthesized_now"], 0)
            json0b["synthesized_now"] = json0["synthesized_now"]
            self.assertEqual(json0b, json0)


if __name__ == "__main__":
    unittest.main()
