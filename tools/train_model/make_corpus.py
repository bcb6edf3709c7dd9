"""Builds the training corpus of tessera's own small model from public-domain and
free English text in Debian packages, on the dev machine:

  r-cran-janeaustenr   the six Jane Austen novels (public domain; read by austen.py)
  bible-kjv(-text)     the King James Bible, dumped with the `bible` program (GPL-2+ package, public-domain text)
  fortunes             fortune cookies (BSD-licensed collection)
  dict-devil           Ambrose Bierce, The Devil's Dictionary (public domain)
  dict-gcide           GCIDE, from Webster's 1913 (GPL-3+), first 6 MB, citation markers and headword lines dropped
  wordnet-base         WordNet 3.0 glosses and example sentences, every other block (WordNet license)

Held-out split (documented in models/*/README.md): every source is cut into
paragraphs (blank-line separated); paragraph i goes to held-out when i % 50 == 7,
so held-out text is spread over every source and never seen in training.

Writes OUT/train.txt and OUT/heldout.txt (documents separated by a line holding
only <|end_of_text|>), then xz-compresses both for the trip to the GPU machine.
  /usr/bin/python3 tools/train_model/make_corpus.py --out .corpus
"""
import argparse
import glob
import gzip
import lzma
import os
import re
import subprocess

import austen

SEPARATOR = "\n<|end_of_text|>\n"


def kjv():
    out = subprocess.run(["bible", "-f", "Genesis1:1-Revelation22:21"], capture_output=True, text=True, check=True)
    verses = [re.sub(r"^\S+\d+:\d+ ", "", line) for line in out.stdout.splitlines() if line.strip()]
    return [" ".join(verses[i:i + 8]) for i in range(0, len(verses), 8)]


def fortunes():
    docs = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith((".dat", ".u8")) or os.path.islink(path) or os.path.isdir(path):
            continue
        docs += [f.strip() for f in open(path, encoding="utf-8", errors="replace").read().split("\n%\n")]
    return docs


def dictd(name, max_chars):
    text = gzip.open(f"/usr/share/dictd/{name}.dict.dz").read().decode("utf-8", errors="replace")
    text = re.sub(r"\[1913 Webster\]|\[WordNet 1\.5\]|\[PJC\]", "", text)
    text = "\n".join(line for line in text.splitlines() if "\\" not in line and "{" not in line)
    paragraphs = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    out, total = [], 0
    for p in paragraphs:
        if len(p) > 40 and total < max_chars:
            out.append(p)
            total += len(p)
    return out


def wordnet():
    docs = []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in open(f"/usr/share/wordnet/data.{pos}", encoding="latin-1"):
            if "|" in line and not line.startswith("  "):
                gloss = line.split("|", 1)[1].strip()
                docs.append(gloss[0].upper() + gloss[1:] + ("" if gloss.endswith(".") else "."))
    paragraphs = [" ".join(docs[i:i + 6]) for i in range(0, len(docs), 6)]
    return paragraphs[::2]  # every other paragraph: about 4.5 MB, so novels and scripture dominate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".corpus")
    args = ap.parse_args()
    sources = {name: re.split(r"\n\s*\n", text) for name, text in austen.novels().items()}
    sources.update({"kjv": kjv(), "fortunes": fortunes(),
                    "devil": dictd("devil", 10**7), "gcide": dictd("gcide", 6 * 10**6), "wordnet": wordnet()})
    train, held = [], []
    for name, paragraphs in sources.items():
        paragraphs = [p.strip() for p in paragraphs if p.strip()]
        for i, p in enumerate(paragraphs):
            (held if i % 50 == 7 else train).append(p)
        print(f"{name:18s} {len(paragraphs):7d} paragraphs {sum(map(len, paragraphs)) / 1e6:6.2f} MB")
    os.makedirs(args.out, exist_ok=True)
    for split, docs in (("train", train), ("heldout", held)):
        text = SEPARATOR.join(docs) + "\n"
        with lzma.open(os.path.join(args.out, f"{split}.txt.xz"), "wt", encoding="utf-8") as f:
            f.write(text)
        print(f"{split}: {len(docs)} paragraphs, {len(text) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
