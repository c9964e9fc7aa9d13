"""User errors in the scripts: exit status 1, one `error:` line naming the file or flag,
no traceback. Each case is a subprocess (a few seconds of TensorFlow import each)."""

import json
import os

import pytest

import helpers_data as h

MAX_SEQ, MAX_PRED = 16, 4


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_errors")
    paths = dict(
        dir=str(d),
        vocab=h.write_vocab(d / "vocab.txt"),
        vocab_no_cls=h.write_vocab(d / "vocab_no_cls.txt", special=("[PAD]", "[UNK]", "[SEP]", "[MASK]")),
        text=h.write_text(d / "text.txt", num_docs=2, sentences_per_doc=3),
        config=h.write_config(d / "bert_config.json"),
        records=h.write_pretraining_records(d / "records.tfrecord", 4, MAX_SEQ, MAX_PRED),
        records_32=h.write_pretraining_records(d / "records_32.tfrecord", 4, 32, MAX_PRED),
        glue=h.write_glue_mrpc(str(d / "mrpc_bad")),
    )
    (d / "malformed.json").write_text('{"vocab_size": 48, "hidden_size": 16,')
    paths["malformed"] = str(d / "malformed.json")
    with open(d / "unknown_field.json", "w") as f:
        json.dump(h.tiny_config_dict(hidden_sizes=16), f)
    paths["unknown_field"] = str(d / "unknown_field.json")
    # An MRPC train.tsv that lost its two sentence columns on line 3.
    train = os.path.join(paths["glue"], "train.tsv")
    with open(train) as f:
        lines = f.read().splitlines()
    lines[2] = "\t".join(lines[2].split("\t")[:3])
    with open(train, "w") as f:
        f.write("\n".join(lines) + "\n")
    paths["glue_train"] = train
    # Latin-1 text (a corpus saved in another encoding) and a file cut off mid-record.
    (d / "latin1.txt").write_bytes("The caf\u00e9 was open.\nIt rained.\n".encode("latin-1"))
    paths["latin1"] = str(d / "latin1.txt")
    truncated = h.write_pretraining_records(d / "truncated.tfrecord", 6, MAX_SEQ, MAX_PRED)
    with open(truncated, "r+b") as f:
        f.truncate(os.path.getsize(truncated) * 2 // 3 + 5)  # not on a record boundary
    paths["truncated"] = truncated
    with open(d / "etc_config.json", "w") as f:
        json.dump(h.tiny_etc_config_dict(), f)
    paths["etc_config"] = str(d / "etc_config.json")
    with open(d / "etc_unknown_field.json", "w") as f:
        json.dump(h.tiny_etc_config_dict(local_radious=4), f)
    paths["etc_unknown_field"] = str(d / "etc_unknown_field.json")
    return paths


def _pretraining(f, tmp, **overrides):
    values = dict(input_file=f["records"], output_dir=os.path.join(tmp, "out"), do_train=True,
                  bert_config_file=f["config"], max_seq_length=MAX_SEQ,
                  max_predictions_per_seq=MAX_PRED, train_batch_size=2, num_train_steps=1)
    values.update(overrides)
    return ["run_pretraining.py", *h.flags(**values)]


def _classifier(f, tmp, **overrides):
    values = dict(task_name="MRPC", data_dir=f["glue"], vocab_file=f["vocab"], bert_config_file=f["config"],
                  output_dir=os.path.join(tmp, "out"), do_train=True, max_seq_length=MAX_SEQ,
                  train_batch_size=2)
    values.update(overrides)
    return ["run_classifier.py", *h.flags(**values)]


def _create_data(f, tmp, **overrides):
    values = dict(input_file=f["text"], output_file=os.path.join(tmp, "out.tfrecord"), vocab_file=f["vocab"],
                  max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED, dupe_factor=1)
    values.update(overrides)
    return ["create_pretraining_data.py", *h.flags(**values)]


def _convert(f, tmp, **overrides):
    values = dict(bert_config_file=f["config"], input_checkpoint=os.path.join(tmp, "nope", "ckpt-1"),
                  output_checkpoint=os.path.join(tmp, "out", "bert_model.ckpt"))
    values.update(overrides)
    return ["convert_checkpoint.py", *h.flags(**values)]


# (id, command builder, {flag: files key or literal}, substrings the error line must contain)
CASES = [
    ("config-missing", _pretraining, dict(bert_config_file="@dir/nope/bert_config.json"),
     ["@dir/nope/bert_config.json", "does not exist"]),
    ("config-malformed-json", _pretraining, dict(bert_config_file="@malformed"),
     ["@malformed", "not valid JSON"]),
    ("config-unknown-field", _classifier, dict(bert_config_file="@unknown_field"),
     ["@unknown_field", "hidden_sizes"]),
    ("init-checkpoint-missing", _classifier, dict(init_checkpoint="@dir/nope/bert_model.ckpt"),
     ["@dir/nope/bert_model.ckpt"]),
    ("input-glob-empty", _pretraining, dict(input_file="@dir/*.nothing"),
     ["--input_file", "@dir/*.nothing"]),
    ("records-other-max-seq-length", _pretraining, dict(input_file="@records_32"),
     ["@records_32", "max_seq_length"]),
    ("glue-missing-columns", _classifier, {}, ["@glue_train", "line 3", "column"]),
    ("sequence-longer-than-positions", _classifier, dict(max_seq_length=65),
     ["--max_seq_length=65", "max_position_embeddings=64", "@config"]),
    ("records-truncated-mid-file", _pretraining, dict(input_file="@truncated"),
     ["@truncated", "corrupt or truncated", "record 4"]),
    # The ETC jobs run through the same runner: the same checks, the same one line.
    ("etc-records-truncated-mid-file", _pretraining,
     dict(input_file="@truncated", model_type="etc", bert_config_file="@etc_config"),
     ["@truncated", "corrupt or truncated", "record 4"]),
    ("etc-config-unknown-field", _classifier, dict(model_type="etc", bert_config_file="@etc_unknown_field"),
     ["@etc_unknown_field", "local_radious"]),
    ("etc-tokens-per-global", _classifier,
     dict(model_type="etc", bert_config_file="@etc_config", etc_tokens_per_global=0),
     ["--etc_tokens_per_global=0"]),
    ("etc-case-mismatch", _classifier,
     dict(model_type="etc", bert_config_file="@etc_config", do_lower_case=True,
          init_checkpoint="@dir/cased_L-12_H-768_A-12/bert_model.ckpt"),
     ["do_lower_case"]),
    ("text-not-utf8", _create_data, dict(input_file="@latin1"),
     ["@latin1", "not UTF-8", "line 1"]),
    ("vocab-without-cls", _create_data, dict(vocab_file="@vocab_no_cls"),
     ["@vocab_no_cls", "[CLS]"]),
    # Output paths are checked before anything is read or trained (tests/test_output_paths.py).
    ("output-dir-is-a-file", _pretraining, dict(output_dir="@config"), ["--output_dir=", "@config", "is a file"]),
    ("export-dir-is-a-file", _classifier, dict(export_dir="@config", num_train_epochs=100),
     ["--export_dir=", "@config", "is a file"]),
    ("convert-output-under-a-file", _convert, dict(output_checkpoint="@config/bert_model.ckpt"),
     ["--output_checkpoint=", "@config/bert_model.ckpt", "is a file"]),
    ("create-data-output-under-a-file", _create_data, dict(output_file="@config/out.tfrecord"),
     ["--output_file=", "@config/out.tfrecord", "is a file"]),
]


def _resolve(value, f):
    if not isinstance(value, str) or "@" not in value:
        return value
    key, _, rest = value[1:].partition("/")
    return f[key] + ("/" + rest if rest else "")


@pytest.mark.parametrize("build, overrides, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_user_error_is_one_clear_line(files, tmp_path, build, overrides, expected):
    script, *args = build(files, str(tmp_path), **{k: _resolve(v, files) for k, v in overrides.items()})
    proc = h.run_script(script, *args, timeout=300)
    assert proc.returncode == 1, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for text in expected:
        assert _resolve(text, files) in errors[0], (text, errors[0])
    # Nothing half-done is left behind for the run that failed its checks.
    out = os.path.join(str(tmp_path), "out")
    assert not os.path.exists(out) or not any(n.startswith("ckpt-") for n in os.listdir(out))
