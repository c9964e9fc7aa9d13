"""Keeps a finished study run's small files in a second folder, and brings them back.

A run's output_dir holds checkpoints (megabytes) beside what the report reads: the
held-out results, the timing, the learning curves and the attention statistics
(kilobytes). `save` copies the latter to `archive_dir/<run name>/`; `restore` copies
them back into an output_dir that lacks the run. A study therefore continues on another
machine, or after its output_dir is lost, from an archive kept anywhere (the
repository keeps its study's in experiments/results/study_runs/): finished runs are
reused, and only unfinished ones train again.

    run_archive.save(run_dir, os.path.join(archive_dir, run.name))
    run_archive.restore(os.path.join(archive_dir, run.name), run_dir)

Beside the runs, `archive_dir/study_data.json` keeps what they were trained on (vocab
size, held-out baselines, how the report names the inputs: `study_files.StudyData`),
so that a report of the archive is labelled with the study's own data.

An archive also travels as one file, `NAME.tar.xz` (`pack`, `unpack`): the repository
keeps its study so, as one file in git rather than hundreds.

    run_archive.unpack("experiments/results/study_runs.tar.xz", folder)
    run_archive.pack(folder, "experiments/results/study_runs.tar.xz")  # rewritten only if changed
"""

import dataclasses
import io
import json
import lzma
import os
import tarfile

import tensorflow as tf

from experiments.study.study_files import StudyData
from realformer_tf.errors import InputError

# What the report reads of a finished run. eval_results.txt (or diverged.txt) marks a
# run finished, so it is copied last: a copy cut short is not taken for a finished run.
KEPT_FILES = ("experiment_bert_config.json", "timing.json", "attention_summary.json", "attention_points.npz")
FINISHED_MARKS = ("eval_results.txt", "diverged.txt")
KEPT_FOLDERS = ("summaries",)
STUDY_DATA = "study_data.json"


def is_finished(run_dir):
    return any(tf.io.gfile.exists(os.path.join(run_dir, name)) for name in FINISHED_MARKS)


def _copy(source, target):
    """Copies a file through a temporary name, so `target` is whole or absent."""
    tf.io.gfile.makedirs(os.path.dirname(target))
    partial = target + ".partial"
    tf.io.gfile.copy(source, partial, overwrite=True)
    tf.io.gfile.rename(partial, target, overwrite=True)


def _kept_paths(run_dir):
    """Paths relative to run_dir of the files to keep, finished marks last."""
    paths = [name for name in KEPT_FILES if tf.io.gfile.exists(os.path.join(run_dir, name))]
    for folder in KEPT_FOLDERS:
        top = os.path.join(run_dir, folder)
        if tf.io.gfile.isdir(top):
            for directory, _, files in tf.io.gfile.walk(top):
                paths += [os.path.relpath(os.path.join(directory, f), run_dir) for f in sorted(files)
                          if not f.endswith(".partial")]
    return paths + [name for name in FINISHED_MARKS if tf.io.gfile.exists(os.path.join(run_dir, name))]


def _copy_run(source_dir, target_dir):
    paths = _kept_paths(source_dir)
    for path in paths:
        _copy(os.path.join(source_dir, path), os.path.join(target_dir, path))
    return paths


def save(run_dir, archived_dir):
    """Copies a finished run's kept files from run_dir to archived_dir; returns the
    paths copied (none when the run is not finished)."""
    if not is_finished(run_dir):
        return []
    return _copy_run(run_dir, archived_dir)


def restore(archived_dir, run_dir):
    """Copies an archived run into run_dir when run_dir does not hold it finished (the
    archived curves replace those of an unfinished attempt there); returns the paths copied (none when there is nothing to restore)."""
    if is_finished(run_dir) or not is_finished(archived_dir):
        return []
    for folder in KEPT_FOLDERS:  # curves of an unfinished local attempt would mix in
        if tf.io.gfile.isdir(os.path.join(run_dir, folder)):
            tf.io.gfile.rmtree(os.path.join(run_dir, folder))
    return _copy_run(archived_dir, run_dir)


