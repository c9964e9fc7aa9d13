"""Tiny fixture builders shared by the end-to-end tests: a WordPiece vocab, raw
pretraining text, a bert_config.json, GLUE TSV files, pretraining TFRecords, and
`run_script`, which runs a program of the repository in this process (its `main(argv)`)
or, for the scripts that are not programs of the package, in a subprocess.

Everything is deterministic and small enough to train in seconds on one CPU core.
"""

import contextlib
import importlib
import importlib.util
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

SUBJECTS = ("the cat", "a dog", "the bird", "my friend", "the teacher", "a student", "the old man",
            "the girl")
VERBS = ("sees", "likes", "finds", "reads", "helps", "follows", "calls", "watches")
OBJECTS = ("the book", "a red ball", "the small house", "the river", "a green tree", "the city",
           "the garden", "a blue car")
ENDINGS = ("today", "again", "at night", "in the morning", "every day", "with joy")

WORDS = sorted({w for group in (SUBJECTS, VERBS, OBJECTS, ENDINGS) for phrase in group
                for w in phrase.split()} | {"."})


def sentences(count, seed=0):
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(ENDINGS)} ."
            for _ in range(count)]


def write_vocab(path, special=SPECIAL_TOKENS, words=WORDS):
    """One token per line: the special tokens, then every word of the tiny corpus."""
    tokens = list(special) + [w for w in words if w not in special]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return str(path)


def vocab_size(special=SPECIAL_TOKENS, words=WORDS):
    return len(list(special) + [w for w in words if w not in special])


def write_text(path, num_docs=6, sentences_per_doc=8, seed=0):
    """One sentence per line, a blank line between documents (create_pretraining_data's
    input format)."""
    rng = random.Random(seed)
    docs = [sentences(sentences_per_doc, seed=rng.randrange(1 << 30)) for _ in range(num_docs)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    return str(path)


def tiny_config_dict(**overrides):
    """BERT's eleven fields plus residual_attention (stated: a file without it makes
    loading weights decide from them; see test_variant_evidence)."""
    config = dict(
        vocab_size=vocab_size(), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, hidden_act="gelu", hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1, max_position_embeddings=64, type_vocab_size=2,
        initializer_range=0.02, residual_attention=True,
    )
    config.update(overrides)
    return config


def tiny_etc_config_dict(**overrides):
    """A tiny ETC config (EtcConfig fields) over the tiny vocab."""
    config = dict(
        vocab_size=vocab_size(), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
        local_radius=4, relative_pos_max_distance=3, relative_vocab_size=10, residual_attention=True)
    config.update(overrides)
    return config


def write_config(path, **overrides):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tiny_config_dict(**overrides), f, indent=2)
    return str(path)


def tiny_config(**overrides):
    from realformer_tf import modeling

    return modeling.BertConfig(**tiny_config_dict(**overrides))


