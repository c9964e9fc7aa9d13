"""WordPiece vocabulary checks shared by the data scripts."""

import tensorflow as tf

from realformer_tf.errors import InputError

REQUIRED_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")


def check_vocab(vocab_file, required=REQUIRED_TOKENS):
    """Reads a BERT vocab (one token per line) and checks the special tokens; returns
    the token list."""
    if not vocab_file:
        raise InputError("--vocab_file is required")
    if not tf.io.gfile.exists(vocab_file):
        raise InputError(f"--vocab_file {vocab_file} does not exist")
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        raw = f.read()
    try:
        tokens = [line.strip() for line in raw.decode("utf-8").splitlines()]
    except UnicodeDecodeError as e:
        raise InputError(f"--vocab_file {vocab_file} is not UTF-8 ({e})") from None
    missing = [t for t in required if t not in tokens]
    if missing:
        raise InputError(
            f"--vocab_file {vocab_file} lacks the special token(s) {', '.join(missing)}; "
            "use a BERT WordPiece vocab"
        )
    return tokens
