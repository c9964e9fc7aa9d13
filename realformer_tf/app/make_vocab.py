"""Learns a vocab from raw text (one sentence per line; blank lines are skipped): a
WordPiece vocab.txt for BERT and its variants, or a SentencePiece model.

  python make_vocab.py --input_file=corpus.txt --output_file=vocab.txt --vocab_size=8000
  # SentencePiece: writes spm.model and spm.vocab
  python make_vocab.py --input_file='corpus/*.txt' --vocab_type=sentencepiece --vocab_size=8000 --output_file=spm

WordPiece is tensorflow-text's `bert_vocab_from_dataset` (the algorithm BERT's vocab was
built with): the special tokens come first ([PAD] is id 0, then [UNK], [CLS], [SEP],
[MASK]), and a subword is kept only if it occurs at least --min_count times. SentencePiece
is the `sentencepiece` library (unigram or BPE), with <pad> 0, <unk> 1, <s> 2, </s> 3; the
model file loads in tensorflow-text's SentencepieceTokenizer and gives the same ids.
--do_lower_case lower-cases the text (SentencePiece: case folding inside the model, so it
applies when the model tokenizes too); use the same value downstream.

A text too small for --vocab_size: WordPiece writes the smaller vocab and says so in one
`warning:` line (more text, or a lower --min_count); SentencePiece cannot, and stops with
one `error:` line naming the largest size the text supports.
"""

import sys

from absl import flags

from realformer_tf import app
from realformer_tf.data import vocab_learning
from realformer_tf.data.records import expand_input_files
from realformer_tf.data.text_files import check_text_files
from realformer_tf.errors import UsageError, require
from realformer_tf.jobs import outputs

VOCAB_TYPES = ("wordpiece", "sentencepiece")


def define_flags(fv):
    """The program's flags on the FlagValues `fv`."""
    flags.DEFINE_string("input_file", None, "Raw text, one sentence per line: a file, a glob or a "
                        "comma-separated list of them.", flag_values=fv)
    flags.DEFINE_string("output_file", None, "WordPiece: the vocab file to write (e.g. vocab.txt). "
                        "SentencePiece: a prefix; PREFIX.model and PREFIX.vocab are written.", flag_values=fv)
    flags.DEFINE_enum("vocab_type", "wordpiece", VOCAB_TYPES, "wordpiece (BERT's vocab.txt) or sentencepiece.",
                      flag_values=fv)
    flags.DEFINE_integer("vocab_size", None, "Tokens to learn, special tokens included (WordPiece: at "
                         "most, within 5%; SentencePiece: exactly).", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (True for uncased models).", flag_values=fv)
    flags.DEFINE_integer("min_count", vocab_learning.DEFAULT_MIN_COUNT, "WordPiece: a subword is kept only "
                         "if it occurs at least this often (lower it for a small text).", flag_values=fv)
    flags.DEFINE_enum("model_type", "unigram", vocab_learning.SENTENCEPIECE_MODEL_TYPES,
                      "SentencePiece: the model type.", flag_values=fv)


def run(f):
    """Learns and writes the vocab from the parsed flags `f`."""
    _check_flags(f)
    files = expand_input_files(f.input_file)
    check_text_files(files)  # readable UTF-8, before the text is learned from
    if f.vocab_type == "wordpiece":
        return _wordpiece(f, files)
    return _sentencepiece(f, files)


def _check_flags(f):
    require(f.vocab_size is not None and f.vocab_size >= 2,
            f"--vocab_size={f.vocab_size}: give the number of tokens to learn (e.g. 8000)")
    wordpiece = f.vocab_type == "wordpiece"
    other = "--model_type" if wordpiece else "--min_count"
    if f[other.lstrip("-")].present:
        raise UsageError(f"{other} is for --vocab_type={'sentencepiece' if wordpiece else 'wordpiece'}, "
                         f"not {f.vocab_type}; leave it out")
    require(f.min_count >= 1, f"--min_count={f.min_count}: give 1 or more")
    outputs.check_output_file(_output_prefix(f) + ("" if wordpiece else ".model"), "--output_file",
                              example="vocab.txt" if wordpiece else "spm")


def _output_prefix(f):
    """--output_file; for SentencePiece without a trailing .model (PREFIX.model is written)."""
    path = f.output_file
    return path[:-len(".model")] if f.vocab_type == "sentencepiece" and path.endswith(".model") else path


def _wordpiece(f, files):
    print(f"Learning a WordPiece vocab of {f.vocab_size} tokens from {len(files)} file(s)", flush=True)
    vocab = vocab_learning.learn_wordpiece(files, f.vocab_size, f.do_lower_case, f.min_count)
    vocab_learning.write_wordpiece(vocab.tokens, f.output_file)
    if vocab.note:
        print(f"warning: {vocab.note}", file=sys.stderr, flush=True)
    print(f"Wrote {len(vocab.tokens)} tokens to {f.output_file}", flush=True)


def _sentencepiece(f, files):
    print(f"Learning a SentencePiece {f.model_type} model of {f.vocab_size} pieces from {len(files)} file(s)",
          flush=True)
    model, vocab = vocab_learning.learn_sentencepiece(files, f.vocab_size, f.do_lower_case, f.model_type)
    written = vocab_learning.write_sentencepiece(model, vocab, _output_prefix(f))
    print(f"Wrote {f.vocab_size} pieces to {', '.join(written)}", flush=True)


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run,
                           required_flags=["input_file", "output_file", "vocab_size"])
