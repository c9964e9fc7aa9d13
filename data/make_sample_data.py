"""Regenerates the bundled demo data from the King James Bible (public domain).

Run from the repository root with the full text (one verse per line) at hand:
  xz -dc kjv.txt.xz > /tmp/kjv.txt && python data/make_sample_data.py /tmp/kjv.txt

Writes
  data/sample_text.txt     a small pretraining text (2,250 verses: the serving benchmark's
                           texts): one verse per line, a blank line between "documents" of
                           25 verses (create_pretraining_data's format)
  data/testament/*.tsv     a sentence-classification task in the GLUE SST-2 layout:
                           is a verse from the Old (0) or the New (1) Testament?
  data/kjv/train.txt.xz    the demo's pretraining text: the verses not in the task, in documents of
  data/kjv/heldout.txt.xz  25 consecutive verses, every 10th document held out (xz-compressed)
  data/kjv/vocab.txt       a WordPiece vocab learned from kjv/train (make_vocab.py's WordPiece)
Verses in the classification task are disjoint from the pretraining texts.
"""

import lzma
import os
import random
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from realformer_tf.data.vocab_learning import learn_wordpiece  # noqa: E402 (run from a clone)

FIRST_NEW_TESTAMENT_LINE = 23146  # Matthew 1:1 in the one-verse-per-line text
# Some books' verses start with a reference ("1Sm1:1 ", "2Cor4:5 "): drop it, it would
# give the answer away.
REFERENCE = re.compile(r"^[0-9]?[A-Za-z]+[0-9]+:[0-9]+\s+")


def main(path, out_dir=os.path.dirname(os.path.abspath(__file__))):
    with open(path, encoding="utf-8") as f:
        verses = [REFERENCE.sub("", line.strip()) for line in f if line.strip()]
    labeled = [(v, int(i + 1 >= FIRST_NEW_TESTAMENT_LINE)) for i, v in enumerate(verses)]
    rng = random.Random(12345)
    # Pretraining text: contiguous runs of verses (so "next sentence" is meaningful).
    starts = sorted(rng.sample(range(0, len(labeled) - 25, 25), 90))
    used = set()
    documents = []
    for s in starts:
        documents.append([labeled[i][0] for i in range(s, s + 25)])
        used.update(range(s, s + 25))
    with open(os.path.join(out_dir, "sample_text.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(doc) for doc in documents) + "\n")

    classified = write_classification_task(labeled, used, rng, out_dir)
    write_demo_corpus([v for i, (v, _) in enumerate(labeled) if i not in classified], out_dir)


def write_classification_task(labeled, used, rng, out_dir):
    """Writes data/testament/; returns the indices of the verses it holds."""
    classified = set()
    # Classification: balanced, short verses, disjoint from the pretraining text.
    pool = [i for i in range(len(labeled)) if i not in used and len(labeled[i][0]) < 160]
    old = [i for i in pool if labeled[i][1] == 0]
    new = [i for i in pool if labeled[i][1] == 1]
    rng.shuffle(old)
    rng.shuffle(new)
    sizes = {"train": 400, "dev": 100, "test": 50}
    task_dir = os.path.join(out_dir, "testament")
    os.makedirs(task_dir, exist_ok=True)
    for split, n in sizes.items():
        classified.update(old[:n] + new[:n])
        rows = [labeled[i] for i in old[:n] + new[:n]]
        old, new = old[n:], new[n:]
        rng.shuffle(rows)
        with open(os.path.join(task_dir, f"{split}.tsv"), "w", encoding="utf-8") as f:
            if split == "test":
                f.write("index\tsentence\n")
                f.writelines(f"{k}\t{text}\n" for k, (text, _) in enumerate(rows))
            else:
                f.write("sentence\tlabel\n")
                f.writelines(f"{text}\t{label}\n" for text, label in rows)
        if split == "test":  # the demo scores its predictions against these
            with open(os.path.join(task_dir, "test_labels.txt"), "w") as f:
                f.writelines(f"{label}\n" for _, label in rows)
    return classified


def write_demo_corpus(verses, out_dir, verses_per_document=25, held_out_every=10):
    """The demo's pretraining text (see the module's docstring): enough text that a tiny
    model learns to use context in a few thousand steps instead of memorizing."""
    documents = ["\n".join(verses[s:s + verses_per_document]) for s in range(0, len(verses), verses_per_document)]
    kjv_dir = os.path.join(out_dir, "kjv")
    os.makedirs(kjv_dir, exist_ok=True)
    splits = {"train": [d for k, d in enumerate(documents) if k % held_out_every != held_out_every - 1],
              "heldout": [d for k, d in enumerate(documents) if k % held_out_every == held_out_every - 1]}
    for name, docs in splits.items():
        with lzma.open(os.path.join(kjv_dir, f"{name}.txt.xz"), "wt", encoding="utf-8", preset=9) as f:
            f.write("\n\n".join(docs) + "\n")
    train_text = os.path.join(kjv_dir, "train.txt")
    with open(train_text, "w", encoding="utf-8") as f:
        f.write("\n\n".join(splits["train"]) + "\n")
    try:
        vocab = learn_wordpiece([train_text], vocab_size=4000).tokens
    finally:
        os.remove(train_text)
    with open(os.path.join(kjv_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
