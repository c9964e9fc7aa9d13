"""create_pretraining_data.py --objective=causal_lm (realformer_tf/app/create_pretraining_data.py,
realformer_tf/data/causal_lm*.py, beam_causal_lm.py), run in this process on tiny texts
written here.

- the stream is the tokenizer's ids with the end-of-document token after every document
  (computed here independently: Model Garden's FullTokenizer, the sentencepiece library),
  cut into blocks of exactly max_seq_length, the incomplete tail dropped and counted;
- the same seed gives the same bytes; --random_seed only reorders the blocks;
- the Beam pipeline (DirectRunner) writes the in-process blocks in the same order;
- the record format's checks: masked-LM records refused for a causal LM and the reverse;
  the dataset resumes where it stopped;
- every bad input is one `error:` line, and nothing is written.
"""

import glob
import io
import os
import re

import pytest

import helpers_data as h

L = 16
PROGRAM = "create_pretraining_data.py"


def _run(*args, **flags):
    """The program on `flags` (a None value: the flag left out) and `args`."""
    return h.run_script(PROGRAM, *h.flags(**{k: v for k, v in flags.items() if v is not None}), *args)


def _ok(proc):
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _causal(corpus, output, **overrides):
    flags = dict(objective="causal_lm", input_file=corpus["text"], vocab_file=corpus["vocab"], max_seq_length=L,
                 output_file=output)
    flags.update(overrides)
    return flags


def _blocks(paths):
    """Every record's feature names and input_ids, in file order."""
    import tensorflow as tf

    blocks = []
    for record in tf.data.TFRecordDataset(list(paths)):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        assert set(feature) == {"input_ids"}
        blocks.append(list(feature["input_ids"].int64_list.value))
    return blocks


def _documents(paths):
    """Each file's documents (lists of stripped lines), a new file a new document."""
    documents = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for chunk in re.split(r"\n\s*\n", text):
            lines = [line.strip() for line in chunk.splitlines() if line.strip()]
            if lines:
                documents.append(lines)
    return documents


def _expected_stream(paths, ids_of_line, end_id):
    stream = []
    for lines in _documents(paths):
        ids = [i for line in lines for i in ids_of_line(line)]
        stream += ids + [end_id] if ids else []
    return stream


def _wordpiece_stream(paths, vocab):
    from official.nlp.tools import tokenization

    tokenizer = tokenization.FullTokenizer(vocab_file=vocab, do_lower_case=True)
    return _expected_stream(paths, lambda line: tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)),
                            tokenizer.vocab["[SEP]"])


