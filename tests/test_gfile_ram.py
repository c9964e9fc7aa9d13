"""Every file the scripts read or write goes through tf.io.gfile, as TPU users need
(their files are on gs://). Each script runs with every input copied to ram://
(TensorFlow's in-memory file system, standing in for gs://) and --output_dir /
--export_dir on ram://. A plain open() or os call would fail to find an input, or
write a local folder named "ram:" in the working directory, which must stay empty.

ram:// lives in one process, so each case copies the inputs and runs the program's
main(argv) in this process. ram:// renames a folder without its files, where gs:// moves
every file under it (the SavedModel export writes a temporary folder and renames it):
`gcs_like_rename` renames ram:// folders file by file, as GCS does.
"""

import json
import os

import pytest
import tensorflow as tf

import helpers_data as h

MAX_SEQ, MAX_PRED = 24, 4


def files_under(folder):
    # glob, not walk/listdir: those take any name that merely starts with the folder's
    # name (assets.extra) as inside it (assets); isdir needs the trailing "/" likewise.
    for path in tf.io.gfile.glob(folder + "/*"):
        yield from files_under(path) if tf.io.gfile.isdir(path + "/") else [path]


@pytest.fixture()
def gcs_like_rename(monkeypatch):
    """tf.io.gfile.rename of a ram:// folder moves its files one by one, as GCS does
    (ram:// alone would keep only the folder's name)."""
    rename = tf.io.gfile.rename

    def rename_folder_by_files(src, dst, overwrite=False):
        if not (src.startswith("ram://") and tf.io.gfile.isdir(src + "/")):
            return rename(src, dst, overwrite)
        for path in list(files_under(src)):  # (ram:// cannot rmtree such a folder either)
            tf.io.gfile.makedirs(os.path.dirname(dst + path[len(src):]))
            tf.io.gfile.copy(path, dst + path[len(src):], overwrite)
            tf.io.gfile.remove(path)

    monkeypatch.setattr(tf.io.gfile, "rename", rename_folder_by_files)
    yield
    for folder in ("ram://in", "ram://out"):  # ram:// lives as long as the process
        for path in list(files_under(folder)):
            tf.io.gfile.remove(path)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("gfile_inputs")
    return dict(
        vocab=h.write_vocab(d / "vocab.txt"),
        config=h.write_config(d / "bert_config.json"),
        records=h.write_pretraining_records(d / "records.tfrecord", 8, MAX_SEQ, MAX_PRED),
        glue=h.write_glue_mrpc(str(d / "MRPC"), num_train=6, num_dev=3),
        squad=_write_squad(d / "squad.json"),
    )


def _write_squad(path):
    """Two paragraphs of the tiny corpus (every word in the vocab), one question each."""
    paragraphs = []
    for i, context in enumerate([" ".join(h.sentences(4, seed=1)), " ".join(h.sentences(4, seed=2))]):
        answer = context.split(" . ")[1].split()[-1]
        paragraphs.append({"context": context, "qas": [{
            "id": f"q{i}", "question": f"what {context.split()[2]} {answer}",
            "answers": [{"text": answer, "answer_start": context.index(" " + answer) + 1}]}]})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}, f)
    return str(path)


def _run(tmp_path, script, copies, prepare=None, **flag_values):
    """Runs `script`'s main with `flag_values` in this process, its working directory an
    empty folder; returns the files under ram://out."""
    work = tmp_path / "cwd"
    work.mkdir()
    for local, remote in copies:
        tf.io.gfile.makedirs(os.path.dirname(remote))
        tf.io.gfile.copy(local, remote, overwrite=True)
    if prepare == "classifier_checkpoint":
        _write_classifier_checkpoint("ram://in/bert_config.json", "ram://in/ckpt/bert_model.ckpt")
    proc = h.run_script(f"{script}.py", *h.flags(**flag_values), cwd=str(work))
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    assert os.listdir(work) == [], f"{script} wrote local files: {os.listdir(work)}"
    return [p[len("ram://out/"):] for p in sorted(files_under("ram://out"))]


