"""A config that does not state `residual_attention` (Google BERT's and RealFormer's
eleven-field bert_config.json) never silently builds the other architecture: the
weights decide (their masked-LM loss with residual attention on vs off) or the run
stops with one error line; a stated field is always obeyed.

The two tiny pretrained models were trained on a copy task ([CLS] s [SEP] s [SEP] with
tokens masked on either side): a masked token is only recoverable by attending to its
twin, so the attention pattern is what the model learned, and computing it the other
way (adding or dropping the previous layers' scores) visibly loses it. Four layers,
1000 steps each (`train_copy_models`); the checkpoints are committed under
tests/fixtures/copy_task_residual_{on,off}/ (tools/make_evidence_fixtures.py writes
them anew), so the suite does not train them every run."""

import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from official.nlp.tools import tokenization

import helpers_data as h
from realformer_tf.families import variant_evidence as ve
from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.checkpoints import etc_official
from realformer_tf.checkpoints import hf as hf_checkpoint
from realformer_tf.errors import ConfigError, VariantExportError
from realformer_tf.models.bert.config import BertConfig
from realformer_tf.families import get_family
from realformer_tf.jobs.tasks.classifier import ClassifierOptions, run_classifier
from realformer_tf.jobs.tasks.pretraining import PretrainingOptions, run_pretraining
from realformer_tf.jobs.tasks.squad import SquadOptions, run_squad

SEQ, PRED = 32, 5
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, max_position_embeddings=64)
ERROR_HINT = 'add "residual_attention": true'


def eleven_field_config(path):
    """A bert_config.json with BERT's eleven fields only (as both releases ship it)."""
    values = h.tiny_config_dict(**SIZES)
    del values["residual_attention"]
    assert len(values) == 11
    with open(path, "w", encoding="utf-8") as f:
        json.dump(values, f)
    return str(path)


def write_copy_records(path, tokenizer, count, seed):
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for sentence in h.sentences(count, seed):
            pieces = tokenizer.tokenize(sentence)
            tokens = ["[CLS]"] + pieces + ["[SEP]"] + pieces + ["[SEP]"]
            ids = tokenizer.convert_tokens_to_ids(tokens)
            segments = [0] * (len(pieces) + 2) + [1] * (len(pieces) + 1)
            candidates = [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
            positions = sorted(rng.choice(candidates, size=PRED, replace=False).tolist())
            labels = [ids[p] for p in positions]
            for p in positions:
                ids[p] = tokenizer.vocab["[MASK]"]
            pad = SEQ - len(ids)
            values = dict(input_ids=ids + [0] * pad, input_mask=[1] * len(ids) + [0] * pad,
                          segment_ids=segments + [0] * pad, masked_lm_positions=positions,
                          masked_lm_ids=labels, next_sentence_labels=[0])
            feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in values.items()}
            feature["masked_lm_weights"] = tf.train.Feature(float_list=tf.train.FloatList(value=[1.0] * PRED))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return str(path)


def write_copy_mrpc(data_dir):
    """MRPC files whose two sentences are the same (the models' copy structure)."""
    os.makedirs(data_dir, exist_ok=True)
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        rows += [f"{i % 2}\t{i}\t{i + 100}\t{s}\t{s}" for i, s in enumerate(h.sentences(8, seed=len(name)))]
        with open(os.path.join(data_dir, name), "w", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")
    return str(data_dir)


def write_copy_squad(path):
    """SQuAD v1.1 whose question is its context (the copy structure)."""
    paragraphs = []
    for i, s in enumerate(h.sentences(8, seed=3)):
        answer = s.split()[1]
        paragraphs.append({"context": s, "qas": [{"id": f"q{i}", "question": s, "answers": [
            {"text": answer, "answer_start": s.index(" " + answer) + 1}]}]})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}, f)
    return str(path)


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def fixture_dir(value):
    return os.path.join(FIXTURES, f"copy_task_residual_{'on' if value else 'off'}")