def _cut(stream, length=L):
    return [stream[i:i + length] for i in range(0, len(stream) // length * length, length)]


def _train_sentencepiece(path, eos_id=3):
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(h.sentences(200, seed=5)), model_writer=model,
                                   vocab_size=40, hard_vocab_limit=False, pad_id=0, unk_id=1, bos_id=2,
                                   eos_id=eos_id, minloglevel=2)
    path.write_bytes(model.getvalue())
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("causal_lm_data")
    text = h.write_text(d / "text.txt", num_docs=5, sentences_per_doc=3, seed=1)
    more = h.write_text(d / "more.txt", num_docs=2, sentences_per_doc=2, seed=2)
    with open(more, "a", encoding="utf-8") as f:
        f.write("\n\n\ncat .\n\n")  # a short document, blank lines around it
    (d / "blank.txt").write_text("\n\n  \n\n", encoding="utf-8")
    (d / "short.txt").write_text("the cat sees the river .\n", encoding="utf-8")
    return dict(dir=d, text=text, more=more, blank=str(d / "blank.txt"), short=str(d / "short.txt"),
                vocab=h.write_vocab(d / "vocab.txt"),
                vocab_no_sep=h.write_vocab(d / "vocab_no_sep.txt", special=("[PAD]", "[UNK]", "[CLS]", "[MASK]")),
                spm=_train_sentencepiece(d / "spm.model"), spm_no_eos=_train_sentencepiece(d / "no_eos.model", -1))


@pytest.fixture(scope="module")
def made(corpus):
    """The two files' blocks, in this process, at seed 7."""
    output = str(corpus["dir"] / "made" / "lm.tfrecord")
    proc = _ok(_run(**_causal(corpus, output, input_file=f"{corpus['text']},{corpus['more']}", random_seed=7)))
    return dict(output=output, proc=proc, stream=_wordpiece_stream([corpus["text"], corpus["more"]], corpus["vocab"]))


def test_blocks_are_the_tokenizers_stream_with_sep_after_every_document_cut_every_max_seq_length(made):
    stream, blocks = made["stream"], _blocks([made["output"]])
    assert stream.count(3) == 5 + 2 + 1  # [SEP] (id 3) after each document of both files
    assert all(len(block) == L for block in blocks)
    assert len(blocks) == len(stream) // L > 1
    assert sorted(blocks) == sorted(_cut(stream))  # the order is the seed's (below)
    assert blocks != _cut(stream)


def test_the_statistics_line_counts_documents_tokens_blocks_and_the_dropped_tail(made):
    stream = made["stream"]
    blocks, dropped = len(stream) // L, len(stream) % L
    assert dropped, "the corpus should leave an incomplete tail"
    line = [x for x in made["proc"].stdout.splitlines() if x.startswith("Wrote")][0]
    assert line == (f"Wrote {blocks} blocks to {made['output']}; 8 documents, {len(stream)} tokens (end-of-document "
                    f"tokens included), {blocks} blocks of {L} tokens, {dropped} tokens dropped (the last, "
                    "incomplete block)")
    assert "lines tokenized" in made["proc"].stdout and "blocks written" in made["proc"].stdout
    assert os.listdir(os.path.dirname(made["output"])) == ["lm.tfrecord"]  # no temporary left


def test_the_same_seed_gives_the_same_bytes_another_seed_only_reorders(corpus, made, tmp_path):
    inputs = f"{corpus['text']},{corpus['more']}"
    again, other = str(tmp_path / "again.tfrecord"), str(tmp_path / "other.tfrecord")
    _ok(_run(**_causal(corpus, again, input_file=inputs, random_seed=7)))
    _ok(_run(**_causal(corpus, other, input_file=inputs, random_seed=8)))
    with open(made["output"], "rb") as a, open(again, "rb") as b, open(other, "rb") as c:
        first, second, third = a.read(), b.read(), c.read()
    assert first == second and first != third
    assert sorted(_blocks([other])) == sorted(_blocks([made["output"]]))


def test_several_output_files_share_the_blocks_round_robin(corpus, made, tmp_path):
    outputs = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    _ok(_run(**_causal(corpus, ",".join(outputs), input_file=f"{corpus['text']},{corpus['more']}", random_seed=7)))
    one = _blocks([made["output"]])
    assert _blocks([outputs[0]]) == one[0::2] and _blocks([outputs[1]]) == one[1::2]


def test_sentencepiece_stream_ends_each_document_with_eos(corpus, tmp_path):
    import sentencepiece as spm

    output = str(tmp_path / "spm.tfrecord")
    proc = _ok(_run(**_causal(corpus, output, vocab_file=None, spm_model_file=corpus["spm"], max_seq_length=32)))
    processor = spm.SentencePieceProcessor(model_file=corpus["spm"])
    stream = _expected_stream([corpus["text"]], lambda line: processor.encode(line), processor.eos_id())
    assert processor.eos_id() == 3 and stream.count(3) == 5
    assert sorted(_blocks([output])) == sorted(_cut(stream, 32))
    assert f"{len(stream) % 32} tokens dropped" in proc.stdout
    assert f"SentencePiece {corpus['spm']} (40 tokens)" in proc.stdout


def _error_cases(c, out):
    """{case: (flags, what the error line says)}."""
    wp = _causal(c, out)
    short = len(_wordpiece_stream([c["short"]], c["vocab"]))
    return {
        "empty-corpus": (dict(wp, input_file=c["blank"]), [c["blank"], "yielded no tokens"]),
        "less-than-a-block": (dict(wp, input_file=c["short"]), [f"yielded {short} tokens, fewer than one block",
                                                                "--max_seq_length=16"]),
        "both-vocabs": (dict(wp, spm_model_file=c["spm"]), ["--vocab_file and --spm_model_file are both given"]),
        "no-vocab": (dict(wp, vocab_file=None), ["needs a tokenizer", "--vocab_file", "--spm_model_file"]),
        "masked-lm-flags": (dict(wp, dupe_factor=5, masked_lm_prob=0.2),
                            ["--masked_lm_prob, --dupe_factor: masked-LM flag(s)", "--objective=causal_lm"]),
        "spm-with-masked-lm": (dict(wp, objective="masked_lm", vocab_file=None, spm_model_file=c["spm"]),
                               ["--spm_model_file", "masked_lm needs a WordPiece --vocab_file"]),
        "vocab-without-sep": (dict(wp, vocab_file=c["vocab_no_sep"]), [c["vocab_no_sep"], "[SEP]"]),
        "spm-without-eos": (dict(wp, vocab_file=None, spm_model_file=c["spm_no_eos"]),
                            [c["spm_no_eos"], "(</s>)"]),
        "spm-not-a-model": (dict(wp, vocab_file=None, spm_model_file=c["vocab"]),
                            [c["vocab"], "is not a SentencePiece model"]),
        "lower-case-with-spm": (dict(wp, vocab_file=None, spm_model_file=c["spm"], do_lower_case=False),
                                ["--do_lower_case with --spm_model_file"]),
        "one-token-blocks": (dict(wp, max_seq_length=1), ["--max_seq_length=1", "2 or more"]),
        "shards-without-runner": (dict(wp, num_output_shards=2), ["--num_output_shards needs --runner"]),
    }


ERROR_CASES = ("empty-corpus", "less-than-a-block", "both-vocabs", "no-vocab", "masked-lm-flags", "spm-with-masked-lm",
               "vocab-without-sep", "spm-without-eos", "spm-not-a-model", "lower-case-with-spm", "one-token-blocks",
               "shards-without-runner")


@pytest.mark.parametrize("case", ERROR_CASES)
def test_bad_input_is_one_error_line_and_nothing_is_written(corpus, tmp_path, case):
    output = str(tmp_path / "out" / "lm.tfrecord")
    flags, expected = _error_cases(corpus, output)[case]
    h.one_error_line(_run(**flags), *expected)
    assert not os.path.exists(os.path.dirname(output)) or not os.listdir(os.path.dirname(output))


def test_masked_lm_stays_as_it_was_and_refuses_causal_only_mistakes(corpus, tmp_path):
    output = str(tmp_path / "mlm.tfrecord")
    _ok(_run(input_file=corpus["text"], vocab_file=corpus["vocab"], output_file=output, max_seq_length=L,
             max_predictions_per_seq=3, dupe_factor=1))
    import tensorflow as tf

    first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(output))).numpy())
    assert "masked_lm_positions" in first.features.feature
    h.one_error_line(_run(input_file=corpus["text"], output_file=output), "--vocab_file is required")


