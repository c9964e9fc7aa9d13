"""The files of a study's runs: reading what run_pretraining.py wrote into a run's
output_dir (eval_results.txt, the summaries' event files, the checkpoint index), the
held-out split of the raw text, and `StudyData`, what the runs were trained on."""

import dataclasses
import os
import re

import tensorflow as tf


def read_eval_results(path):
    """eval_results.txt ("key = value" lines) -> {key: float}; None if absent."""
    if not tf.io.gfile.exists(path):
        return None
    results = {}
    with tf.io.gfile.GFile(path) as f:
        for line in f:
            if " = " in line:
                key, value = line.split(" = ", 1)
                try:
                    results[key.strip()] = float(value)
                except ValueError:
                    pass
    return results


def read_scalars(summary_dir):
    """{tag: [(step, value), ...]} (sorted by step, last value per step) from the event
    files of `summary_dir` (what orbit's summary manager writes)."""
    series = {}
    if not tf.io.gfile.isdir(summary_dir):
        return {}
    for path in sorted(tf.io.gfile.glob(os.path.join(summary_dir, "events.out.tfevents.*"))):
        try:
            for record in tf.data.TFRecordDataset(path):
                event = tf.compat.v1.Event.FromString(record.numpy())
                for value in event.summary.value:
                    if value.HasField("tensor"):
                        number = float(tf.make_ndarray(value.tensor).reshape(-1)[0])
                    else:
                        number = float(value.simple_value)
                    series.setdefault(value.tag, {})[int(event.step)] = number
        except tf.errors.DataLossError:
            continue  # a file being written, or truncated by a crash: keep what was read
    return {tag: sorted(points.items()) for tag, points in series.items()}


def last_session_step_times(summary_dir):
    """[(wall time, step), ...] of the steps logged by the last training session in
    `summary_dir` (one event file per session: the one that finished the run, whose time
    the run's timing.json counts); [] if none."""
    paths = sorted(tf.io.gfile.glob(os.path.join(summary_dir, "events.out.tfevents.*"))) \
        if tf.io.gfile.isdir(summary_dir) else []
    sessions = [_step_times(path) for path in paths]
    sessions = [s for s in sessions if s]
    return max(sessions, key=lambda s: s[0][0]) if sessions else []


def _step_times(path):
    times = {}
    try:
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            if event.summary.value:
                times[int(event.step)] = event.wall_time
    except tf.errors.DataLossError:
        pass  # a file cut short by a crash: what was read
    return sorted((wall, step) for step, wall in times.items())


def checkpoint_step(run_dir):
    """Global step of the latest training checkpoint in run_dir (0 if none)."""
    latest = tf.train.latest_checkpoint(run_dir) if tf.io.gfile.isdir(run_dir) else None
    match = re.search(r"ckpt-(\d+)$", latest or "")
    return int(match.group(1)) if match else 0


# -- data --------------------------------------------------------------------------------------

def split_documents(text, eval_every):
    """Raw create_pretraining_data text (blank lines between documents) -> (train, eval)
    texts, every `eval_every`-th document held out (at least one each way)."""
    documents = [d.strip("\n") for d in re.split(r"\n\s*\n", text) if d.strip()]
    if len(documents) < 2:
        raise ValueError("the text needs at least two documents (separated by blank lines) to "
                         "hold one out; or give --eval_text_file")
    held_out = {i for i in range(len(documents)) if i % eval_every == eval_every - 1} or {len(documents) - 1}
    train = [d for i, d in enumerate(documents) if i not in held_out]
    evaluation = [d for i, d in enumerate(documents) if i in held_out]
    return "\n\n".join(train) + "\n", "\n\n".join(evaluation) + "\n"


def count_vocab(vocab_file):
    from realformer_tf.data.vocab import check_vocab

    return len(check_vocab(vocab_file))


@dataclasses.dataclass(frozen=True)
class StudyData:
    """What a study's runs were trained and evaluated on, as its report labels them: the
    vocab size, the two context-free baselines on the held-out records, and how the
    report names its inputs (never an absolute path: a report is read on other machines).
    An archive keeps it beside its runs (`run_archive.save_study_data`), so a report of
    archived runs is labelled with the study's own data."""

    vocab_size: int
    unigram_baseline: float
    copy_unigram_baseline: float
    train_records: str = ""
    eval_records: str = ""
    data_note: str = ""

    # Baselines equal to the 4 digits the report shows come from the same held-out records.
    TOLERANCE = 5e-5

    def differs_from(self, other):
        """Whether `other` describes different data (vocab or held-out baselines)."""
        return (self.vocab_size != other.vocab_size
                or abs(self.unigram_baseline - other.unigram_baseline) > self.TOLERANCE
                or abs(self.copy_unigram_baseline - other.copy_unigram_baseline) > self.TOLERANCE)

    def describe(self):
        return (f"vocab {self.vocab_size} tokens, copy + unigram baseline {self.copy_unigram_baseline:.4f} "
                f"(unigram {self.unigram_baseline:.4f}) on the held-out records")
