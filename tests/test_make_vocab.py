"""make_vocab.py (realformer_tf/app/make_vocab.py): WordPiece and SentencePiece vocabs from
raw text, run in this process on tiny texts written here.

- WordPiece: BERT's special tokens first, a vocab the data scripts accept; a text too
  small for --vocab_size gives one `warning:` line naming the size it supports and
  --min_count, and a lower --min_count keeps rarer words;
- SentencePiece (unigram, BPE): PREFIX.model and PREFIX.vocab of exactly --vocab_size
  pieces, <pad> as id 0, read by tensorflow-text's SentencepieceTokenizer with the same
  ids as the sentencepiece library; a size the text cannot give is one `error:` line
  naming the largest it can, and that size then works;
- flag and input mistakes are one `error:` line.
"""

import re

import pytest

import helpers_data as h
from realformer_tf.data.vocab import check_vocab

RARE_WORDS = ("quokka", "zephyr", "bramble")


def _text(path, rare_times=3):
    """The tiny corpus (every word at least 10 times) plus a few words `rare_times` times each."""
    lines = h.sentences(300, seed=1) + [f"the {w} sees the river ." for w in RARE_WORDS for _ in range(rare_times)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _run(**flags):
    return h.run_script("make_vocab.py", *h.flags(**flags))


def _ok(proc):
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def _warnings(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("warning:")]


def test_wordpiece_too_small_a_text_says_so_in_one_line_and_a_lower_min_count_helps(tmp_path):
    text = _text(tmp_path / "text.txt")
    proc = _ok(_run(input_file=text, output_file=tmp_path / "vocab.txt", vocab_size=1000))
    tokens = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert tokens[:5] == list(h.SPECIAL_TOKENS) and check_vocab(str(tmp_path / "vocab.txt")) == tokens
    (warning,) = _warnings(proc)
    assert f"supports only {len(tokens)} tokens at --min_count=10" in warning and "--vocab_size=1000" in warning
    assert "give more text, or a lower --min_count" in warning
    assert "quokka" not in tokens and "cat" in tokens  # 3 times: split into pieces; 10+ times: a token

    lower = _ok(_run(input_file=text, output_file=tmp_path / "vocab2.txt", vocab_size=1000, min_count=2))
    rarer = (tmp_path / "vocab2.txt").read_text(encoding="utf-8").splitlines()
    assert set(RARE_WORDS) <= set(rarer) and len(rarer) > len(tokens)
    assert f"supports only {len(rarer)} tokens at --min_count=2" in _warnings(lower)[0]


def test_wordpiece_of_a_size_the_text_supports_is_quiet_and_reads_every_input(tmp_path):
    first, _ = _text(tmp_path / "a.txt"), _text(tmp_path / "b.txt")
    proc = _ok(_run(input_file=f"{first},{tmp_path / 'b*.txt'}", output_file=tmp_path / "vocab.txt", vocab_size=70))
    tokens = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert not _warnings(proc) and len(tokens) == 70
    assert "Wrote 70 tokens" in proc.stdout and "from 2 file(s)" in proc.stdout
    # Between two count thresholds, one too many tokens and one more than 5% too few:
    # tensorflow-text returns the larger, and the line says so.
    over = _ok(_run(input_file=first, output_file=tmp_path / "over.txt", vocab_size=90))
    size = len((tmp_path / "over.txt").read_text(encoding="utf-8").splitlines())
    assert size > 90 and _warnings(over) == [
        f"warning: the text gives {size} tokens for --vocab_size=90: no count threshold gives a size within 5% "
        "below it; give another --vocab_size if the exact size matters"]


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_model_reads_the_same_in_tensorflow_text(tmp_path, model_type):
    import sentencepiece as spm
    import tensorflow as tf
    import tensorflow_text as tf_text

    text = _text(tmp_path / "text.txt")
    _ok(_run(input_file=text, output_file=tmp_path / "spm.model", vocab_type="sentencepiece",
             model_type=model_type, vocab_size=60))
    model = (tmp_path / "spm.model").read_bytes()
    vocab = (tmp_path / "spm.vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == 60 and [line.split("\t")[0] for line in vocab[:4]] == ["<pad>", "<unk>", "<s>", "</s>"]
    ours = spm.SentencePieceProcessor(model_proto=model)
    theirs = tf_text.SentencepieceTokenizer(model=model)
    strings = ["The cat sees the river today .", "a quokka follows THE old man", "zzz unknown ü"]
    expected = [ours.encode(s.lower()) for s in strings]  # the model folds case itself
    assert [ours.encode(s) for s in strings] == expected
    assert theirs.tokenize(tf.constant(strings)).to_list() == expected
    assert ours.piece_to_id("<pad>") == 0 and all(ids for ids in expected)


def test_sentencepiece_size_the_text_cannot_give_is_one_error_naming_the_largest(tmp_path):
    text = _text(tmp_path / "text.txt")
    prefix = tmp_path / "spm"
    error = h.one_error_line(_run(input_file=text, output_file=prefix, vocab_type="sentencepiece",
                                  model_type="bpe", vocab_size=5000), "--vocab_size=5000", "at most")
    largest = int(re.search(r"at most (\d+) pieces", error).group(1))
    assert not list(tmp_path.glob("spm*"))
    _ok(_run(input_file=text, output_file=prefix, vocab_type="sentencepiece", model_type="bpe", vocab_size=largest))
    assert len((tmp_path / "spm.vocab").read_text(encoding="utf-8").splitlines()) == largest
    h.one_error_line(_run(input_file=text, output_file=prefix, vocab_type="sentencepiece", vocab_size=5),
                     "--vocab_size=5 is less than", "characters")


def test_flag_and_input_mistakes_are_one_error_line(tmp_path):
    text = _text(tmp_path / "text.txt")
    out = tmp_path / "vocab.txt"
    h.one_error_line(_run(input_file=text, output_file=out, vocab_type="sentencepiece", vocab_size=50, min_count=2),
                     "--min_count is for --vocab_type=wordpiece")
    h.one_error_line(_run(input_file=text, output_file=out, vocab_size=50, model_type="bpe"),
                     "--model_type is for --vocab_type=sentencepiece")
    h.one_error_line(_run(input_file=text, output_file=out, vocab_size=50, min_count=0), "--min_count=0")
    h.one_error_line(_run(input_file=text, output_file=out, vocab_size=0), "--vocab_size=0")
    h.one_error_line(_run(input_file=tmp_path / "none.txt", output_file=out, vocab_size=50), "none.txt")
    h.one_error_line(_run(input_file=text, output_file=tmp_path, vocab_size=50), "is a folder")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    h.one_error_line(_run(input_file=latin1, output_file=out, vocab_size=50), "latin1.txt", "not UTF-8")
    h.one_error_line(_run(input_file=text, output_file=out), "--vocab_size")
    assert not out.exists()
