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

from realformer_tf.errors import InputError


@dataclasses.dataclass(frozen=True)
class Layout:
    """Column indices of one TSV file; `label=None` for unlabeled test files. `columns`:
    how many columns a row has, when the file's layout fixes it (a row with more is
    refused: a tab inside a text would shift the columns after it); None where rows
    carry further columns the task does not read (MNLI's label1..label5, XNLI's parses)."""

    file: str
    text_a: int
    text_b: Optional[int] = None
    label: Optional[int] = None
    header: bool = True
    columns: Optional[int] = None

    def needed(self):
        """The columns a row must have at least: up to the last one read."""
        return max(i for i in (self.text_a, self.text_b, self.label or 0) if i is not None) + 1


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
# Column counts as GLUE distributes the files (header included): CoLA's train/dev have no
# header (source, label, original label, sentence); QNLI/RTE/WNLI are index, text, text, label.
TASKS = {
    "cola": GlueTask(["0", "1"], Layout("train.tsv", 3, None, 1, header=False, columns=4),
                     Layout("dev.tsv", 3, None, 1, header=False, columns=4), Layout("test.tsv", 1, columns=2), "mcc"),
    "sst-2": GlueTask(["0", "1"], Layout("train.tsv", 0, None, 1, columns=2), Layout("dev.tsv", 0, None, 1, columns=2),
                      Layout("test.tsv", 1, columns=2)),
    "mrpc": GlueTask(["0", "1"], Layout("train.tsv", 3, 4, 0, columns=5), Layout("dev.tsv", 3, 4, 0, columns=5),
                     Layout("test.tsv", 3, 4, columns=5), "f1"),
    "qqp": GlueTask(["0", "1"], Layout("train.tsv", 3, 4, 5, columns=6), Layout("dev.tsv", 3, 4, 5, columns=6),
                    Layout("test.tsv", 1, 2, columns=3), "f1"),
    "mnli": GlueTask(["contradiction", "entailment", "neutral"], Layout("train.tsv", 8, 9, -1),
                     Layout("dev_matched.tsv", 8, 9, -1), Layout("test_matched.tsv", 8, 9)),
    "mnli-mm": GlueTask(["contradiction", "entailment", "neutral"], Layout("train.tsv", 8, 9, -1),
                        Layout("dev_mismatched.tsv", 8, 9, -1), Layout("test_mismatched.tsv", 8, 9)),
    "qnli": GlueTask(["entailment", "not_entailment"], Layout("train.tsv", **_PAIR, label=3, columns=4),
                     Layout("dev.tsv", **_PAIR, label=3, columns=4), Layout("test.tsv", **_PAIR, columns=3)),
    "rte": GlueTask(["entailment", "not_entailment"], Layout("train.tsv", **_PAIR, label=3, columns=4),
                    Layout("dev.tsv", **_PAIR, label=3, columns=4), Layout("test.tsv", **_PAIR, columns=3)),
    "wnli": GlueTask(["0", "1"], Layout("train.tsv", **_PAIR, label=3, columns=4),
                     Layout("dev.tsv", **_PAIR, label=3, columns=4), Layout("test.tsv", **_PAIR, columns=3)),
    "sts-b": GlueTask(None, Layout("train.tsv", 7, 8, 9, columns=10), Layout("dev.tsv", 7, 8, 9, columns=10),
                      Layout("test.tsv", 7, 8, columns=9), "correlation"),
    # XNLI (English): train from MultiNLI's file, dev/test from the XNLI release.
    "xnli": GlueTask(["contradiction", "entailment", "neutral"],
                     Layout(os.path.join("multinli", "multinli.train.en.tsv"), 0, 1, 2, columns=3),
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
    examples = []
    for line_number, row in enumerate(rows[first:], start=first + 1):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if name == "xnli" and split != "train" and row[_XNLI_LANGUAGE_COLUMN] != "en":
            continue
        _check_columns(row, layout, name, path, line_number)
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


def _check_columns(row, layout, name, path, line_number):
    """A row has the columns the layout reads, and no more where the layout fixes the
    count: an extra column (a note, a tab inside a text) would otherwise be dropped or
    shift the label without a word."""
    if len(row) < layout.needed():
        raise InputError(
            f"{path}, line {line_number}: {len(row)} column(s), expected at least {layout.needed()} "
            f"for task {name}; is this the GLUE {name} file?"
        )
    if layout.columns is not None and len(row) > layout.columns:
        extra = row[layout.columns]
        shown = extra if len(extra) <= 40 else extra[:37] + "..."
        raise InputError(
            f"{path}, line {line_number}: {len(row)} columns, expected {layout.columns} for task {name}; "
            f"column {layout.columns + 1} ({shown!r}) is extra: remove it, or the tab that split a text "
            "(a tab separates columns; none may stand inside a text)"
        )


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
