"""Hugging Face remote code of the BERT variants (realformer_tf/checkpoints/hf/
remote_code): the folders `save_hf_folder(..., allow_variant=True)` writes carry it, and
transformers' Auto classes load them with trust_remote_code=True and compute our
outputs (RealFormer with and without the running mean, pre-LN, NormFormer with the head
scale before and after the output projection and the residual scale, RealFormer +
NormFormer); AutoTokenizer on the folder tokenizes as our BERT tokenizer does.

transformers copies remote code into its modules cache: here a temporary folder, never
the user's home.
"""

import json
import os
import sys

import numpy as np
import pytest

import bert_numpy
import helpers_data as h
import realformer_tf
from realformer_tf import modeling
from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.checkpoints import hf as hf_checkpoint

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOLERANCE = 1e-4
NUM_LABELS = 3
VARIANTS = {
    "realformer": dict(residual_attention=True),
    "realformer-running-mean": dict(residual_attention=True, use_running_mean=True),
    "pre-ln-exact-gelu": dict(residual_attention=False, layer_norm_type="pre", hidden_act="gelu_exact"),
    "normformer-heads-before": dict(residual_attention=False, layer_norm_type="normformer",
                                    normformer_head_scale_position="before_projection",
                                    normformer_residual_scale=True),
    "normformer-heads-after": dict(residual_attention=False, layer_norm_type="normformer",
                                   normformer_head_scale_position="after_projection",
                                   normformer_residual_scale=True),
    "realformer-normformer": dict(residual_attention=True, use_running_mean=True, layer_norm_type="normformer",
                                  normformer_head_scale_position="after_projection"),
}
MODEL_CLASSES = {"pretraining": modeling.BertPretrainingModel, "encoder": modeling.BertModel,
                 "squad": modeling.BertSquadModel}


@pytest.fixture(scope="module", autouse=True)
def modules_cache(hf_modules_cache):
    """transformers' copies of the remote code go to a temporary folder (conftest)."""
    return hf_modules_cache


def random_model(config, kind, seed):
    """Our model of `kind` with random non-trivial weights (every LayerNorm, scale and bias)."""
    if kind == "classifier":
        model = modeling.BertClassifierModel(config, num_labels=NUM_LABELS)
    else:
        model = MODEL_CLASSES[kind](config)
    head = None if kind == "encoder" else kind
    weights = bert_numpy.random_weights(config.to_dict(), np.random.default_rng(seed), head=head,
                                        num_labels=NUM_LABELS)
    for name, variable in bert_checkpoint.bert_variables(model).items():
        variable.assign(weights[name])
    return model