# ------------------------------------------------------------------------- the record format


def test_check_files_refuses_masked_lm_records_and_the_reverse(corpus, made, tmp_path):
    from realformer_tf.data import causal_lm, pretraining
    from realformer_tf.errors import InputError

    mlm = h.write_pretraining_records(tmp_path / "mlm.tfrecord", 2, L, 3)
    assert causal_lm.check_files(made["output"], L, log=lambda _: None) == [made["output"]]
    with pytest.raises(InputError, match=r"mlm.tfrecord: records hold the features .*--objective=causal_lm"):
        causal_lm.check_files(mlm, L, log=lambda _: None)
    with pytest.raises(InputError, match=r"blocks of 16 tokens, but max_seq_length is 32; set --max_seq_length=16"):
        causal_lm.check_files(made["output"], 32, log=lambda _: None)
    with pytest.raises(InputError, match=r"lm.tfrecord: records are causal-LM blocks .*--objective=masked_lm"):
        pretraining.check_files(made["output"], L, 3, log=lambda _: None)


def test_dataset_batches_blocks_and_resumes_after_the_consumed_batches(made):
    import numpy as np

    from realformer_tf.data import causal_lm

    dataset_fn = causal_lm.make_dataset_fn([made["output"]], L, batch_size=2, is_training=True, seed=3,
                                           log=lambda _: None)
    batches = [b["input_ids"].numpy() for b in dataset_fn().take(5)]
    assert batches[0].shape == (2, L) and batches[0].dtype == np.int32
    resumed = [b["input_ids"].numpy() for b in dataset_fn(start_step=2).take(3)]
    assert all((a == b).all() for a, b in zip(batches[2:], resumed))
    evaluation = causal_lm.make_dataset_fn([made["output"]], L, 2, is_training=False, seed=None, max_steps=1)
    assert [b["input_ids"].numpy().tolist() for b in evaluation()] == [_blocks([made["output"]])[:2]]


