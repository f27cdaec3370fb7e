"""English sentences for the corpus: the example sentences of WordNet 3.0 (Debian package
wordnet-base, Princeton's WordNet 3.0 license: free to use, copy, modify and distribute with the
copyright notice; /usr/share/doc/wordnet-base/copyright).

Every quoted example in the glosses of data.{adj,adv,noun,verb} that starts with a capital
letter, holds 5 to 14 words of letters (plus , ' -), no word with two capitals (acronyms a
recogniser cannot score), is kept once. A sentence's id is the first 10 hex digits of the SHA-256
of its text. Split: the 300 sentences with the smallest ids are held out for evaluation and never
trained on; heldout-ids.txt (committed) lists them, and load() checks the split against it.

    python3 tools/corpus/sentences.py [--wordnet DIR] [--write-heldout]   prints counts
"""

import argparse
import hashlib
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HELDOUT_FILE = os.path.join(HERE, "heldout-ids.txt")
HELDOUT_COUNT = 300
DEFAULT_WORDNET = "/usr/share/wordnet"

_SENTENCE = re.compile(r"[A-Z][A-Za-z ,'\-]*[a-z][.!?]?")
_QUOTED = re.compile(r'"([^"]*)"')


def sentence_id(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def extract(wordnet_dir):
    """Sorted list of (id, text) of every usable example sentence."""
    seen = {}
    for part in ("adj", "adv", "noun", "verb"):
        path = os.path.join(wordnet_dir, "data." + part)
        with open(path, encoding="latin-1") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue  # the license header, or a line without a gloss
                for quoted in _QUOTED.findall(line.split("|", 1)[1]):
                    text = " ".join(quoted.split())
                    words = text.split()
                    if not _SENTENCE.fullmatch(text) or not 5 <= len(words) <= 14:
                        continue
                    if "--" in text or any(sum(c.isupper() for c in w) > 1 for w in words):
                        continue
                    seen[sentence_id(text)] = text
    return sorted(seen.items())


def split(sentences):
    """(train, heldout): lists of (id, text); held out = the 300 smallest ids."""
    return sentences[HELDOUT_COUNT:], sentences[:HELDOUT_COUNT]


def load(wordnet_dir=DEFAULT_WORDNET):
    """(train, heldout), checked against the committed heldout-ids.txt."""
    train, heldout = split(extract(wordnet_dir))
    with open(HELDOUT_FILE) as f:
        committed = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    if committed != [i for i, _ in heldout]:
        raise ValueError(f"{wordnet_dir}: the held-out sentences differ from {HELDOUT_FILE} "
                         "(another WordNet version?)")
    return train, heldout


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wordnet", default=DEFAULT_WORDNET, help="folder holding data.noun etc.")
    p.add_argument("--write-heldout", action="store_true", help="(re)write heldout-ids.txt")
    args = p.parse_args(argv)
    if args.write_heldout:
        _, heldout = split(extract(args.wordnet))
        with open(HELDOUT_FILE, "w") as f:
            f.write("# Held-out sentence ids (tools/corpus/sentences.py): never trained on.\n")
            f.writelines(i + "\n" for i, _ in heldout)
    train, heldout = load(args.wordnet)
    print(f"{len(train)} training sentences, {len(heldout)} held out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
