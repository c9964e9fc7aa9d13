"""Learning a vocab from raw text: WordPiece (tensorflow-text's `bert_vocab_from_dataset`,
the algorithm BERT's own vocab was built with) or SentencePiece (the `sentencepiece`
library, unigram or BPE). `make_vocab.py` (realformer_tf/app/make_vocab.py) is the program.

A small corpus cannot give every size asked for: WordPiece keeps only subwords that occur
at least `min_count` times, and SentencePiece refuses a size above what its text allows.
Both come back as one line a user can act on (`VocabNote` for a vocab smaller than asked,
InputError for a size SentencePiece cannot make).
"""

import dataclasses
import os
import re
import tempfile

from realformer_tf.errors import InputError
from realformer_tf.fileio import atomic_output, commit, gfile, temporary_name

# WordPiece: BERT's special tokens first, [PAD] as id 0 (what create_pretraining_data expects).
WORDPIECE_RESERVED = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# tensorflow-text's default lower count threshold (`learn(lower_thresh=10)`).
DEFAULT_MIN_COUNT = 10
# tensorflow-text accepts a vocab within 5% below the target (`learn(slack_ratio=0.05)`).
_WORDPIECE_SLACK = 0.05
# SentencePiece's special pieces: padding as id 0, as for the WordPiece vocabs.
SENTENCEPIECE_IDS = dict(pad_id=0, unk_id=1, bos_id=2, eos_id=3)
SENTENCEPIECE_MODEL_TYPES = ("unigram", "bpe")
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


@dataclasses.dataclass
class Vocab:
    """A learned vocab: its tokens (in id order) and, when smaller than asked, why."""

    tokens: list
    note: str = ""


def learn_wordpiece(files, vocab_size, lower_case=True, min_count=DEFAULT_MIN_COUNT):
    """A WordPiece vocab of at most about `vocab_size` tokens from the text `files` (one
    sentence a line; blank lines are skipped). `note` says when the text supports fewer
    tokens at `min_count` (tensorflow-text then returns what it has without a word)."""
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bert_vocab

    lines = tf.data.TextLineDataset(list(files)).filter(lambda line: tf.strings.length(tf.strings.strip(line)) > 0)
    tokens = bert_vocab.bert_vocab_from_dataset(
        lines.batch(1000).prefetch(2), vocab_size=vocab_size, reserved_tokens=list(WORDPIECE_RESERVED),
        bert_tokenizer_params=dict(lower_case=lower_case), learn_params=dict(lower_thresh=min_count))
    return Vocab(list(tokens), wordpiece_note(len(tokens), vocab_size, min_count))


def wordpiece_note(size, vocab_size, min_count):
    """The line for a WordPiece vocab of `size` tokens learned for `vocab_size` ("" when
    it is what was asked)."""
    if size > vocab_size:
        # tensorflow-text's search over count thresholds ran out between a vocab too large
        # and one more than 5% too small, and returns the larger.
        return (f"the text gives {size} tokens for --vocab_size={vocab_size}: no count threshold gives a size "
                "within 5% below it; give another --vocab_size if the exact size matters")
    if size >= vocab_size * (1 - _WORDPIECE_SLACK):
        return ""
    lower = "" if min_count <= 1 else f", or a lower --min_count (e.g. --min_count={max(1, min_count // 5)})"
    return (f"the text supports only {size} tokens at --min_count={min_count} (a subword must occur at "
            f"least {min_count} times), not --vocab_size={vocab_size}; rare words are split into "
            f"characters: give more text{lower}")


def learn_sentencepiece(files, vocab_size, lower_case=True, model_type="unigram"):
    """A SentencePiece model of exactly `vocab_size` pieces from the text `files`; returns
    (model bytes, vocab file text: "piece<TAB>score" lines, as spm_train writes).

    Raises InputError when the text cannot give that many pieces (saying the largest it
    can) or fewer than its characters need.
    """
    import sentencepiece as spm

    rule = "nmt_nfkc_cf" if lower_case else "nmt_nfkc"  # case folding inside the model
    with tempfile.TemporaryDirectory() as work:
        prefix = os.path.join(work, "spm")
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=_lines(files), model_prefix=prefix, vocab_size=vocab_size,
                model_type=model_type, normalization_rule_name=rule, minloglevel=2, **SENTENCEPIECE_IDS)
        except RuntimeError as e:
            raise InputError(sentencepiece_error(str(e), vocab_size)) from None
        with open(prefix + ".model", "rb") as f:
            model = f.read()
        with open(prefix + ".vocab", encoding="utf-8") as f:
            vocab = f.read()
    return model, vocab


def sentencepiece_error(message, vocab_size):
    """SentencePiece's training error as one line that says what to change."""
    too_high = _TOO_HIGH.search(message)
    if too_high:
        return (f"--vocab_size={vocab_size} is more than this text supports: SentencePiece can make at "
                f"most {too_high.group(2)} pieces from it; give --vocab_size={too_high.group(2)} or less, "
                "or more text")
    too_small = _TOO_SMALL.search(message)
    if too_small:
        return (f"--vocab_size={vocab_size} is less than the {too_small.group(2)} pieces the text's "
                "characters and the special pieces need; give a larger --vocab_size")
    return f"SentencePiece could not learn a vocab from the text: {message.splitlines()[0]}"


def _lines(files):
    """The non-blank lines of `files` (read through tf.io.gfile: gs:// too)."""
    for path in files:
        with gfile().GFile(path, "r") as f:
            for line in f:
                if line.strip():
                    yield line.rstrip("\n")


def write_wordpiece(tokens, path):
    """One token a line, written atomically."""
    with atomic_output(path) as f:
        f.write("\n".join(tokens) + "\n")


def write_sentencepiece(model, vocab, prefix):
    """PREFIX.model and PREFIX.vocab, each complete or absent; returns their paths."""
    paths = (prefix + ".model", prefix + ".vocab")
    temporaries = [temporary_name(p) for p in paths]
    try:
        for temporary, data, mode in zip(temporaries, (model, vocab), ("wb", "w")):
            with gfile().GFile(temporary, mode) as f:
                f.write(data)
        for temporary, path in zip(temporaries, paths):
            commit(temporary, path)
    finally:
        for temporary in temporaries:
            if gfile().exists(temporary):
                gfile().remove(temporary)
    return paths
