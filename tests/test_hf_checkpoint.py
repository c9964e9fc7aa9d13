"""Hugging Face BERT folders (config.json + model.safetensors) in both directions.

The fixtures under tests/fixtures/hf_* were written by `transformers` itself
(tools/make_hf_fixture.py, random weights, eval mode) together with its outputs on
recorded inputs; these tests need neither torch nor transformers. Our models must
reproduce transformers' outputs within 1e-5, and folders we write must load back
bit-exactly.
"""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import safetensors.numpy

import bert_numpy
import helpers_data as h
from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.families import get_family
from realformer_tf import modeling
from realformer_tf.jobs import convert
from realformer_tf.checkpoints import hf as hf_checkpoint
from realformer_tf.errors import CheckpointError
from realformer_tf.errors import ConfigError
from realformer_tf.models.bert.config import BertConfig

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
TOLERANCE = 1e-5


def fixture(name):
    return os.path.join(FIXTURES, name)


def recorded(folder):
    data = np.load(os.path.join(folder, "outputs.npz"))
    inputs = {"input_ids": data["input_ids"], "input_mask": data["attention_mask"],
              "segment_ids": data["token_type_ids"]}
    return inputs, data


def load_task_model(folder, task, config=None, num_labels=3):
    config = config or hf_checkpoint.load_hf_config(folder)
    model = get_family("bert").build_model(config, task, num_labels=num_labels)
    bert_checkpoint.load_bert_checkpoint(model, folder)
    return model


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def test_pretraining_folder_matches_transformers():
    folder = fixture("hf_bert_pretraining_gelu")
    config = hf_checkpoint.load_hf_config(folder)
    assert config.hidden_act == "gelu_exact" and config.residual_attention is False
    model = load_task_model(folder, "pretraining")
    inputs, want = recorded(folder)
    seq = inputs["input_ids"].shape[1]
    positions = np.tile(np.arange(seq), (inputs["input_ids"].shape[0], 1))
    out = model(dict(inputs, masked_lm_positions=positions), training=False)
    diffs = {
        "last_hidden_state": max_diff(out["sequence_output"], want["last_hidden_state"]),
        "prediction_logits": max_diff(out["masked_lm_logits"], want["prediction_logits"]),
        "seq_relationship_logits": max_diff(out["next_sentence_logits"], want["seq_relationship_logits"]),
    }
    print("HF BertForPreTraining (erf gelu) -> ours, max |diff|:", diffs)
    assert max(diffs.values()) < TOLERANCE, diffs


def test_erf_gelu_is_needed_to_match():
    """The tolerance separates the two GELU forms: reading HF "gelu" as BERT's tanh
    form would be caught."""
    folder = fixture("hf_bert_pretraining_gelu")
    config = hf_checkpoint.load_hf_config(folder)
    wrong = BertConfig.from_dict(dict(config.to_dict(), hidden_act="gelu"))
    model = load_task_model(folder, "encoder", config=wrong)
    inputs, want = recorded(folder)
    assert max_diff(model(inputs)["sequence_output"], want["last_hidden_state"]) > 20 * TOLERANCE


def test_bare_bert_model_folder_tanh_gelu():
    folder = fixture("hf_bert_model_gelu_new")
    config = hf_checkpoint.load_hf_config(folder)
    assert config.hidden_act == "gelu"
    model = load_task_model(folder, "encoder")
    inputs, want = recorded(folder)
    out = model(inputs, training=False)
    diffs = [max_diff(out["sequence_output"], want["last_hidden_state"]),
             max_diff(out["pooled_output"], want["pooler_output"])]
    print("HF BertModel (gelu_new, no prefix) -> ours, max |diff|:", diffs)
    assert max(diffs) < TOLERANCE


def test_classifier_and_qa_folders():
    folder = fixture("hf_bert_classifier_tanh")
    assert hf_checkpoint.load_hf_config(folder).hidden_act == "gelu"  # gelu_pytorch_tanh
    model = load_task_model(folder, "classifier", num_labels=3)
    inputs, want = recorded(folder)
    diffs = [max_diff(model(inputs)["logits"], want["logits"]),
             max_diff(model.bert(inputs)["sequence_output"], want["last_hidden_state"])]

    folder = fixture("hf_bert_qa_gelu")
    model = load_task_model(folder, "squad")  # that class has no pooler: left as built
    inputs, want = recorded(folder)
    out = model(inputs)
    diffs += [max_diff(out["start_logits"], want["start_logits"]),
              max_diff(out["end_logits"], want["end_logits"])]
    print("HF classifier / QA -> ours, max |diff|:", diffs)
    assert max(diffs) < TOLERANCE