# -------------------------------------------------------------------------------------- Beam


def _beam(corpus, prefix, shards, documents_per_chunk, max_seq_length=L, **overrides):
    flags = _causal(corpus, prefix, input_file=f"{corpus['text']},{corpus['more']}", random_seed=7,
                    max_seq_length=max_seq_length, num_output_shards=shards, documents_per_bucket=documents_per_chunk)
    flags.update(overrides)
    return _run("--runner=DirectRunner", **flags)


@pytest.mark.parametrize("max_seq_length, documents_per_chunk", [(L, 2), (64, 1), (4, 100)])
def test_beam_writes_the_in_process_blocks_in_the_same_order(corpus, made, tmp_path, max_seq_length,
                                                             documents_per_chunk):
    """Chunks of 1 document and blocks of 64 tokens: a block joined from several chunks'
    pieces; 100 documents: one chunk per file."""
    pytest.importorskip("apache_beam", reason="the [beam] extra (requirements-test.txt)")
    if max_seq_length == L:
        in_process = made["output"]
    else:
        in_process = str(tmp_path / "in_process.tfrecord")
        _ok(_run(**_causal(corpus, in_process, input_file=f"{corpus['text']},{corpus['more']}", random_seed=7,
                           max_seq_length=max_seq_length)))
    one = _ok(_beam(corpus, str(tmp_path / "one" / "lm"), 1, documents_per_chunk, max_seq_length))
    with open(in_process, "rb") as a, open(str(tmp_path / "one" / "lm-00000-of-00001"), "rb") as b:
        assert a.read() == b.read()
    stream = made["stream"]
    blocks = len(stream) // max_seq_length
    assert (f"8 documents, {len(stream)} tokens (end-of-document tokens included), {blocks} blocks of "
            f"{max_seq_length} tokens, {len(stream) % max_seq_length} tokens dropped") in one.stdout

    _ok(_beam(corpus, str(tmp_path / "three" / "lm"), 3, documents_per_chunk, max_seq_length))
    shards = sorted(glob.glob(str(tmp_path / "three" / "lm-*")))
    assert [os.path.basename(p) for p in shards] == [f"lm-{i:05d}-of-00003" for i in range(3)]
    assert sorted(_blocks(shards)) == sorted(_blocks([in_process]))


def test_beam_bad_input_is_one_error_line_and_no_shard(corpus, tmp_path):
    pytest.importorskip("apache_beam", reason="the [beam] extra (requirements-test.txt)")
    prefix = str(tmp_path / "beam" / "lm")
    h.one_error_line(_beam(corpus, prefix, 2, 10, input_file=corpus["blank"]), corpus["blank"],
                     "yielded no tokens", "no shard was written")
    assert not glob.glob(prefix + "*")
    h.one_error_line(_beam(corpus, prefix, 2, 10, vocab_file=corpus["vocab_no_sep"]), "[SEP]")
    h.one_error_line(_beam(corpus, prefix, 2, 10, short_seq_prob=0.2), "--short_seq_prob: masked-LM flag(s)")
