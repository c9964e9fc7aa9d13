"""run_classifier: GLUE file layouts, metrics, tokenizer parity, and end-to-end runs."""

import os

import numpy as np
import pytest
import tensorflow as tf

from helpers_data import flags, run_script, write_config, write_vocab
from realformer_tf.data import glue
from realformer_tf.errors import InputError
from realformer_tf.jobs.tasks.classifier import evaluation_metrics

A, B = "the cat sees the river", "a dog likes the book"


def _write(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join("\t".join(r) for r in rows) + "\n")


def write_task(data_dir, task_name, n=6):
    """Writes train/dev/test files in the layout GLUE distributes for `task_name`."""
    _, task = glue.get_task(task_name)
    for split in ("train", "dev", "test"):
        layout = getattr(task, split)
        # MNLI's train/dev rows end with label1..label5 and gold_label (12 columns); XNLI's
        # dev/test carry parses and labels the task does not read.
        width = layout.columns or max(layout.needed(), {"mnli": 12, "mnli-mm": 12, "xnli": 10}.get(task_name, 0))
        rows = [[f"h{i}" for i in range(width)]] if layout.header else []
        for k in range(n):
            row = [f"x{k}"] * width
            row[layout.text_a] = A if k % 2 else B
            if layout.text_b is not None:
                row[layout.text_b] = B
            if layout.label is not None:
                row[layout.label] = str(k % 5 * 1.25) if task.is_regression else task.labels[k % len(task.labels)]
            if task_name == "xnli" and split != "train":
                row[0] = "en"
            rows.append(row)
        _write(os.path.join(data_dir, layout.file), rows)
    return task


@pytest.mark.parametrize("task_name", sorted(glue.TASKS))
def test_every_layout_reads_text_and_labels(tmp_path, task_name):
    task = write_task(str(tmp_path), task_name)
    for split in ("train", "dev", "test"):
        examples = glue.read_examples(task_name, str(tmp_path), split)
        assert len(examples) == 6
        assert examples[0].text_a == B and examples[1].text_a == A
        layout = getattr(task, split)
        assert (examples[0].text_b == B) == (layout.text_b is not None)
        if split != "test":
            expected = [str(k % 5 * 1.25) if task.is_regression else task.labels[k % len(task.labels)]
                        for k in range(6)]
            got = [str(e.label) for e in examples]
            assert got == expected


def test_mrpc_bom_and_aliases(tmp_path):
    write_task(str(tmp_path), "mrpc")
    path = tmp_path / "train.tsv"
    path.write_bytes("\ufeff".encode() + path.read_bytes())
    assert glue.get_task("MRPC")[0] == "mrpc" and glue.get_task("SST-2")[0] == "sst-2"
    assert len(glue.read_examples("MRPC", str(tmp_path), "train")) == 6