def test_folder_with_gamma_beta_names_and_encoder_from_task_folder(tmp_path):
    """Older files name LayerNorm parameters gamma/beta; an encoder loads from a task
    folder (heads ignored) and a classifier fine-tunes from an encoder folder."""
    source = fixture("hf_bert_model_gelu_new")
    folder = str(tmp_path / "old")
    shutil.copytree(source, folder)
    tensors = safetensors.numpy.load_file(os.path.join(source, "model.safetensors"))
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in tensors.items()}
    assert any("gamma" in k for k in renamed)
    safetensors.numpy.save_file(renamed, os.path.join(folder, "model.safetensors"))
    inputs, want = recorded(folder)
    model = load_task_model(folder, "encoder")
    assert max_diff(model(inputs)["sequence_output"], want["last_hidden_state"]) < TOLERANCE

    encoder = load_task_model(fixture("hf_bert_pretraining_gelu"), "encoder")
    assert encoder.pooler.kernel.shape == (24, 24)
    classifier = get_family("bert").build_model(hf_checkpoint.load_hf_config(folder), "classifier", 4)
    bert_checkpoint.load_bert_checkpoint(classifier, folder, skip_heads=True)
    np.testing.assert_array_equal(classifier.bert.pooler.kernel.numpy(),
                                  tensors["pooler.dense.weight"].T)


def test_names_seen_by_the_scripts():
    """Scripts decide what to load from list_checkpoint(resolve_checkpoint(...))."""
    folder = fixture("hf_bert_pretraining_gelu")
    assert ckpt.resolve_checkpoint(folder) == folder
    names = ckpt.list_checkpoint(folder)
    assert names["bert/encoder/layer_1/intermediate/dense/kernel"] == [24, 40]  # transposed
    assert "cls/seq_relationship/output_weights" in names
    assert "output_weights" in ckpt.list_checkpoint(fixture("hf_bert_classifier_tanh"))
    assert "cls/squad/output_bias" in ckpt.list_checkpoint(fixture("hf_bert_qa_gelu"))


def test_our_export_of_a_transformers_model_reproduces_its_files(tmp_path):
    """Loading transformers' folder and writing it again gives the same tensors (names,
    layout, values) and an equivalent config."""
    for name, task in (("hf_bert_pretraining_gelu", "pretraining"), ("hf_bert_qa_gelu", "squad"),
                       ("hf_bert_classifier_tanh", "classifier"), ("hf_bert_model_gelu_new", "encoder")):
        source = fixture(name)
        written = bert_checkpoint.save_hf_folder(load_task_model(source, task), str(tmp_path / name))
        want = safetensors.numpy.load_file(os.path.join(source, "model.safetensors"))
        got = safetensors.numpy.load_file(os.path.join(written, "model.safetensors"))
        assert sorted(got) == sorted(want), name
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        with open(os.path.join(source, "config.json")) as f:
            want_config = json.load(f)
        with open(os.path.join(written, "config.json")) as f:
            got_config = json.load(f)
        for key in ("hidden_size", "num_hidden_layers", "architectures", "layer_norm_eps",
                    "vocab_size", "type_vocab_size", "model_type"):
            assert got_config[key] == want_config[key], (name, key)
        # gelu_pytorch_tanh is written back as gelu_new: the same function.
        assert (hf_checkpoint.config_from_hf_dict(got_config)
                == hf_checkpoint.config_from_hf_dict(want_config)), name
        assert "residual_attention" not in got_config


SIZES = dict(vocab_size=31, hidden_size=15, num_hidden_layers=2, num_attention_heads=3,
             intermediate_size=22, max_position_embeddings=12, type_vocab_size=3)
