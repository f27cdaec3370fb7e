"""English sentences for the corpus: the example sentences of WordNet 3.0 (Debian package
wordnet-base, Princeton's WordNet 3.0 license: free to use, copy, modify and distribute with the
copyright notice; /usr/share/doc/wordnet-base/copyright).

Every quoted example in the glosses of data.{adj,adv,noun,verb} that starts with a capital
letter, holds 5 to 14 words of letters (plus , ' -), no word with two capitals (acronyms a
recogniser cannot score), is kept once. A sentence's id is the first 10 hex digits of the SHA-256
of its text. Sentences with a word missing from pocketsphinx's dictionary (Debian
pocketsphinx-en-us 0.8+5prealpha+1-15, cmudict-en-us.dict; words normalised as tools/eval/asr.py
scores them) are dropped: their ids are committed in oov-ids.txt (with the dictionary's SHA-256),
so machines without pocketsphinx drop the same ones; --dict DICT checks or (with --write-heldout)
rewrites that list. Split: of the rest, the 300 sentences with the smallest ids are held out for
evaluation and never trained on; heldout-ids.txt (committed) lists them, and load() checks the
split against it.

Glosses (glosses()): extra training text for the model stage, under the same WordNet 3.0
license. Of every synset's gloss (the text after "|"), the first ";"-separated segment, stripped,
is kept when it holds no double quote, has 4 to 14 words and is only lower-case letters, spaces,
commas, apostrophes and hyphens (starting and ending with a letter); its text is that segment
with the first letter upper-cased and a "." appended, its id the SHA-256 prefix as for sentences.
Kept once; any whose id is held out, or whose text equals an example sentence, is dropped (so no
held-out text is ever trained on). About 60000. No dictionary filter: they are never scored.

    python3 tools/corpus/sentences.py [--wordnet DIR] [--dict DICT] [--write-heldout]
"""

import argparse
import hashlib
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HELDOUT_FILE = os.path.join(HERE, "heldout-ids.txt")
OOV_FILE = os.path.join(HERE, "oov-ids.txt")
HELDOUT_COUNT = 300
DEFAULT_WORDNET = "/usr/share/wordnet"
DEFAULT_DICT = "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict"

_SENTENCE = re.compile(r"[A-Z][A-Za-z ,'\-]*[a-z][.!?]?")
_QUOTED = re.compile(r'"([^"]*)"')
_GLOSS = re.compile(r"[a-z][a-z ,'\-]*[a-z]")


def sentence_id(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def _gloss_parts(wordnet_dir):
    """The gloss (text after "|") of every synset line of data.{adj,adv,noun,verb}."""
    for part in ("adj", "adv", "noun", "verb"):
        path = os.path.join(wordnet_dir, "data." + part)
        with open(path, encoding="latin-1") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue  # the license header, or a line without a gloss
                yield line.split("|", 1)[1]


def extract(wordnet_dir):
    """Sorted list of (id, text) of every usable example sentence."""
    seen = {}
    for gloss in _gloss_parts(wordnet_dir):
        for quoted in _QUOTED.findall(gloss):
            text = " ".join(quoted.split())
            words = text.split()
            if not _SENTENCE.fullmatch(text) or not 5 <= len(words) <= 14:
                continue
            if "--" in text or any(sum(c.isupper() for c in w) > 1 for w in words):
                continue
            seen[sentence_id(text)] = text
    return sorted(seen.items())


def glosses(wordnet_dir=DEFAULT_WORDNET):
    """Sorted list of (id, text) of the gloss definitions kept as extra training text (module
    docstring); none is held out or equal to an example sentence."""
    heldout = set(read_ids(HELDOUT_FILE))
    examples = {t for _, t in extract(wordnet_dir)}
    seen = {}
    for gloss in _gloss_parts(wordnet_dir):
        first = gloss.split(";", 1)[0].strip()
        if '"' in first or not 4 <= len(first.split()) <= 14 or not _GLOSS.fullmatch(first):
            continue
        text = first[0].upper() + first[1:] + "."
        i = sentence_id(text)
        if i not in heldout and text not in examples:
            seen[i] = text
    return sorted(seen.items())


def normalize(text):
    """Words as tools/eval/asr.py scores them: lower case, hyphens to spaces, only letters,
    digits and apostrophes."""
    return re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " ")).split()


def dictionary_words(path):
    """The words of a pocketsphinx dictionary (alternates like word(2) folded)."""
    words = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                words.add(re.sub(r"\(\d+\)$", "", line.split(None, 1)[0]))
    return words


def oov_ids(sentences, dict_path):
    """Ids of the sentences with a word missing from the dictionary at dict_path."""
    words = dictionary_words(dict_path)
    return [i for i, t in sentences if any(w not in words for w in normalize(t))]


def read_ids(path):
    with open(path) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def in_dictionary(sentences):
    """The sentences whose words are all in pocketsphinx's dictionary (committed oov-ids.txt)."""
    drop = set(read_ids(OOV_FILE))
    return [(i, t) for i, t in sentences if i not in drop]


def split(sentences):
    """(train, heldout): lists of (id, text); held out = the 300 smallest ids."""
    return sentences[HELDOUT_COUNT:], sentences[:HELDOUT_COUNT]


def load(wordnet_dir=DEFAULT_WORDNET):
    """(train, heldout), checked against the committed heldout-ids.txt."""
    train, heldout = split(in_dictionary(extract(wordnet_dir)))
    if read_ids(HELDOUT_FILE) != [i for i, _ in heldout]:
        raise ValueError(f"{wordnet_dir}: the held-out sentences differ from {HELDOUT_FILE} "
                         "(another WordNet version?)")
    return train, heldout


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wordnet", default=DEFAULT_WORDNET, help="folder holding data.noun etc.")
    p.add_argument("--dict", help="pocketsphinx dictionary to check oov-ids.txt against "
                   f"(or rewrite it from, with --write-heldout); e.g. {DEFAULT_DICT}")
    p.add_argument("--write-heldout", action="store_true",
                   help="(re)write heldout-ids.txt (and oov-ids.txt, with --dict)")
    args = p.parse_args(argv)
    everything = extract(args.wordnet)
    if args.dict:
        with open(args.dict, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        found = oov_ids(everything, args.dict)
        if args.write_heldout:
            with open(OOV_FILE, "w") as f:
                f.write("# Ids of WordNet example sentences with a word missing from pocketsphinx's\n"
                        "# cmudict-en-us.dict (tools/corpus/sentences.py): left out of the corpus.\n"
                        f"# dictionary sha256 {digest}\n")
                f.writelines(i + "\n" for i in found)
        elif found != read_ids(OOV_FILE):
            print(f"{args.dict} (sha256 {digest}) drops other sentences than {OOV_FILE}")
            return 1
        print(f"{len(found)} of {len(everything)} sentences have a word missing from {args.dict}")
    if args.write_heldout:
        _, heldout = split(in_dictionary(everything))
        with open(HELDOUT_FILE, "w") as f:
            f.write("# Held-out sentence ids (tools/corpus/sentences.py): never trained on.\n")
            f.writelines(i + "\n" for i, _ in heldout)
    train, heldout = load(args.wordnet)
    print(f"{len(train)} training sentences, {len(heldout)} held out, "
          f"{len(glosses(args.wordnet))} glosses (extra training text)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