def write_glue_mrpc(data_dir, num_train=8, num_dev=4):
    """MRPC layout: header, then Quality, #1 ID, #2 ID, #1 String, #2 String."""
    os.makedirs(data_dir, exist_ok=True)
    rng = random.Random(1)
    for name, n in (("train.tsv", num_train), ("dev.tsv", num_dev), ("test.tsv", num_dev)):
        rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i, (a, b) in enumerate(zip(sentences(n, seed=10 + len(name)), sentences(n, seed=20 + len(name)))):
            rows.append(f"{rng.randrange(2)}\t{i}\t{i + 1000}\t{a}\t{b}")
        with open(os.path.join(data_dir, name), "w", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")
    return str(data_dir)


def write_pretraining_records(path, num_examples, max_seq_length, max_predictions_per_seq,
                              vocab=None, seed=0):
    """Random but well-formed pretraining tf.Examples (the create_pretraining_data.py
    features), without running the tokenizer."""
    import numpy as np
    import tensorflow as tf

    vocab = vocab or vocab_size()
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for ex in fixed_pretraining_batch(num_examples, max_seq_length, max_predictions_per_seq,
                                          vocab, rng=rng, as_list=True):
            feats = {k: tf.train.Feature(float_list=tf.train.FloatList(value=v))
                     if k == "masked_lm_weights" else
                     tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in ex.items()}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return str(path)


def fixed_pretraining_batch(batch_size, max_seq_length, max_predictions_per_seq, vocab=None,
                            seed=0, rng=None, as_list=False):
    """A batch of pretraining features as numpy arrays ({name: [B, ...]}), int32 like the
    decoded TFRecords; with `as_list`, a list of per-example {name: python list}."""
    import numpy as np

    vocab = vocab or vocab_size()
    rng = rng if rng is not None else np.random.default_rng(seed)
    length = max_seq_length
    ids = rng.integers(5, vocab, size=(batch_size, length)).astype(np.int32)
    real = rng.integers(length // 2, length + 1, size=batch_size)
    mask = (np.arange(length)[None, :] < real[:, None]).astype(np.int32)
    ids = ids * mask
    ids[:, 0] = 2  # [CLS]
    segment = (np.arange(length)[None, :] >= (real // 2)[:, None]).astype(np.int32) * mask
    positions = np.zeros((batch_size, max_predictions_per_seq), np.int32)
    labels = np.zeros((batch_size, max_predictions_per_seq), np.int32)
    weights = np.zeros((batch_size, max_predictions_per_seq), np.float32)
    for b in range(batch_size):
        n = min(max_predictions_per_seq, max(1, int(real[b]) - 1))
        pos = np.sort(rng.choice(np.arange(1, real[b]), size=n, replace=False))
        positions[b, :n] = pos
        labels[b, :n] = ids[b, pos]
        weights[b, :n] = 1.0
        ids[b, pos] = 4  # [MASK]
    batch = {
        "input_ids": ids, "input_mask": mask, "segment_ids": segment,
        "masked_lm_positions": positions, "masked_lm_ids": labels, "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, size=(batch_size, 1)).astype(np.int32),
    }
    if as_list:
        return [{k: v[b].tolist() for k, v in batch.items()} for b in range(batch_size)]
    return batch


def script_env(**extra):
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def run_script(script, *args, timeout=600, env=None, cwd=ROOT):
    """Runs the repository's `script` with `args` in `cwd`; returns a CompletedProcess (text).

    A program with `main(argv)` (realformer_tf/app/*, FILE_PROGRAMS) runs in this process,
    its stdout and stderr captured at the file descriptors (TensorFlow's C++ lines
    included), with `env` set while it runs; `timeout` applies to subprocesses only.
    Other scripts (the rest of experiments/, benchmarks/) run in a subprocess, as does
    any test of the process boundary itself (`run_subprocess`).
    """
    main = program_main(script)
    if main is None:
        return run_subprocess(script, *args, timeout=timeout, env=env, cwd=cwd)
    argv = [script, *[str(a) for a in args]]
    with _environment(env or {}), _working_directory(cwd), captured_output() as output:
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else 1
        except Exception:  # a bug: as a process, a traceback and exit 1
            traceback.print_exc()
            status = 1
    _release_program_memory()
    return subprocess.CompletedProcess(argv, int(status or 0), output["stdout"], output["stderr"])


def one_error_line(proc, *expected):
    """The single `error:` line of a program that failed as a user error (status 1, no
    traceback); each of `expected` must be in it."""
    assert proc.returncode == 1, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for text in expected:
        assert text in errors[0], (text, errors[0])
    return errors[0]


def _release_program_memory():
    """What a finished process would give back: the program's models, graphs and Keras
    names (a test file runs dozens of programs in one worker)."""
    import gc

    import keras

    keras.backend.clear_session()
    gc.collect()


# Repository scripts outside realformer_tf/app/ that follow its `main(argv)` pattern.
FILE_PROGRAMS = ("analyze_attention.py", "experiments/compare_pretraining.py", "experiments/make_long_squad.py",
                 "experiments/reproduce.py", "experiments/translation_curve.py")


def program_main(script):
    """The `main(argv)` behind a repository script, or None for a script that is not a
    program (it then runs in a subprocess)."""
    name = os.path.splitext(os.path.basename(script))[0]
    if os.path.dirname(script) == "" and importlib.util.find_spec(f"realformer_tf.app.{name}") is not None:
        return importlib.import_module(f"realformer_tf.app.{name}").main
    if script in FILE_PROGRAMS:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, script))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.main
    return None


# Prepended to the code `run_without_package` runs: importing a blocked package fails.
_BLOCK_PACKAGES = """
import importlib.abc, sys
_BLOCKED = {blocked!r}
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(name + " is blocked in this test")
sys.meta_path.insert(0, _Block())
"""


def run_without_package(code, *args, cwd, blocked=("realformer_tf",), timeout=300):
    """Runs Python `code` with `args` in a fresh interpreter in `cwd` (outside the
    repository), without PYTHONPATH and with the `blocked` packages unimportable: what a
    SavedModel must serve with (TensorFlow, tensorflow-text). Returns the last line of
    its stdout, parsed as JSON.

    Raises:
      AssertionError (with its stderr) when it fails.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", _BLOCK_PACKAGES.format(blocked=tuple(blocked)) + code,
                           *[str(a) for a in args]], cwd=str(cwd), env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_subprocess(script, *args, timeout=600, env=None, cwd=ROOT):
    """Runs `python <repo>/<script> args...` in a fresh interpreter; returns the
    CompletedProcess (text). `env` is the whole environment (default `script_env()`)."""
    cmd = [sys.executable, os.path.join(ROOT, script), *[str(a) for a in args]]
    return subprocess.run(cmd, cwd=cwd, env=env or script_env(), capture_output=True, text=True,
                          timeout=timeout)


@contextlib.contextmanager
def captured_output():
    """Captures what is written to stdout and stderr, from Python and from C++ alike
    (file descriptors 1 and 2); yields a dict that holds both texts on exit."""
    output = {}
    streams = sys.stdout, sys.stderr
    for stream in streams:
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", line_buffering=True)
        try:
            yield output
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdout, sys.stderr = streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            for name, f in (("stdout", out), ("stderr", err)):
                f.seek(0)
                output[name] = f.read().decode("utf-8", "replace")


@contextlib.contextmanager
def _environment(values):
    """os.environ with `values` set (None: removed), restored afterwards."""
    previous = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _working_directory(path):
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def flags(**values):
    """{name: value} -> ["--name=value", ...] (bools as True/False like the original docs)."""
    return [f"--{k}={v}" for k, v in values.items()]