def save_study_data(archive_dir, data):
    """Writes the StudyData `data` into the archive (a whole file or none)."""
    tf.io.gfile.makedirs(archive_dir)
    path = os.path.join(archive_dir, STUDY_DATA)
    partial = path + ".partial"
    with tf.io.gfile.GFile(partial, "w") as f:
        json.dump(dataclasses.asdict(data), f, indent=2)
        f.write("\n")
    tf.io.gfile.rename(partial, path, overwrite=True)


def load_study_data(archive_dir):
    """The archive's StudyData, or None when it keeps none (an archive of an older version)."""
    path = os.path.join(archive_dir, STUDY_DATA)
    if not tf.io.gfile.exists(path):
        return None
    fields = {field.name for field in dataclasses.fields(StudyData)}
    try:
        with tf.io.gfile.GFile(path) as f:
            values = json.load(f)
        return StudyData(**{k: v for k, v in values.items() if k in fields})
    except (ValueError, TypeError, AttributeError) as e:
        raise InputError(f"{path} is not a study's data file ({e}); restore it from the archive's source, "
                         "or remove it to have the next run with data write it again") from None


# -- an archive as one file --------------------------------------------------------------------------

PACKED_SUFFIX = ".tar.xz"


def is_packed(path):
    """Whether `path` names a packed archive (one .tar.xz file) rather than a folder."""
    return path.endswith(PACKED_SUFFIX)


def _archive_files(folder):
    """Paths relative to `folder` of every file in it, sorted; copies cut short excluded."""
    found = []
    for directory, _, files in tf.io.gfile.walk(folder):
        found += [os.path.relpath(os.path.join(directory, f), folder) for f in files if not f.endswith(".partial")]
    return sorted(found)


def _tar_bytes(folder):
    """The folder's files as an uncompressed tar that depends on their names and bytes
    only (sorted, no times, owners or modes): the same runs give the same tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in _archive_files(folder):
            with tf.io.gfile.GFile(os.path.join(folder, name), "rb") as f:
                data = f.read()
            info = tarfile.TarInfo(name.replace(os.sep, "/"))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _read_tar(packed):
    with tf.io.gfile.GFile(packed, "rb") as f:
        try:
            return lzma.decompress(f.read())
        except lzma.LZMAError as e:
            raise InputError(f"{packed} is not a packed run archive (.tar.xz): {e}") from None


def pack(folder, packed):
    """Writes the archive `folder` into the file `packed` (.tar.xz), whole or not at all.
    Rewrites it only when the files differ from what it holds, so packing unchanged runs
    leaves it as it was. Returns whether it was written."""
    data = _tar_bytes(folder)
    if tf.io.gfile.exists(packed) and _read_tar(packed) == data:
        return False
    partial = packed + ".partial"
    with tf.io.gfile.GFile(partial, "wb") as f:
        f.write(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    tf.io.gfile.rename(partial, packed, overwrite=True)
    return True


def unpack(packed, folder):
    """Adds the files of the packed archive `packed` to `folder` (files of the same name
    are replaced, others kept); returns their paths relative to `folder`."""
    with tarfile.open(fileobj=io.BytesIO(_read_tar(packed)), mode="r:") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        for member in members:
            parts = member.name.split("/")
            if member.name.startswith("/") or ".." in parts:
                raise InputError(f"{packed} holds {member.name}, outside its folder: not a run archive")
            _write(os.path.join(folder, *parts), tar.extractfile(member).read())
    return [m.name for m in members]


def _write(path, data):
    """Writes `data` through a temporary name, so `path` is whole or absent."""
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path + ".partial", "wb") as f:
        f.write(data)
    tf.io.gfile.rename(path + ".partial", path, overwrite=True)
