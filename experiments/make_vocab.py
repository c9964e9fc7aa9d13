"""Learns a small WordPiece vocab from a text file with tensorflow-text's vocab tool
(`bert_vocab_from_dataset`, the same algorithm BERT's vocab was built with), so CPU-scale
studies spend their time in the encoder instead of a 30k-way output layer.

  python experiments/make_vocab.py --vocab_size=4000 kjv_sentences.txt > kjv_vocab.txt

The special tokens come first ([PAD] is id 0, as create_pretraining_data.py expects);
text is lower-cased, so use --do_lower_case=True downstream.
"""

import argparse
import sys

RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def learn_vocab(path, vocab_size):
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bert_vocab

    lines = tf.data.TextLineDataset(path).filter(lambda line: tf.strings.length(line) > 0)
    return bert_vocab.bert_vocab_from_dataset(
        lines.batch(1000).prefetch(2), vocab_size=vocab_size, reserved_tokens=RESERVED,
        bert_tokenizer_params=dict(lower_case=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab_size", type=int, default=4000, help="target size (approximate)")
    parser.add_argument("path", help="text, one sentence per line")
    args = parser.parse_args()
    if args.vocab_size < 100:
        sys.exit(f"make_vocab.py: --vocab_size={args.vocab_size} is too small; use 100 or more")
    vocab = learn_vocab(args.path, args.vocab_size)
    sys.stdout.write("\n".join(vocab) + "\n")
    print(f"make_vocab.py: {len(vocab)} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