def train_copy_models(d, log=lambda m: None):
    """Pretrains the two copy-task models (residual attention on and off) under `d`;
    returns {residual_attention: bert_model.ckpt prefix}."""
    vocab = h.write_vocab(os.path.join(d, "vocab.txt"))
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    records = write_copy_records(os.path.join(d, "copy.tfrecord"), tokenizer, 512, seed=0)
    trained = {}
    for value in (True, False):
        config = h.write_config(os.path.join(d, f"stated_{value}.json"), residual_attention=value,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **SIZES)
        out = os.path.join(d, f"pretrained_{value}")
        run_pretraining(PretrainingOptions(
            input_file=records, output_dir=out, bert_config_file=config, do_train=True, train_batch_size=32,
            max_seq_length=SEQ, max_predictions_per_seq=PRED, num_train_steps=1000, num_warmup_steps=10,
            learning_rate=3e-3, iterations_per_loop=1000, save_checkpoints_steps=1000, seed=1), log=log)
        written = json.load(open(os.path.join(out, "bert_config.json")))
        assert written["residual_attention"] is value  # the run's final config states it
        trained[value] = os.path.join(out, "bert_model.ckpt")
    return trained


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{residual_attention: (checkpoint prefix, eleven-field config)} plus the data."""
    d = tmp_path_factory.mktemp("variant_models")
    vocab = h.write_vocab(d / "vocab.txt")
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    trained = {value: os.path.join(fixture_dir(value), "bert_model.ckpt") for value in (True, False)}
    for value, prefix in trained.items():  # the fixtures fit this vocab and these sizes
        config = BertConfig.from_json_file(os.path.join(fixture_dir(value), "bert_config.json"))
        assert config.residual_attention is value and config.vocab_size == h.vocab_size()
    return dict(trained=trained, config=eleven_field_config(d / "bert_config.json"), vocab=vocab, dir=d,
                records=write_copy_records(d / "eval.tfrecord", tokenizer, 8, seed=9),
                mrpc=write_copy_mrpc(d / "mrpc"), squad=write_copy_squad(d / "squad.json"))


# -- fast: what counts as stated, the decision rule ---------------------------------------
def test_a_file_without_the_field_leaves_it_unstated_and_everything_sees_a_bool(tmp_path):
    config = BertConfig.from_json_file(eleven_field_config(tmp_path / "c.json"))
    assert not config.residual_attention_stated and config.residual_attention is None and config.uses_residual_attention
    # Unstated is a field's value: equality, dataclasses.replace and the JSON round trip keep it.
    assert not dataclasses.replace(config, hidden_dropout_prob=0.0).residual_attention_stated
    assert config != ve.decided(config) and BertConfig.from_dict(config.to_dict()) == config
    assert ve.decided(config).to_dict()["residual_attention"] is True  # what any run writes states it
    assert config.residual_attention is None  # deciding made a new config
    assert config.block_options()["residual_attention"] is True
    assert "residual attention on" in config.describe()
    assert BertConfig.from_dict(dict(h.tiny_config_dict(), residual_attention=True)).residual_attention_stated
    assert BertConfig(vocab_size=10).residual_attention_stated  # the Python default is a statement
    assert dataclasses.replace(config, residual_attention=False).residual_attention_stated


def test_decision_needs_a_clear_margin():
    vocab = 1000  # uniform guessing: 6.9 nats
    assert ve.Evidence(1.0, 4.0, "x", vocab).decision is True
    assert ve.Evidence(4.0, 1.0, "x", vocab).decision is False
    assert ve.Evidence(2.0, 2.3, "x", vocab).decision is None   # gap too small
    assert ve.Evidence(6.8, 7.6, "x", vocab).decision is None   # neither predicts anything
    assert ve.Evidence(float("nan"), 1.0, "x", vocab).decision is None


def test_masked_examples_from_texts_mask_and_label(tmp_path):
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    examples = ve.from_texts([("the cat sees the book today .", "a dog likes the city again .")],
                             tokenizer, 32, "examples")
    b = examples.batch
    ids = tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize("the cat sees the book today .")
                                          + ["[SEP]"] + tokenizer.tokenize("a dog likes the city again .") + ["[SEP]"])
    chosen = b["masked_lm_positions"][0][b["masked_lm_weights"][0] > 0]
    assert len(chosen) == round(len(ids) * 0.15) and 0 not in chosen
    assert [ids[p] for p in chosen] == b["masked_lm_ids"][0][:len(chosen)].tolist()
    assert all(b["input_ids"][0][p] == tokenizer.vocab["[MASK]"] for p in chosen)
    assert b["segment_ids"][0][:len(ids)].tolist() == [0] * 9 + [1] * 8


def test_official_etc_layout_without_the_field_is_plain_etc():
    from realformer_tf.etc_modeling import EtcConfig

    values = h.tiny_etc_config_dict()
    del values["residual_attention"]
    official = EtcConfig.from_dict(dict(values, embedding_size=16))
    assert official.layout == "official" and official.residual_attention is False and official.residual_attention_stated
    ours = EtcConfig.from_dict(values)
    assert ours.residual_attention is None and ours.uses_residual_attention and not ours.residual_attention_stated


# -- the two trained models ---------------------------------------------------------------
@pytest.mark.slow
def test_the_weights_tell_their_architecture(models):
    family, config = get_family("bert"), BertConfig.from_json_file(models["config"])
    job_options = PretrainingOptions(input_file=models["records"], max_seq_length=SEQ, max_predictions_per_seq=PRED)
    from realformer_tf.jobs.tasks.pretraining import PretrainingJob

    examples = PretrainingJob().evidence_examples(job_options, family, config)
    for value, prefix in models["trained"].items():
        evidence = ve.measure(family, config, prefix, examples)
        print(f"trained with residual attention {value}: {evidence.describe()}")
        assert evidence.decision is value
        # Python load_bert_checkpoint has no examples of the run: on the seeded random ids
        # these tiny copy-task models tell nothing clear, so loading stops and asks.
        from realformer_tf import modeling

        model = modeling.BertPretrainingModel(BertConfig.from_json_file(models["config"]))
        with pytest.raises(ConfigError, match="do not tell clearly .*" + ERROR_HINT):
            modeling.load_bert_checkpoint(model, prefix)
        # The checkpoint tier reads tensors only: it asks for the decision or the field.
        with pytest.raises(ConfigError, match="does not state residual_attention.*modeling.load_bert_checkpoint"):
            bert_checkpoint.load_bert_checkpoint(model, prefix)


def _classifier_options(models, out, config, init):
    return ClassifierOptions(
        task_name="mrpc", data_dir=models["mrpc"], vocab_file=models["vocab"], bert_config_file=config,
        init_checkpoint=init, output_dir=str(out), do_train=True, max_seq_length=SEQ, train_batch_size=8,
        num_train_epochs=1, iterations_per_loop=1, save_checkpoints_steps=10, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("value", [True, False])
def test_run_classifier_builds_what_the_weights_were_trained_as(models, tmp_path, value):
    lines = []
    trainer = run_classifier(_classifier_options(models, tmp_path / "out", models["config"],
                                                 models["trained"][value]), log=lines.append)
    assert trainer.model.config.residual_attention is value
    decided = [line for line in lines if line.startswith("residual attention")]
    assert len(decided) == 1 and f"residual attention {'on' if value else 'off'}: decided" in decided[0]
    assert "masked-LM loss" in decided[0] and "train examples of --data_dir" in decided[0]
    assert lines[1].startswith("RealFormer" if value else "BERT")  # the announced variant follows
    written = json.load(open(tmp_path / "out" / "bert_config.json"))
    assert written["residual_attention"] is value
    assert json.load(open(tmp_path / "out" / "run_config.json"))["bert_config"]["residual_attention"] is value
    if value:
        _exports_from_the_decision(models, tmp_path)

    # A stated field is obeyed, against the evidence, without a check.
    stated = h.write_config(tmp_path / "stated.json", residual_attention=not value, **SIZES)
    lines = []
    trainer = run_classifier(_classifier_options(models, tmp_path / "out2", stated, models["trained"][value]),
                             log=lines.append)
    assert trainer.model.config.residual_attention is (not value)
    assert not any(line.startswith("residual attention") for line in lines)


def _exports_from_the_decision(models, tmp_path):
    """The mission's main path from a release whose config does not say: the fine-tuning
    run decided from the masked-LM head, and its fine-tuned checkpoint (which has no such
    head) exports with --export_dir and again from its output folder alone."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    options = dataclasses.replace(_classifier_options(models, tmp_path / "exported", models["config"],
                                                      models["trained"][True]), export_dir=str(tmp_path / "export"))
    run_classifier(options, log=lambda m: None)
    out = tmp_path / "exported"
    again = h.run_script("export_saved_model.py", *h.flags(
        bert_config_file=out / "bert_config.json", init_checkpoint=out / "bert_model.ckpt", vocab_file=models["vocab"],
        task_name="MRPC", max_seq_length=SEQ, export_dir=tmp_path / "export_again"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "RealFormer" in again.stdout and "decided" not in again.stdout  # the run's decision, not asked again
    texts = [s for s in h.sentences(3, seed=5)]
    served = [tf.saved_model.load(str(tmp_path / folder / "1")).signatures["serving_default"](
        text_a=tf.constant(texts), text_b=tf.constant(texts))["probabilities"].numpy()
        for folder in ("export", "export_again")]
    np.testing.assert_allclose(served[0], served[1], atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("value", [True, False])
def test_run_squad_builds_what_the_weights_were_trained_as(models, tmp_path, value):
    lines = []
    options = SquadOptions(
        vocab_file=models["vocab"], train_file=models["squad"], bert_config_file=models["config"],
        init_checkpoint=models["trained"][value], output_dir=str(tmp_path / "out"), do_train=True,
        max_seq_length=SEQ, doc_stride=16, max_query_length=12, train_batch_size=8, num_train_epochs=1,
        iterations_per_loop=1, save_checkpoints_steps=10, seed=1)
    trainer = run_squad(options, log=lines.append)
    assert trainer.model.config.residual_attention is value
    assert any(line.startswith(f"residual attention {'on' if value else 'off'}: decided") for line in lines)
    assert json.load(open(tmp_path / "out" / "bert_config.json"))["residual_attention"] is value


@pytest.mark.slow
def test_script_without_evidence_stops_with_one_error_line(models, tmp_path):
    """A fine-tuned classifier checkpoint has no masked-LM head: run_classifier.py
    with the eleven-field config stops and says which field to set."""
    out = tmp_path / "finetuned"
    stated = h.write_config(tmp_path / "stated.json", residual_attention=False, **SIZES)
    run_classifier(_classifier_options(models, out, stated, models["trained"][False]), log=lambda m: None)
    proc = h.run_script("run_classifier.py", *h.flags(
        task_name="mrpc", data_dir=models["mrpc"], vocab_file=models["vocab"], bert_config_file=models["config"],
        init_checkpoint=str(out / "bert_model.ckpt"), output_dir=str(tmp_path / "again"), do_train=True,
        max_seq_length=SEQ, train_batch_size=8, num_train_epochs=1))
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no masked-LM head" in errors[0] and ERROR_HINT in errors[0], proc.stderr[-3000:]
    assert not os.path.exists(tmp_path / "again" / "run_config.json")  # stopped before claiming output_dir


# -- Hugging Face exports of variants: refused, or written with their own remote code -----
def test_hf_export_of_a_variant_is_refused_unless_opted_in_and_reads_back_exactly(tmp_path):
    from realformer_tf import modeling

    config = h.tiny_config(residual_attention=True)
    model = modeling.BertPretrainingModel(config)
    inputs = {"input_ids": np.array([[2, 7, 9, 3]]), "masked_lm_positions": np.array([[1, 2]])}
    want = model(inputs)["masked_lm_logits"].numpy()
    with pytest.raises(VariantExportError, match="--hf_allow_variant"):
        bert_checkpoint.save_hf_folder(model, str(tmp_path / "refused"))
    assert not os.path.exists(tmp_path / "refused")
    folder = bert_checkpoint.save_hf_folder(model, str(tmp_path / "hf"), allow_variant=True)
    written = json.load(open(os.path.join(folder, "config.json")))
    assert written["model_type"] == "realformer_bert" and written["residual_attention"] is True
    assert written["architectures"] == ["RealFormerTfBertForPreTraining"]
    assert hf_checkpoint.is_hf_folder(folder)
    again_config = hf_checkpoint.load_bert_config(folder)
    assert again_config == config and again_config.residual_attention_stated
    again = modeling.BertPretrainingModel(again_config)
    bert_checkpoint.load_bert_checkpoint(again, folder)
    np.testing.assert_array_equal(again(inputs)["masked_lm_logits"].numpy(), want)
    # Plain BERT stays a stock "bert" folder.
    plain = bert_checkpoint.save_hf_folder(modeling.BertModel(h.tiny_config(residual_attention=False)), str(tmp_path / "plain"))
    assert json.load(open(os.path.join(plain, "config.json")))["model_type"] == "bert"


def test_transformers_loads_a_variant_folder_only_with_trust_remote_code(tmp_path, monkeypatch):
    """Without trust_remote_code transformers' Auto classes refuse the folder (its model
    type is none of theirs; they never compute plain BERT from it). With it they run the
    folder's own code: tests/test_hf_remote_code.py."""
    transformers = pytest.importorskip("transformers")
    from transformers import dynamic_module_utils

    from realformer_tf import modeling

    monkeypatch.setattr(dynamic_module_utils, "TIME_OUT_REMOTE_CODE", 0)  # refused at once, never a prompt
    folder = bert_checkpoint.save_hf_folder(modeling.BertModel(h.tiny_config()), str(tmp_path / "hf"), allow_variant=True)
    for auto_class in (transformers.AutoConfig, transformers.AutoModel):
        with pytest.raises(ValueError, match="trust_remote_code=True"):
            auto_class.from_pretrained(folder)


def test_convert_checkpoint_says_once_that_a_variant_folder_is_written(tmp_path, caplog):
    """--hf_allow_variant: one `warning:` line saying what the variant's folder is, not a
    second one logged by the writer (absl's log lines reach pytest's log capture,
    a terminal's stderr otherwise)."""
    from realformer_tf import modeling

    config = h.write_config(tmp_path / "bert_config.json")  # states residual attention on
    prefix = bert_checkpoint.save_bert_checkpoint(modeling.BertPretrainingModel(h.tiny_config()),
                                                  str(tmp_path / "in" / "m.ckpt"))
    proc = h.run_script("convert_checkpoint.py", *h.flags(
        bert_config_file=config, input_checkpoint=prefix, output_format="hf", hf_allow_variant=True,
        vocab_file=h.write_vocab(tmp_path / "vocab.txt"), output_checkpoint=tmp_path / "hf"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    assert output.count("is not vanilla post-LN BERT") == 1 and output.count("realformer_bert") == 1, output
    (line,) = [line for line in output.splitlines() if "realformer_bert" in line]
    assert line.startswith("warning: ")
    assert not [r.getMessage() for r in caplog.records if "realformer_bert" in r.getMessage()]
    assert json.load(open(tmp_path / "hf" / "config.json"))["model_type"] == "realformer_bert"


@pytest.mark.slow
def test_convert_checkpoint_script_refuses_or_opts_in_and_converts_etc(tmp_path):
    from realformer_tf import etc_modeling, modeling

    config = h.write_config(tmp_path / "bert_config.json")  # states residual attention on
    prefix = bert_checkpoint.save_bert_checkpoint(modeling.BertPretrainingModel(h.tiny_config()), str(tmp_path / "in" / "m.ckpt"))
    args = dict(bert_config_file=config, input_checkpoint=prefix, output_format="hf")
    # No vocab anywhere: one error line before anything is written (a folder without
    # its tokenizer would load one that maps every word wrongly).
    proc = h.run_script("convert_checkpoint.py", *h.flags(output_checkpoint=str(tmp_path / "no_vocab"), **args))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "--vocab_file" in errors[0], proc.stderr[-2000:]
    assert not os.path.exists(tmp_path / "no_vocab")
    args["vocab_file"] = h.write_vocab(tmp_path / "vocab.txt")
    proc = h.run_script("convert_checkpoint.py", *h.flags(output_checkpoint=str(tmp_path / "no"), **args))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "--hf_allow_variant" in errors[0], proc.stderr[-2000:]
    proc = h.run_script("convert_checkpoint.py", *h.flags(output_checkpoint=str(tmp_path / "yes"),
                                                          hf_allow_variant=True, **args))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.load(open(tmp_path / "yes" / "config.json"))["model_type"] == "realformer_bert"
    assert (tmp_path / "yes" / "vocab.txt").read_text() == (tmp_path / "vocab.txt").read_text()
    assert json.load(open(tmp_path / "yes" / "tokenizer_config.json"))["do_lower_case"] is True

    # ETC goes through its model family: a training-style checkpoint -> ETC names.
    etc_config = tmp_path / "etc_config.json"
    etc_config.write_text(json.dumps(h.tiny_etc_config_dict()))
    etc = etc_modeling.EtcClassifierModel(etc_modeling.EtcConfig.from_json_file(str(etc_config)), num_labels=2)
    from realformer_tf.training.trainer import checkpointable_weights

    saved = tf.train.Checkpoint(model_weights=checkpointable_weights(etc)).write(str(tmp_path / "etc" / "ckpt-1"))
    proc = h.run_script("convert_checkpoint.py", *h.flags(
        bert_config_file=str(etc_config), input_checkpoint=saved, output_checkpoint=str(tmp_path / "etc_model.ckpt"),
        model_type="etc", task="classifier"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = dict(tf.train.list_variables(str(tmp_path / "etc_model.ckpt")))
    assert "classifier/output_weights" in names and any(n.startswith("etc/") for n in names)


def test_etc_evidence_runs_through_the_family_and_random_weights_tell_nothing(tmp_path):
    """ETC (our layout) without the field: the same evidence through the ETC family's
    inputs; random weights give no clear margin, a classifier checkpoint no head."""
    from realformer_tf.etc_modeling import EtcClassifierModel, EtcConfig, EtcPretrainingModel

    values = h.tiny_etc_config_dict()
    del values["residual_attention"]
    config = EtcConfig.from_dict(values)
    family = get_family("etc")
    prefix = etc_official.save_etc_checkpoint(EtcPretrainingModel(EtcConfig(**h.tiny_etc_config_dict())),
                                              str(tmp_path / "p" / "etc_model.ckpt"))
    evidence = ve.measure(family, config, prefix)
    assert np.isfinite([evidence.loss_on, evidence.loss_off]).all() and evidence.decision is None
    with pytest.raises(ConfigError, match="do not tell clearly"):
        ve.resolve(family, config, prefix)
    classifier = EtcClassifierModel(EtcConfig(**h.tiny_etc_config_dict()), num_labels=2)
    prefix = etc_official.save_etc_checkpoint(classifier, str(tmp_path / "c" / "etc_model.ckpt"))
    with pytest.raises(ConfigError, match="no masked-LM head"):
        ve.resolve(family, config, prefix)
    assert ve.resolve(family, EtcConfig(**h.tiny_etc_config_dict()), prefix).residual_attention is True  # stated
