"""GLUE and XNLI as distributed (TSV files), as the original run_classifier.py read them.

Model Garden's GLUE processors now read TFDS, which needs the network, so the file
layouts are described here as a table; featurization (WordPiece, truncation, [CLS]/[SEP],
TFRecord writing) is Model Garden's `classifier_data_lib`, a port of the original.
"""

import csv
import dataclasses
import os
from typing import Optional, Sequence

import tensorflow as tf
from official.nlp.data import classifier_data_lib as mg

from realformer_tf.data.records import InputError


@dataclasses.dataclass(frozen=True)
class Layout:
    """Column indices of one TSV file; `label=None` for unlabeled test files."""

    file: str
    text_a: int
    text_b: Optional[int] = None
    label: Optional[int] = None
    header: bool = True


@dataclasses.dataclass(frozen=True)
class GlueTask:
    labels: Optional[Sequence[str]]  # None: regression
    train: Layout
    dev: Layout
    test: Layout
    metric: str = "accuracy"  # the task's official metric, besides accuracy

    @property
    def is_regression(self):
        return self.labels is None


_PAIR = dict(text_a=1, text_b=2)
TASKS = {
    "cola": GlueTask(["0", "1"], Layout("train.tsv", 3, None, 1, header=False),
                     Layout("dev.tsv", 3, None, 1, header=False), Layout("test.tsv", 1), "mcc"),
    "sst-2": GlueTask(["0", "1"], Layout("train.tsv", 0, None, 1), Layout("dev.tsv", 0, None, 1),
                      Layout("test.tsv", 1)),
    "mrpc": GlueTask(["0", "1"], Layout("train.tsv", 3, 4, 0), Layout("dev.tsv", 3, 4, 0),
                     Layout("test.tsv", 3, 4), "f1"),
    "qqp": GlueTask(["0", "1"], Layout("train.tsv", 3, 4, 5), Layout("dev.tsv", 3, 4, 5),
                    Layout("test.tsv", 1, 2), "f1"),
    "mnli": GlueTask(["contradiction", "entailment", "neutral"], Layout("train.tsv", 8, 9, -1),
                     Layout("dev_matched.tsv", 8, 9, -1), Layout("test_matched.tsv", 8, 9)),
    "mnli-mm": GlueTask(["contradiction", "entailment", "neutral"], Layout("train.tsv", 8, 9, -1),
                        Layout("dev_mismatched.tsv", 8, 9, -1), Layout("test_mismatched.tsv", 8, 9)),
    "qnli": GlueTask(["entailment", "not_entailment"], Layout("train.tsv", **_PAIR, label=3),
                     Layout("dev.tsv", **_PAIR, label=3), Layout("test.tsv", **_PAIR)),
    "rte": GlueTask(["entailment", "not_entailment"], Layout("train.tsv", **_PAIR, label=3),
                    Layout("dev.tsv", **_PAIR, label=3), Layout("test.tsv", **_PAIR)),
    "wnli": GlueTask(["0", "1"], Layout("train.tsv", **_PAIR, label=3),
                     Layout("dev.tsv", **_PAIR, label=3), Layout("test.tsv", **_PAIR)),
    "sts-b": GlueTask(None, Layout("train.tsv", 7, 8, 9), Layout("dev.tsv", 7, 8, 9),
                      Layout("test.tsv", 7, 8), "correlation"),
    # XNLI (English): train from MultiNLI's file, dev/test from the XNLI release.
    "xnli": GlueTask(["contradiction", "entailment", "neutral"],
                     Layout(os.path.join("multinli", "multinli.train.en.tsv"), 0, 1, 2),
                     Layout("xnli.dev.tsv", 6, 7, 1), Layout("xnli.test.tsv", 6, 7)),
}
ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli-m": "mnli", "mnli_mismatched": "mnli-mm"}
_XNLI_LANGUAGE_COLUMN = 0


def get_task(task_name):
    name = ALIASES.get(task_name.lower(), task_name.lower())
    if name not in TASKS:
        raise InputError(f"--task_name={task_name!r} is not one of {', '.join(sorted(TASKS))}")
    return name, TASKS[name]


def _read_rows(path):
    if not tf.io.gfile.exists(path):
        raise InputError(f"{path} does not exist; --data_dir must hold the task's GLUE files")
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")  # GLUE's MRPC starts with a BOM
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text ({e})") from None
    return list(csv.reader(text.splitlines(), delimiter="\t", quotechar=None))


def read_examples(task_name, data_dir, split):
    """Reads `split` ("train", "dev" or "test") of a task into Model Garden InputExamples."""
    name, task = get_task(task_name)
    layout = getattr(task, split)
    path = os.path.join(data_dir, layout.file)
    rows = _read_rows(path)
    first = 1 if layout.header else 0
    needed = max(i for i in (layout.text_a, layout.text_b, layout.label or 0) if i is not None) + 1
    examples = []
    for line_number, row in enumerate(rows[first:], start=first + 1):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if name == "xnli" and split != "train" and row[_XNLI_LANGUAGE_COLUMN] != "en":
            continue
        if len(row) < needed:
            raise InputError(
                f"{path}, line {line_number}: {len(row)} column(s), expected at least {needed} "
                f"for task {name}; is this the GLUE {name} file?"
            )
        label = None
        if layout.label is not None:
            label = row[layout.label].strip()
            if name == "xnli" and label == "contradictory":
                label = "contradiction"
            label = _check_label(label, task, path, line_number)
        elif not task.is_regression:
            label = task.labels[0]  # test files are unlabeled; any valid label will do
        else:
            label = 0.0
        examples.append(mg.InputExample(
            guid=f"{split}-{len(examples)}",
            text_a=row[layout.text_a],
            text_b=row[layout.text_b] if layout.text_b is not None else None,
            label=label,
        ))
    if not examples:
        raise InputError(f"{path} holds no examples")
    return examples


def _check_label(label, task, path, line_number):
    if task.is_regression:
        try:
            return float(label)
        except ValueError:
            raise InputError(f"{path}, line {line_number}: score {label!r} is not a number") from None
    if label not in task.labels:
        raise InputError(
            f"{path}, line {line_number}: label {label!r} is not one of {', '.join(task.labels)}"
        )
    return label


def feature_spec(max_seq_length, is_regression):
    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "label_ids": tf.io.FixedLenFeature([], tf.float32 if is_regression else tf.int64),
        "is_real_example": tf.io.FixedLenFeature([], tf.int64),
    }


def write_features(examples, task, max_seq_length, tokenizer, output_file):
    """Tokenizes and writes examples as the original TFRecord features."""
    mg.file_based_convert_examples_to_features(
        examples, task.labels, max_seq_length, tokenizer, output_file,
        label_type=float if task.is_regression else None,
    )