def test_missing_columns_names_file_and_line(tmp_path):
    _write(str(tmp_path / "train.tsv"), [["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                                         ["1", "2", "3", A, B], ["1", "2", A]])
    with pytest.raises(InputError, match=r"train.tsv, line 3: 3 column\(s\), expected at least 5"):
        glue.read_examples("mrpc", str(tmp_path), "train")


def test_extra_column_is_named_where_the_layout_fixes_the_count(tmp_path):
    """SST-2's `sentence<TAB>label`: a third column (a note, or a tab inside the
    sentence) is one line-numbered error naming it; MNLI's rows keep their extra columns."""
    _write(str(tmp_path / "train.tsv"), [["sentence", "label"], [A, "0"], [A, "1", "a note"]])
    with pytest.raises(InputError, match=r"train.tsv, line 3: 3 columns, expected 2 for task sst-2; "
                                         r"column 3 \('a note'\) is extra"):
        glue.read_examples("sst-2", str(tmp_path), "train")
    _write(str(tmp_path / "dev.tsv"), [["sentence", "label"], ["the cat\tsees the river", "0"]])  # a tab inside
    with pytest.raises(InputError, match=r"dev.tsv, line 2: 3 columns, expected 2 .* column 3 \('0'\)"):
        glue.read_examples("sst-2", str(tmp_path), "dev")
    write_task(str(tmp_path / "mnli"), "mnli")
    path = tmp_path / "mnli" / "dev_matched.tsv"
    rows = [line.split("\t") for line in path.read_text().splitlines()]  # dev has label1..label5: 16 columns
    _write(str(path), [row[:-1] + ["label2", "label3", "label4", "label5"] + row[-1:] for row in rows])
    assert [e.label for e in glue.read_examples("mnli", str(tmp_path / "mnli"), "dev")] == \
        [row[-1] for row in rows[1:]]


def test_unknown_label_is_named(tmp_path):
    _write(str(tmp_path / "dev.tsv"), [["index", "sentence1", "sentence2", "label"], ["0", A, B, "maybe"]])
    with pytest.raises(InputError, match=r"label 'maybe' is not one of entailment, not_entailment"):
        glue.read_examples("rte", str(tmp_path), "dev")


def test_unknown_task_and_missing_file(tmp_path):
    with pytest.raises(InputError, match="--task_name='squad' is not one of"):
        glue.get_task("squad")
    with pytest.raises(InputError, match="dev.tsv does not exist"):
        glue.read_examples("cola", str(tmp_path), "dev")


def test_metrics_match_hand_computed_values():
    logits = np.log(np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7], [0.4, 0.6]]))
    labels = np.array([0, 1, 1, 1, 0])
    # predictions 0 1 0 1 1 -> TP=2, FP=1, FN=1, TN=1
    mrpc = evaluation_metrics(glue.TASKS["mrpc"], logits, labels)
    assert mrpc["eval_accuracy"] == pytest.approx(3 / 5)
    assert mrpc["eval_f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    nll = -np.mean(np.log([0.9, 0.8, 0.4, 0.7, 0.4]))
    assert mrpc["eval_loss"] == pytest.approx(nll, rel=1e-6) and mrpc["loss"] == mrpc["eval_loss"]
    cola = evaluation_metrics(glue.TASKS["cola"], logits, labels)
    mcc = (2 * 1 - 1 * 1) / np.sqrt((2 + 1) * (2 + 1) * (1 + 1) * (1 + 1))
    assert cola["eval_mcc"] == pytest.approx(mcc)
    preds, gold = np.array([[1.0], [2.0], [3.5]]), np.array([1.5, 2.0, 3.0])
    sts = evaluation_metrics(glue.TASKS["sts-b"], preds, gold)
    assert sts["eval_pearson"] == pytest.approx(np.corrcoef(preds[:, 0], gold)[0, 1])
    assert sts["eval_spearman"] == pytest.approx(1.0)
    assert sts["eval_loss"] == pytest.approx(np.mean((preds[:, 0] - gold) ** 2))


TRICKY = [
    "Héllo, Wörld! Crème brûlée?",
    "naïve café — résumé",
    "東京は日本の首都です",
    "tab\tand\nnewline  and\u00a0nbsp",
    "control\u0000chars\u200b and \ufffd",
    "hyphen-ated (parens) [brackets] {braces} 'quotes' \"double\"",
    "supercalifragilisticexpialidocious" * 8,
    "UPPER lower MiXeD 123 4.5 $6",
    "emoji 🙂 and ümlaut",
    "zero\u200bwidth soft\u00adhyphen bidi\u202emark\u3000ideographic space",
]


@pytest.mark.parametrize("lower_case", [True, False])
def test_tokenizer_matches_the_in_graph_serving_tokenizer(tmp_path, lower_case):
    """The Python-side tokenizer (Model Garden's port of the original BERT one) and the
    in-graph tokenizer of the serving SavedModel (tensorflow-text WordPiece after the
    original's clean-up, lower-casing and splitting rebuilt from string ops), two
    independent implementations of the same algorithm, agree on tricky strings."""
    from official.nlp.tools import tokenization

    from realformer_tf.serving.text_encoder import BertTextEncoder

    words = ["hello", "world", "creme", "brulee", "naive", "cafe", "resume", "tab", "and", "newline",
             "nbsp", "control", "chars", "hyphen", "ated", "parens", "brackets", "braces", "quotes",
             "double", "upper", "lower", "mixed", "emoji", "umlaut", "super", "##cal", "##if", "##rag",
             "Hello", "World", "UPPER", "東", "京", "は", "日", "本", "の", "首", "都", "で", "す"]
    punct = list(",!?—-()[]{}'\".$")
    vocab = write_vocab(tmp_path / "vocab.txt", words=words + punct + list("0123456789"))
    python_side = tokenization.FullTokenizer(vocab, do_lower_case=lower_case)
    in_graph = BertTextEncoder(vocab, do_lower_case=lower_case, max_seq_length=128)
    got = in_graph.tokenize(tf.constant(TRICKY)).to_list()
    for text, tokens in zip(TRICKY, got):
        assert [t.decode() for t in tokens] == python_side.tokenize(text), text


def _run_classifier(tmp_path, task_name, **extra):
    data_dir = tmp_path / "data"
    write_task(str(data_dir), task_name, n=12)
    out = tmp_path / "out"
    args = flags(
        task_name=task_name.upper(), do_train=True, do_eval=True, do_predict=True, data_dir=data_dir,
        vocab_file=write_vocab(tmp_path / "vocab.txt"),
        bert_config_file=write_config(tmp_path / "bert_config.json", residual_attention=True),
        max_seq_length=24, train_batch_size=4, eval_batch_size=5, predict_batch_size=5,
        learning_rate=1e-3, num_train_epochs=2.0, iterations_per_loop=3, output_dir=out,
        **extra,
    )
    result = run_script("run_classifier.py", *args, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return out, result


@pytest.mark.slow
@pytest.mark.parametrize("task_name,metric", [("mrpc", "eval_f1"), ("cola", "eval_mcc"),
                                              ("sts-b", "eval_pearson"), ("mnli", "eval_accuracy")])
def test_end_to_end_train_eval_predict(tmp_path, task_name, metric):
    out, result = _run_classifier(tmp_path, task_name)
    assert result.stdout.splitlines()[0].startswith("RealFormer: residual attention on")
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
    expected = {"eval_loss", "global_step", "loss", metric} | (
        set() if task_name == "sts-b" else {"eval_accuracy"})
    assert expected <= set(results)
    assert int(results["global_step"]) == int(12 / 4 * 2.0)
    assert all(np.isfinite(float(v)) for v in results.values())
    rows = [[float(x) for x in line.split("\t")] for line in (out / "test_results.tsv").read_text().splitlines()]
    assert len(rows) == 12  # 12 test examples, batch 5: the padded tail is dropped, not the data
    if task_name == "sts-b":
        assert all(len(r) == 1 for r in rows)
    else:
        n = len(glue.TASKS[task_name].labels)
        assert all(len(r) == n and abs(sum(r) - 1) < 1e-5 for r in rows)
    assert (out / "bert_model.ckpt.index").exists()