EXPORT_VARIANTS = {
    "vanilla-post-exact-gelu": dict(residual_attention=False, hidden_act="gelu_exact"),
    "vanilla-pre": dict(residual_attention=False, layer_norm_type="pre"),
    "realformer-post": dict(use_running_mean=True),
    "normformer": dict(layer_norm_type="normformer", normformer_residual_scale=True,
                       normformer_head_scale_position="after_projection"),
}
HEADS = {"pretraining": "pretraining", "classifier": "classifier", "squad": "squad", "encoder": None}


def random_model(overrides, task, seed):
    config = BertConfig(**SIZES, **overrides)
    model = get_family("bert").build_model(config, task, num_labels=4)
    weights = bert_numpy.random_weights(config.to_dict(), np.random.default_rng(seed),
                                        head=HEADS[task], num_labels=4)
    for name, variable in bert_checkpoint.bert_variables(model).items():
        variable.assign(weights[name])
    return model


def model_inputs(task):
    rng = np.random.default_rng(5)
    inputs = {"input_ids": rng.integers(0, 31, (2, 9)), "segment_ids": rng.integers(0, 3, (2, 9)),
              "input_mask": np.array([[1] * 9, [1] * 6 + [0] * 3])}
    if task == "pretraining":
        inputs["masked_lm_positions"] = np.array([[1, 4, 8], [0, 2, 5]])
    return inputs


# Vanilla BERT with every head; each other variant with one.
EXPORT_CASES = [("vanilla-post-exact-gelu", task) for task in sorted(HEADS)] + [
    ("vanilla-pre", "classifier"), ("realformer-post", "pretraining"), ("normformer", "squad")]


@pytest.mark.parametrize("variant,task", EXPORT_CASES)
def test_export_loads_back_bit_exact(variant, task, tmp_path, caplog):
    model = random_model(EXPORT_VARIANTS[variant], task, seed=len(variant) + len(task))
    # Variants stock transformers cannot compute need the opt-in (test_variant_evidence).
    folder = bert_checkpoint.save_hf_folder(model, str(tmp_path / "hf"), allow_variant=variant != "vanilla-post-exact-gelu")
    # The opt-in is the caller's to report (convert_checkpoint.py: one warning line).
    assert not any("stock transformers" in r.getMessage() for r in caplog.records)
    config = hf_checkpoint.load_bert_config(folder)  # the folder as --bert_config_file
    assert config == model.config
    again = get_family("bert").build_model(config, task, num_labels=4)
    bert_checkpoint.load_bert_checkpoint(again, folder)
    got, want = bert_checkpoint.bert_variables(again), bert_checkpoint.bert_variables(model)
    skipped = {n for n in want if task == "squad" and n.startswith("bert/pooler/")}
    for name in set(want) - skipped:
        np.testing.assert_array_equal(got[name].numpy(), want[name].numpy(), err_msg=name)
    out, ref = again(model_inputs(task)), model(model_inputs(task))
    for key in ref:
        if key not in ("encoder_outputs", "attention_scores"):
            np.testing.assert_array_equal(np.asarray(out[key]), np.asarray(ref[key]), err_msg=key)


def test_hf_config_mapping_and_refusals(tmp_path):
    with open(os.path.join(fixture("hf_bert_classifier_tanh"), "config.json")) as f:
        base = json.load(f)
    config = hf_checkpoint.load_bert_config(os.path.join(fixture("hf_bert_classifier_tanh"), "config.json"))
    assert (config.hidden_size, config.intermediate_size, config.hidden_act) == (24, 40, "gelu")
    refused = {
        "model_type": ("roberta", "model_type"),
        "position_embedding_type": ("relative_key", "position_embedding_type"),
        "layer_norm_eps": ("x", "layer_norm_eps"),
        "hidden_act": ("quick_gelu", "quick_gelu"),
        "is_decoder": (True, "is_decoder"),
    }
    for field, (value, named) in refused.items():
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps(dict(base, **{field: value})))
        with pytest.raises(ConfigError) as err:
            hf_checkpoint.load_bert_config(str(path))
        assert named in str(err.value) and str(path) in str(err.value), str(err.value)