def _write_classifier_checkpoint(config_path, prefix):
    from realformer_tf import modeling
    from realformer_tf.checkpoints import bert as bert_checkpoint

    model = modeling.BertClassifierModel(modeling.BertConfig.from_json_file(config_path), num_labels=2)
    model._ensure_built()
    bert_checkpoint.save_bert_checkpoint(model, prefix)


def _has(files, *names):
    for name in names:
        assert any(f == name or f.startswith(name) for f in files), (name, files)


def _model_copies(inputs):
    return [(inputs["config"], "ram://in/bert_config.json"), (inputs["vocab"], "ram://in/vocab.txt")]


@pytest.mark.slow
def test_pretraining_on_ram(inputs, tmp_path, gcs_like_rename):
    files = _run(tmp_path, "run_pretraining", [(inputs["records"], "ram://in/records.tfrecord"), *_model_copies(inputs)],
                 input_file="ram://in/records.tfrecord", output_dir="ram://out", bert_config_file="ram://in/bert_config.json",
                 do_train=True, do_eval=True, max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED,
                 train_batch_size=4, eval_batch_size=4, num_train_steps=2, num_warmup_steps=1,
                 save_checkpoints_steps=2, iterations_per_loop=1, max_eval_steps=1)
    _has(files, "checkpoint", "ckpt-2.index", "bert_model.ckpt.index", "bert_config.json", "eval_results.txt",
         "run_config.json", "summaries/train/", "summaries/eval/")


@pytest.mark.slow
def test_classifier_with_export_on_ram(inputs, tmp_path, gcs_like_rename):
    glue = [(os.path.join(inputs["glue"], n), f"ram://in/MRPC/{n}") for n in ("train.tsv", "dev.tsv", "test.tsv")]
    files = _run(tmp_path, "run_classifier", [*glue, *_model_copies(inputs)],
                 task_name="MRPC", data_dir="ram://in/MRPC", vocab_file="ram://in/vocab.txt",
                 bert_config_file="ram://in/bert_config.json", output_dir="ram://out", export_dir="ram://out/export",
                 do_train=True, do_eval=True, do_predict=True, max_seq_length=MAX_SEQ, train_batch_size=2,
                 eval_batch_size=2, predict_batch_size=2, num_train_epochs=1.0)
    _has(files, "train.tf_record", "dev.tf_record", "test.tf_record", "bert_model.ckpt.index", "eval_results.txt",
         "test_results.tsv", "export/1/saved_model.pb", "export/1/assets/")


@pytest.mark.slow
def test_squad_on_ram(inputs, tmp_path, gcs_like_rename):
    files = _run(tmp_path, "run_squad", [(inputs["squad"], "ram://in/squad.json"), *_model_copies(inputs)],
                 vocab_file="ram://in/vocab.txt", bert_config_file="ram://in/bert_config.json",
                 output_dir="ram://out", train_file="ram://in/squad.json", predict_file="ram://in/squad.json",
                 do_train=True, do_predict=True, max_seq_length=MAX_SEQ, doc_stride=8, max_query_length=8,
                 train_batch_size=2, predict_batch_size=2, num_train_epochs=1.0)
    _has(files, "bert_model.ckpt.index", "predictions.json", "nbest_predictions.json", "eval_results.txt")


@pytest.mark.slow
def test_export_saved_model_on_ram(inputs, tmp_path, gcs_like_rename):
    files = _run(tmp_path, "export_saved_model", _model_copies(inputs), prepare="classifier_checkpoint",
                 bert_config_file="ram://in/bert_config.json", init_checkpoint="ram://in/ckpt/bert_model.ckpt",
                 vocab_file="ram://in/vocab.txt", task="classifier", max_seq_length=MAX_SEQ, export_dir="ram://out")
    _has(files, "1/saved_model.pb", "1/variables/variables.index", "1/assets/")
