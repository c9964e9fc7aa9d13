"""Turns raw text into create_pretraining_data's format: one sentence per line, a blank
line between documents.

  python experiments/prepare_corpus.py --kind=kjv kjv.txt > kjv_sentences.txt
  python experiments/prepare_corpus.py --kind=prose docs.rst > docs_sentences.txt

kjv: one verse per line; a document is a run of 30 verses. prose: paragraphs separated
by blank lines are split into sentences; markup-only lines are dropped; a document is a
run of 20 paragraphs.
"""

import argparse
import re
import sys

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
MARKUP = re.compile(r"^\s*([.:=\-~^*#`]{3,}|\.\. |:[a-z]+:|>>>|\$ )")


def kjv_documents(lines, verses_per_document=30):
    verses = [re.sub(r"^[0-9]?[A-Za-z]+[0-9]+:[0-9]+\s+", "", l.strip()) for l in lines if l.strip()]
    for start in range(0, len(verses), verses_per_document):
        yield verses[start:start + verses_per_document]


def prose_documents(lines, paragraphs_per_document=20):
    paragraphs, current = [], []
    for line in lines:
        if not line.strip():
            if current:
                paragraphs.append(" ".join(current))
                current = []
        elif not MARKUP.match(line):
            current.append(line.strip())
    if current:
        paragraphs.append(" ".join(current))
    sentences = [[s for s in SENTENCE_END.split(p) if len(s.split()) >= 3] for p in paragraphs]
    sentences = [s for s in sentences if s]
    for start in range(0, len(sentences), paragraphs_per_document):
        yield [s for p in sentences[start:start + paragraphs_per_document] for s in p]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("kjv", "prose"), required=True)
    parser.add_argument("--max_documents", type=int, default=0)
    parser.add_argument("path")
    args = parser.parse_args()
    with open(args.path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    documents = (kjv_documents if args.kind == "kjv" else prose_documents)(lines)
    for i, doc in enumerate(documents):
        if args.max_documents and i >= args.max_documents:
            break
        sys.stdout.write("\n".join(doc) + "\n\n")


if __name__ == "__main__":
    main()