def test_bert_config_reads_its_own_format_and_names_the_reader_of_the_other(tmp_path):
    """The Hugging Face dialect lives in checkpoints.hf: BertConfig.from_json_file reads
    bert_config.json and, given a folder or its config.json, says what reads them."""
    folder = fixture("hf_bert_classifier_tanh")
    for path in (folder, os.path.join(folder, "config.json")):
        with pytest.raises(ConfigError, match=r"Hugging Face config.*hf\.load_bert_config") as err:
            BertConfig.from_json_file(path)
        assert path in str(err.value)
        assert hf_checkpoint.load_bert_config(path) == hf_checkpoint.load_hf_config(folder)
    ours = tmp_path / "bert_config.json"
    hf_checkpoint.load_hf_config(folder).to_json_file(str(ours))
    assert hf_checkpoint.load_bert_config(str(ours)) == BertConfig.from_json_file(str(ours))


def test_hf_folder_with_another_layer_norm_eps_predicts_what_transformers_predicts(tmp_path):
    """layer_norm_eps is a config field in both formats, used by every LayerNorm: a
    folder with 1e-3 (where it changes the outputs) gives transformers' logits."""
    transformers = pytest.importorskip("transformers", reason="in requirements-test.txt")
    torch = pytest.importorskip("torch", reason="in requirements-test.txt")
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(vocab_size=50, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                                        intermediate_size=40, max_position_embeddings=20, layer_norm_eps=1e-3,
                                        hidden_act="gelu", num_labels=3)
    hf_model = transformers.BertForSequenceClassification(hf_config).eval()
    with torch.no_grad():  # LayerNorm gains far from 1, so that epsilon matters
        for module in hf_model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 2.0)
                module.bias.uniform_(-0.5, 0.5)
    folder = str(tmp_path / "hf")
    hf_model.save_pretrained(folder, safe_serialization=True)
    ids = np.random.default_rng(1).integers(1, 50, size=(2, 9))
    mask = np.array([[1] * 9, [1] * 6 + [0] * 3])
    with torch.no_grad():
        want = hf_model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()

    config = hf_checkpoint.load_bert_config(folder)
    assert config.layer_norm_eps == pytest.approx(1e-3) and not config.residual_attention
    model = modeling.BertClassifierModel(config, num_labels=3)
    bert_checkpoint.load_bert_checkpoint(model, folder)
    got = model({"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}, training=False)["logits"]
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-4)
    right_diff = float(np.max(np.abs(np.asarray(got) - want)))
    wrong = modeling.BertClassifierModel(dataclasses.replace(config, layer_norm_eps=1e-12), num_labels=3)
    bert_checkpoint.load_bert_checkpoint(wrong, folder)
    off = wrong({"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}, training=False)["logits"]
    wrong_diff = float(np.max(np.abs(np.asarray(off) - want)))
    assert wrong_diff > 2e-4 and wrong_diff > 20 * right_diff, (wrong_diff, right_diff)  # the field matters
    # Written back, the folder keeps it.
    again = bert_checkpoint.save_hf_folder(model, str(tmp_path / "again"))
    assert json.load(open(os.path.join(again, "config.json")))["layer_norm_eps"] == pytest.approx(1e-3)


def copy_fixture(tmp_path, name="hf_bert_pretraining_gelu"):
    folder = str(tmp_path / name)
    shutil.copytree(fixture(name), folder)
    path = os.path.join(folder, "model.safetensors")
    return folder, path, safetensors.numpy.load_file(path)


def test_missing_unexpected_misshaped_tensors_are_named(tmp_path):
    folder, path, tensors = copy_fixture(tmp_path)
    config = hf_checkpoint.load_hf_config(folder)
    cases = {
        "missing": ({k: v for k, v in tensors.items() if k != "bert.encoder.layer.1.output.dense.weight"},
                    ["lacks", "bert.encoder.layer.1.output.dense.weight"]),
        "unexpected": (dict(tensors, **{"bert.encoder.LayerNorm.weight": np.ones(24, np.float32),
                                        "bert.encoder.LayerNorm.bias": np.zeros(24, np.float32)}),
                       ["does not have", "bert.encoder.LayerNorm.weight"]),
        "mis-shaped": (dict(tensors, **{"cls.seq_relationship.weight": np.zeros((3, 24), np.float32)}),
                       ["cls.seq_relationship.weight", "[3, 24]", "[2, 24]"]),
        "foreign": (dict(tensors, **{"lm_head.dense.weight": np.zeros((2, 2), np.float32)}),
                    ["lm_head.dense.weight", "not BERT's"]),
        "untied decoder": (dict(tensors, **{"cls.predictions.decoder.weight": np.zeros((50, 24), np.float32)}),
                           ["cls.predictions.decoder.weight", "tied"]),
    }
    for case, (changed, expected) in cases.items():
        safetensors.numpy.save_file(changed, path)
        with pytest.raises(CheckpointError) as err:
            bert_checkpoint.load_bert_checkpoint(modeling.BertPretrainingModel(config), folder)
        assert all(text in str(err.value) for text in expected), (case, str(err.value))
        assert path in str(err.value), case


def test_folder_without_safetensors(tmp_path):
    folder, path, _ = copy_fixture(tmp_path)
    os.remove(path)
    with open(os.path.join(folder, "pytorch_model.bin"), "wb") as f:
        f.write(b"\0")
    with pytest.raises(CheckpointError, match="without model.safetensors.*pytorch_model.bin.*safe_serialization"):
        ckpt.resolve_checkpoint(folder)


def test_convert_script_both_ways(tmp_path):
    """convert_checkpoint.py: HF folder -> original-named checkpoint -> HF folder."""
    folder = fixture("hf_bert_pretraining_gelu")
    config = hf_checkpoint.load_bert_config(folder)
    source, prefix = convert.convert(config, folder, str(tmp_path / "bert_model.ckpt"), "pretraining")
    assert source.startswith(folder) and ckpt.list_checkpoint(prefix)["bert/pooler/dense/kernel"] == [24, 24]
    _, back = convert.convert(config, prefix, str(tmp_path / "hf_out"), "pretraining", output_format="hf")
    want = safetensors.numpy.load_file(os.path.join(folder, "model.safetensors"))
    got = safetensors.numpy.load_file(os.path.join(back, "model.safetensors"))
    assert sorted(got) == sorted(want)
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_hf_warning_only_for_variants_transformers_lacks():
    assert convert.hf_warning(BertConfig(**SIZES, residual_attention=False)) is None
    for overrides in EXPORT_VARIANTS.values():
        config = BertConfig(**SIZES, **overrides)
        if config.residual_attention or config.layer_norm_type != "post":
            warning = convert.hf_warning(config)
            assert "is not vanilla post-LN BERT" in warning and "trust_remote_code=True" in warning


@pytest.mark.slow
def test_convert_checkpoint_script_reads_the_folder_config(tmp_path):
    """No --bert_config_file: the folder's config.json describes the model."""
    prefix = str(tmp_path / "bert_model.ckpt")
    result = h.run_script("convert_checkpoint.py", f"--input_checkpoint={fixture('hf_bert_qa_gelu')}",
                          f"--output_checkpoint={prefix}", "--task=squad")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "BERT: residual attention off" in result.stdout and "Converted" in result.stdout
    names = ckpt.list_checkpoint(prefix)
    assert names["cls/squad/output_weights"] == [2, 24]


def test_script_tasks_initialize_from_a_folder():
    """--init_checkpoint=FOLDER goes through the tasks' initialize (heads detected by
    their original names)."""
    from realformer_tf.jobs.tasks.classifier import ClassifierTask
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask
    from realformer_tf.jobs.tasks.squad import SquadTask

    folder = fixture("hf_bert_pretraining_gelu")
    config = hf_checkpoint.load_bert_config(folder)
    task = PretrainingTask(config, folder)
    message = task.initialize(task.build_model())
    assert "heads fresh" not in message and "model.safetensors" in message
    task = ClassifierTask(config, 2, False, folder)
    assert "model.safetensors" in task.initialize(task.build_model())
    qa = fixture("hf_bert_qa_gelu")
    task = SquadTask(hf_checkpoint.load_bert_config(qa), qa)
    assert "(encoder and heads)" in task.initialize(task.build_model()) and task.head_initialized


def test_sharded_folder(tmp_path):
    """model.safetensors.index.json + shards (how large models are saved)."""
    folder, path, tensors = copy_fixture(tmp_path, "hf_bert_model_gelu_new")
    os.remove(path)
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, shard_names in shards.items():
        safetensors.numpy.save_file({n: tensors[n] for n in shard_names}, os.path.join(folder, shard))
        weight_map.update({n: shard for n in shard_names})
    with open(path + ".index.json", "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    inputs, want = recorded(folder)
    model = load_task_model(folder, "encoder")
    assert max_diff(model(inputs)["sequence_output"], want["last_hidden_state"]) < TOLERANCE


def test_folder_without_pooler_keeps_a_fresh_one(caplog):
    """BertForMaskedLM / BertForQuestionAnswering folders have no pooler; like
    transformers, a classifier gets a freshly initialized one, said in one log line."""
    folder = fixture("hf_bert_qa_gelu")
    classifier = get_family("bert").build_model(hf_checkpoint.load_hf_config(folder), "classifier", 2)
    initial = bert_checkpoint.bert_variables(classifier)["bert/pooler/dense/kernel"].numpy().copy()
    with caplog.at_level("WARNING"):
        bert_checkpoint.load_bert_checkpoint(classifier, folder, skip_heads=True)
    lines = [r.getMessage() for r in caplog.records if "kept as initialized" in r.getMessage()]
    assert len(lines) == 1 and "bert.pooler.dense.weight" in lines[0]
    np.testing.assert_array_equal(classifier.bert.pooler.kernel.numpy(), initial)
    tensors = safetensors.numpy.load_file(os.path.join(folder, "model.safetensors"))
    np.testing.assert_array_equal(classifier.bert.embeddings.word_embeddings.numpy(),
                                  tensors["bert.embeddings.word_embeddings.weight"])


def test_corrupt_safetensors_file_is_named(tmp_path):
    folder, path, _ = copy_fixture(tmp_path)
    with open(path, "wb") as f:
        f.write((40).to_bytes(8, "little") + b"<html>not found</html>" + b" " * 30)
    with pytest.raises(CheckpointError, match="is not a safetensors file"):
        ckpt.resolve_checkpoint(folder)


@pytest.mark.slow
def test_fine_tuned_classifier_folder_serves_in_a_transformers_pipeline(tmp_path):
    """Fine-tune vanilla BERT, export the SavedModel, convert the run's checkpoint to a
    folder (the vocab found in the run's run_config.json): transformers' own
    `pipeline("text-classification")` on that folder alone gives the SavedModel's
    probabilities."""
    transformers = pytest.importorskip("transformers", reason="in requirements-test.txt")
    pytest.importorskip("torch", reason="in requirements-test.txt")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    data_dir = h.write_glue_mrpc(str(tmp_path / "MRPC"), num_train=8, num_dev=5)
    out, export_dir, folder = tmp_path / "out", tmp_path / "export", tmp_path / "hf"
    run = h.run_script("run_classifier.py", *h.flags(
        task_name="MRPC", data_dir=data_dir, vocab_file=h.write_vocab(tmp_path / "vocab.txt"),
        bert_config_file=h.write_config(tmp_path / "bert_config.json", residual_attention=False),
        output_dir=out, export_dir=export_dir, do_train=True, max_seq_length=32, train_batch_size=4,
        num_train_epochs=1.0, learning_rate=1e-3, seed=2))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    convert_run = h.run_script("convert_checkpoint.py", *h.flags(
        bert_config_file=out / "bert_config.json", input_checkpoint=out, output_checkpoint=folder,
        output_format="hf", task="classifier"))
    assert convert_run.returncode == 0, convert_run.stderr[-3000:]
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]

    rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(data_dir, "test.tsv"))][1:]
    pairs = [(r[3], r[4]) for r in rows]
    served = tf.saved_model.load(str(export_dir / "1")).signatures["serving_default"](
        text_a=tf.constant([a for a, _ in pairs]), text_b=tf.constant([b for _, b in pairs]))["probabilities"].numpy()
    classify = transformers.pipeline("text-classification", model=str(folder), top_k=None)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert tokenizer(pairs[0][0])["input_ids"][1] > 4  # a word of the vocab, not [UNK] / a special token
    answers = classify([{"text": a, "text_pair": b} for a, b in pairs])
    got = np.array([[next(s["score"] for s in answer if s["label"] == f"LABEL_{i}") for i in range(2)]
                    for answer in answers])
    np.testing.assert_allclose(got, served, atol=1e-5)
