"""The check anyone can run that tessera's model writes English: the share of
words in its 200-token sampled continuation (models/*/eval.json, written by
train.py) that /usr/share/dict/words (Debian wamerican) knows. Target: >= 80 %.

  /usr/bin/python3 tools/train_model/check_words.py models/tessera-tiny
"""
import json
import re
import sys


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else "models/tessera-tiny"
    words = {w.strip().lower() for w in open("/usr/share/dict/words", encoding="utf-8")}
    text = json.load(open(f"{model_dir}/eval.json"))["sampled_200"]["text"]
    found = [w.lower() for w in re.findall(r"[A-Za-z]+(?:'[a-z]+)?", text)]
    known = [w for w in found if w in words]
    share = len(known) / len(found)
    print(f"{len(known)} of {len(found)} words are dictionary words: {100 * share:.1f} %")
    print("not in the dictionary:", sorted(set(found) - set(known)))
    sys.exit(0 if share >= 0.8 else 1)


if __name__ == "__main__":
    main()