def batches(vocab_size):
    """Two padded batches of different lengths: {our input names: array}."""
    rng = np.random.default_rng(3)
    out = []
    for length, real in ((9, (9, 6)), (5, (3, 5))):
        mask = np.array([[1] * n + [0] * (length - n) for n in real])
        ids = rng.integers(5, vocab_size, (2, length)) * mask
        segments = np.array([[0] * (length // 2) + [1] * (length - length // 2)] * 2) * mask
        out.append({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    return out


def torch_inputs(inputs):
    return dict(input_ids=torch.tensor(inputs["input_ids"]), attention_mask=torch.tensor(inputs["input_mask"]),
                token_type_ids=torch.tensor(inputs["segment_ids"]))


def max_diff(got, want):
    got = got.detach().numpy() if hasattr(got, "detach") else np.asarray(got)
    return float(np.max(np.abs(got.astype(np.float64) - np.asarray(want, np.float64))))


def load(auto_class, folder, **config_overrides):
    model = getattr(transformers, auto_class).from_pretrained(folder, trust_remote_code=True, **config_overrides)
    return model.eval()


def pretraining_diffs(ours, theirs, inputs):
    length = inputs["input_ids"].shape[1]
    want = ours(dict(inputs, masked_lm_positions=np.tile(np.arange(length), (2, 1))))
    with torch.no_grad():
        got = theirs(**torch_inputs(inputs))
    return (max_diff(got.prediction_logits, want["masked_lm_logits"]),
            max_diff(got.seq_relationship_logits, want["next_sentence_logits"]))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_transformers_computes_our_pretraining_and_classifier_outputs(variant, tmp_path):
    config = h.tiny_config(**VARIANTS[variant])
    pretraining = random_model(config, "pretraining", seed=len(variant))
    classifier = random_model(config, "classifier", seed=len(variant) + 1)
    folders = {kind: bert_checkpoint.save_hf_folder(model, str(tmp_path / kind), allow_variant=True)
               for kind, model in (("pretraining", pretraining), ("classifier", classifier))}
    theirs_pretraining = load("AutoModelForPreTraining", folders["pretraining"])
    theirs_classifier = load("AutoModelForSequenceClassification", folders["classifier"])
    assert type(theirs_pretraining).__name__ == "RealFormerTfBertForPreTraining"
    assert theirs_classifier.config.num_labels == NUM_LABELS
    diffs = {}
    for inputs in batches(config.vocab_size):
        length = inputs["input_ids"].shape[1]
        diffs[f"mlm@{length}"], diffs[f"nsp@{length}"] = pretraining_diffs(pretraining, theirs_pretraining, inputs)
        with torch.no_grad():
            got = theirs_classifier(**torch_inputs(inputs)).logits
        diffs[f"classifier@{length}"] = max_diff(got, classifier(inputs)["logits"])
    print(variant, "ours -> transformers (remote code), max |diff|:", diffs)
    assert max(diffs.values()) <= TOLERANCE, diffs


def test_the_comparison_tells_the_variants_apart(tmp_path):
    """The tolerance catches a model computed as another variant: the same folder with
    the running mean off, residual attention off, or the head scale on the other side
    of the projection gives logits far from ours."""
    overrides = dict(VARIANTS["realformer-normformer"], normformer_residual_scale=True)
    model = random_model(h.tiny_config(**overrides), "pretraining", seed=7)
    folder = bert_checkpoint.save_hf_folder(model, str(tmp_path / "hf"), allow_variant=True)
    inputs = batches(model.config.vocab_size)[0]
    assert max(pretraining_diffs(model, load("AutoModelForPreTraining", folder), inputs)) <= TOLERANCE
    for wrong in (dict(use_running_mean=False), dict(residual_attention=False),
                  dict(normformer_head_scale_position="before_projection")):
        mlm, _ = pretraining_diffs(model, load("AutoModelForPreTraining", folder, **wrong), inputs)
        assert mlm > 100 * TOLERANCE, wrong


def test_encoder_masked_lm_and_span_heads(tmp_path):
    """The other Auto classes: AutoModel (sequence and pooled output), AutoModelForMaskedLM
    on a pretraining folder, AutoModelForQuestionAnswering (no pooler, as BERT's)."""
    config = h.tiny_config(**VARIANTS["realformer-normformer"])
    inputs = batches(config.vocab_size)[0]
    diffs = {}
    encoder = random_model(config, "encoder", seed=11)
    folder = bert_checkpoint.save_hf_folder(encoder, str(tmp_path / "encoder"), allow_variant=True)
    want = encoder(inputs)
    with torch.no_grad():
        got = load("AutoModel", folder)(**torch_inputs(inputs), output_hidden_states=True)
    diffs["sequence"] = max_diff(got.last_hidden_state, want["sequence_output"])
    diffs["pooled"] = max_diff(got.pooler_output, want["pooled_output"])
    diffs["layers"] = max(max_diff(a, b) for a, b in zip(got.hidden_states[1:], want["encoder_outputs"]))
    # A task class from the encoder's folder: the encoder as written, a fresh head (fine-tuning).
    fine_tuning = load("AutoModelForSequenceClassification", folder, num_labels=2)
    with torch.no_grad():
        diffs["fine-tuning pooled"] = max_diff(fine_tuning.bert(**torch_inputs(inputs)).pooler_output,
                                               want["pooled_output"])
        assert torch.isfinite(fine_tuning(**torch_inputs(inputs)).logits).all()

    pretraining = random_model(config, "pretraining", seed=12)
    folder = bert_checkpoint.save_hf_folder(pretraining, str(tmp_path / "pretraining"), allow_variant=True)
    positions = np.tile(np.arange(inputs["input_ids"].shape[1]), (2, 1))
    with torch.no_grad():
        got = load("AutoModelForMaskedLM", folder)(**torch_inputs(inputs)).logits
    diffs["masked_lm"] = max_diff(got, pretraining(dict(inputs, masked_lm_positions=positions))["masked_lm_logits"])

    squad = random_model(config, "squad", seed=13)
    theirs = load("AutoModelForQuestionAnswering",
                  bert_checkpoint.save_hf_folder(squad, str(tmp_path / "squad"), allow_variant=True))
    want = squad(inputs)
    with torch.no_grad():
        got = theirs(**torch_inputs(inputs))
    diffs["start"], diffs["end"] = (max_diff(got.start_logits, want["start_logits"]),
                                    max_diff(got.end_logits, want["end_logits"]))
    print("ours -> transformers (remote code), max |diff|:", diffs)
    assert max(diffs.values()) <= TOLERANCE, diffs


def test_variant_folders_carry_the_code_and_plain_bert_folders_do_not(tmp_path):
    config = h.tiny_config(residual_attention=True)
    folder = bert_checkpoint.save_hf_folder(random_model(config, "classifier", seed=1), str(tmp_path / "hf"),
                                            allow_variant=True)
    with open(os.path.join(folder, "config.json")) as f:
        written = json.load(f)
    assert written["model_type"] == "realformer_bert"
    assert written["architectures"] == ["RealFormerTfBertForSequenceClassification"]
    assert written["auto_map"] == hf_checkpoint.VARIANT_AUTO_MAP
    for name in hf_checkpoint.REMOTE_CODE_FILES:
        with open(os.path.join(folder, name)) as f, open(os.path.join(hf_checkpoint.REMOTE_CODE_DIR, name)) as g:
            code, packaged = f.read(), g.read()
        assert code == packaged, name
        assert f"Matches realformer_tf {realformer_tf.__version__} " in code, name  # the version it computes
    assert f'REALFORMER_TF_VERSION = "{realformer_tf.__version__}"' in open(
        os.path.join(folder, "configuration_realformer_bert.py")).read()
    # The package never imports its remote code (it does not depend on torch).
    assert not [m for m in sys.modules if m.endswith("_realformer_bert") and m.startswith("realformer_tf")]
    # This package reads the folder back (checkpoints.hf ignores auto_map).
    assert hf_checkpoint.load_bert_config(folder) == config
    plain = bert_checkpoint.save_hf_folder(modeling.BertModel(h.tiny_config(residual_attention=False)),
                                           str(tmp_path / "plain"))
    with open(os.path.join(plain, "config.json")) as f:
        plain_config = json.load(f)
    assert plain_config["model_type"] == "bert" and "auto_map" not in plain_config
    assert sorted(os.listdir(plain)) == ["config.json", "model.safetensors"]


def test_a_folder_transformers_saves_again_loads_back_into_our_model(tmp_path):
    """Fine-tuned in PyTorch and saved with save_pretrained, the folder is ours again."""
    config = h.tiny_config(**VARIANTS["normformer-heads-after"])
    classifier = random_model(config, "classifier", seed=21)
    theirs = load("AutoModelForSequenceClassification",
                  bert_checkpoint.save_hf_folder(classifier, str(tmp_path / "hf"), allow_variant=True))
    with torch.no_grad():
        theirs.classifier.bias += 1.0  # "fine-tuned"
    theirs.save_pretrained(str(tmp_path / "saved"))
    again = modeling.BertClassifierModel(hf_checkpoint.load_bert_config(str(tmp_path / "saved")),
                                         num_labels=NUM_LABELS)
    bert_checkpoint.load_bert_checkpoint(again, str(tmp_path / "saved"))
    inputs = batches(config.vocab_size)[1]
    np.testing.assert_allclose(again(inputs)["logits"], classifier(inputs)["logits"] + 1.0, atol=TOLERANCE)


SENTENCES = ("The cats sat on the mat, didn't they?", "Le Café était très naïf à Zürich.",
             "我喜欢中文。BERT 中文 test", "Unknown wörds: ß and 東京!")
VOCAB_WORDS = ("the", "The", "cat", "##s", "sat", "on", "mat", ",", "didn", "'", "t", "they", "?", "le", "Le",
               "cafe", "Café", "etait", "était", "tres", "très", "naif", "naïf", "a", "à", "zurich", "Zürich", ".",
               "我", "喜", "欢", "中", "文", "。", "bert", "BERT", "test", "unknown", "Unknown", "w", "##ord",
               "wö", "##rd", ":", "and", "!", "東")


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_auto_tokenizer_gives_our_tokenizers_ids(do_lower_case, tmp_path):
    from official.nlp.tools import tokenization

    vocab = h.write_vocab(tmp_path / "vocab.txt", words=VOCAB_WORDS)
    model = random_model(h.tiny_config(vocab_size=h.vocab_size(words=VOCAB_WORDS)), "classifier", seed=2)
    folder = bert_checkpoint.save_hf_folder(model, str(tmp_path / "hf"), allow_variant=True, vocab_file=vocab,
                                            do_lower_case=do_lower_case)
    ours = tokenization.FullTokenizer(vocab_file=vocab, do_lower_case=do_lower_case)
    want = [ours.convert_tokens_to_ids(["[CLS]"] + ours.tokenize(s) + ["[SEP]"]) for s in SENTENCES]
    assert all(len(set(ids) - {1, 2, 3}) >= 2 for ids in want)  # words of the vocab, not all [UNK]
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    assert [tokenizer(s)["input_ids"] for s in SENTENCES] == want
    pair = tokenizer(SENTENCES[0], SENTENCES[1])
    first, second = (ours.tokenize(s) for s in SENTENCES[:2])
    assert pair["input_ids"] == ours.convert_tokens_to_ids(["[CLS]"] + first + ["[SEP]"] + second + ["[SEP]"])
    assert pair["token_type_ids"] == [0] * (len(first) + 2) + [1] * (len(second) + 1)


def test_auto_tokenizer_without_the_flag_still_loads_the_stock_tokenizer(tmp_path, monkeypatch):
    """Without trust_remote_code AutoTokenizer cannot read the folder's config (it would
    ask, then give up on it) and loads the stock BertTokenizer named by
    tokenizer_config.json all the same."""
    from transformers import dynamic_module_utils

    monkeypatch.setattr(dynamic_module_utils, "TIME_OUT_REMOTE_CODE", 0)  # no prompt: refused at once
    vocab = h.write_vocab(tmp_path / "vocab.txt", words=VOCAB_WORDS)
    model = random_model(h.tiny_config(vocab_size=h.vocab_size(words=VOCAB_WORDS)), "encoder", seed=3)
    folder = bert_checkpoint.save_hf_folder(model, str(tmp_path / "hf"), allow_variant=True, vocab_file=vocab)
    flagged = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    unflagged = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(unflagged) is type(flagged)
    assert [unflagged(s)["input_ids"] for s in SENTENCES] == [flagged(s)["input_ids"] for s in SENTENCES]
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        transformers.AutoModel.from_pretrained(folder)
