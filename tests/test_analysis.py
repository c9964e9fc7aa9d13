"""Attention analysis (realformer_tf.analysis: entropy, adjacent-layer JSD, probabilities
from carried scores, summaries, violin plots) and analyze_attention.py."""

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from realformer_tf import modeling
from realformer_tf.analysis import analyze, attention_plots, attention_stats
from realformer_tf.checkpoints import bert as bert_checkpoint

PNG_HEADER = b"\x89PNG\r\n\x1a\n"



def _uniform_over_real(mask, heads=1):
    """[B, heads, L, L] probabilities uniform over each example's real keys."""
    mask = np.asarray(mask, np.float64)
    rows = mask / mask.sum(-1, keepdims=True)
    length = mask.shape[1]
    return np.broadcast_to(rows[:, None, None, :], (mask.shape[0], heads, length, length)).copy()


def _softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


# -- entropy -------------------------------------------------------------------------------

def test_entropy_of_uniform_over_real_keys_is_log_n():
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    probs = _uniform_over_real(mask, heads=2)
    entropy = attention_stats.attention_entropy(probs, mask)
    assert entropy.shape == (2, 8)  # heads x real query tokens (3 + 5)
    expected = np.array([math.log(3)] * 3 + [math.log(5)] * 5)
    np.testing.assert_allclose(entropy[0], expected, atol=1e-9)
    np.testing.assert_allclose(entropy[1], expected, atol=1e-9)
    bits = attention_stats.attention_entropy(probs, mask, base=2)
    np.testing.assert_allclose(bits[0], expected / math.log(2), atol=1e-9)


def test_entropy_of_one_hot_is_zero():
    mask = np.array([[1, 1, 1, 1]])
    probs = np.zeros([1, 3, 4, 4])
    probs[..., 2] = 1.0
    np.testing.assert_allclose(attention_stats.attention_entropy(probs, mask), 0.0, atol=1e-12)


def test_entropy_excludes_padding_keys():
    # Attention spread uniformly over all 6 keys, 2 of them padding: over the 4 real keys
    # it is uniform, so log 4, not log 6.
    mask = np.array([[1, 1, 1, 1, 0, 0]])
    probs = np.full([1, 1, 6, 6], 1 / 6)
    np.testing.assert_allclose(attention_stats.attention_entropy(probs, mask), math.log(4), atol=1e-9)
    # Mass on a padding key does not count: one-hot over the real keys -> 0.
    probs = np.zeros([1, 1, 6, 6])
    probs[..., 0], probs[..., 5] = 0.5, 0.5
    np.testing.assert_allclose(attention_stats.attention_entropy(probs, mask), 0.0, atol=1e-12)


def test_entropy_excludes_padded_queries():
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 0]])
    probs = _uniform_over_real(mask)
    probs[0, :, 2:, :] = np.array([1.0, 0.0, 0.0, 0.0])  # padding queries: anything
    probs[1, :, 3, :] = 0.25
    entropy = attention_stats.attention_entropy(probs, mask)
    assert entropy.shape == (1, 5)
    np.testing.assert_allclose(entropy[0], [math.log(2)] * 2 + [math.log(3)] * 3, atol=1e-9)
    # Works without a head axis too.
    assert attention_stats.attention_entropy(probs[:, 0], mask).shape == (5,)


# -- Jensen-Shannon --------------------------------------------------------------------------

def test_jsd_identical_disjoint_symmetric():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(7), size=(3, 5))
    q = rng.dirichlet(np.ones(7), size=(3, 5))
    np.testing.assert_allclose(attention_stats.jensen_shannon(p, p), 0.0, atol=1e-12)
    np.testing.assert_allclose(attention_stats.jensen_shannon(p, q), attention_stats.jensen_shannon(q, p), atol=1e-12)
    one_hot_a, one_hot_b = np.eye(4)[0], np.eye(4)[3]
    assert attention_stats.jensen_shannon(one_hot_a, one_hot_b) == pytest.approx(1.0, abs=1e-12)
    values = attention_stats.jensen_shannon(p, q)
    assert values.shape == (3, 5) and np.all((values >= 0) & (values <= 1))


def test_jsd_matches_scipy_and_is_safe_with_zeros():
    from scipy.spatial import distance

    p = np.array([0.5, 0.5, 0.0, 0.0])
    q = np.array([0.0, 0.25, 0.25, 0.5])
    value = attention_stats.jensen_shannon(p, q)
    assert np.isfinite(value)
    # scipy returns the Jensen-Shannon *distance*, the square root of the divergence.
    assert value == pytest.approx(distance.jensenshannon(p, q, base=2) ** 2, abs=1e-12)


# -- probabilities from the carried scores ----------------------------------------------------

def _model_and_batch(**config):
    cfg = h.tiny_config(num_hidden_layers=3, attention_probs_dropout_prob=0.0, **config)
    model = modeling.BertModel(cfg)
    batch = h.fixed_pretraining_batch(4, 10, 3, seed=3)
    features = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    return cfg, model, features


@pytest.mark.parametrize("running_mean", [False, True])
def test_attention_probabilities_match_direct_softmax(running_mean):
    cfg, model, features = _model_and_batch(residual_attention=True, use_running_mean=running_mean)
    scores = model(features, training=False)["attention_scores"]
    probs = attention_stats.attention_probabilities(cfg, scores, features["input_mask"])
    bias = (1.0 - features["input_mask"][:, None, None, :]) * -10000.0
    for layer, (s, p) in enumerate(zip(scores, probs)):
        divisor = layer + 1 if running_mean else 1
        np.testing.assert_allclose(p, _softmax(s.numpy().astype(np.float64) / divisor + bias), atol=1e-6)
        # ... which is what the layer itself feeds its softmax.
        own = model.encoder.blocks[layer].attention.attention_logits(s).numpy()
        np.testing.assert_allclose(p, _softmax(own + bias), atol=1e-6)
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
        padding_keys = np.broadcast_to(features["input_mask"][:, None, None, :] == 0, p.shape)
        assert np.all(p[padding_keys] < 1e-30)
    if running_mean:
        # The division matters from the second layer on (the carried sum grows).
        plain = _softmax(scores[2].numpy() + bias)
        assert not np.allclose(probs[2], plain, atol=1e-7)


def test_running_mean_ignored_without_residual_attention():
    # The model only uses the running mean with residual attention on (layers return
    # their own scores otherwise), and so does the reconstruction.
    cfg, model, features = _model_and_batch(residual_attention=False, use_running_mean=True)
    scores = model(features, training=False)["attention_scores"]
    probs = attention_stats.attention_probabilities(cfg, scores, features["input_mask"])
    bias = (1.0 - features["input_mask"][:, None, None, :]) * -10000.0
    np.testing.assert_allclose(probs[2], _softmax(scores[2].numpy() + bias), atol=1e-6)


# -- collection, summaries, plots -------------------------------------------------------------

def test_collect_statistics_over_real_tokens():
    cfg, model, features = _model_and_batch(residual_attention=True)
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(3)  # batches of 3 and 1
    stats = attention_stats.collect_statistics(model, dataset, num_examples=3, label="rf")
    mask = features["input_mask"][:3]
    n_real = int(mask.sum())
    assert (stats.num_examples, stats.num_layers, stats.num_heads, stats.num_tokens) == (3, 3, 2, n_real)
    assert stats.jsd.shape == (2, 2, n_real)
    assert stats.label == "rf" and stats.entropy_unit == "nats"

    scores = model({k: v[:3] for k, v in features.items()}, training=False)["attention_scores"]
    probs = attention_stats.attention_probabilities(cfg, scores, mask)
    for layer in range(3):
        np.testing.assert_allclose(stats.entropy[layer], attention_stats.attention_entropy(probs[layer], mask),
                                   atol=1e-4)
    for layer in range(2):
        per_query = attention_stats.jensen_shannon(probs[layer], probs[layer + 1])  # [B, H, L]
        expected = np.moveaxis(per_query, 0, -2)[..., mask.astype(bool)]
        np.testing.assert_allclose(stats.jsd[layer], expected, atol=1e-4)

    everything = attention_stats.collect_statistics(model, dataset, num_examples=100)
    assert everything.num_examples == 4  # the data ran out first
    assert everything.num_tokens == int(features["input_mask"].sum())


def _fake_stats(label, layers=3, heads=4, tokens=500, seed=0):
    rng = np.random.default_rng(seed)
    return attention_stats.AttentionStatistics(
        entropy=rng.gamma(2.0, 0.8, size=(layers, heads, tokens)).astype(np.float32),
        jsd=rng.beta(2.0, 5.0, size=(layers - 1, heads, tokens)).astype(np.float32),
        num_examples=10, label=label, description=f"{label} model")


def test_summarize_is_json_and_exact():
    stats = _fake_stats("a")
    summary = json.loads(json.dumps(attention_stats.summarize(stats)))
    assert summary["num_tokens"] == 500 and summary["entropy_unit"] == "nats"
    layer1 = summary["entropy"]["per_layer"][1]
    assert layer1["layer"] == 1
    assert layer1["median"] == pytest.approx(float(np.median(stats.entropy[1])), rel=1e-6)
    assert layer1["q1"] == pytest.approx(float(np.percentile(stats.entropy[1], 25)), rel=1e-6)
    assert layer1["mean"] == pytest.approx(float(stats.entropy[1].mean()), rel=1e-5)
    head = summary["jsd"]["per_head"][0][3]
    assert head["head"] == 3 and head["q3"] == pytest.approx(float(np.percentile(stats.jsd[0, 3], 75)), rel=1e-6)
    assert len(summary["jsd"]["per_layer"]) == 2


def test_kept_points_are_a_sample_of_the_same_tokens_in_every_layer(tmp_path):
    stats = _fake_stats("RealFormer", layers=3, heads=2, tokens=501)
    stats.entropy[:, :, :] = np.arange(501, dtype=np.float32)  # a token's value names the token
    stats.jsd[:, :, :] = np.arange(501, dtype=np.float32) / 1000
    path = attention_stats.save_points(str(tmp_path / "points.npz"), stats, max_tokens=40)
    back = attention_stats.load_points(path)
    assert back.entropy.shape == (3, 2, 40) and back.jsd.shape == (2, 2, 40)
    assert back.entropy.dtype == np.float32
    tokens = back.entropy[0, 0]
    assert len(set(tokens.tolist())) == 40 and np.all(np.diff(tokens) > 0)  # distinct, in order
    np.testing.assert_array_equal(back.entropy, np.broadcast_to(tokens, back.entropy.shape))
    np.testing.assert_allclose(back.jsd, np.broadcast_to(tokens / 1000, back.jsd.shape), rtol=1e-3)
    assert (back.label, back.description, back.num_examples) == ("RealFormer", "RealFormer model", 10)
    assert attention_stats.thin(stats, 1000) is stats  # fewer tokens than asked: unchanged
    with pytest.raises(ValueError, match="max_tokens must be positive, got 0"):
        attention_stats.thin(stats, 0)


def test_plots_are_written(tmp_path):
    stats = [_fake_stats("Post-LN", seed=1), _fake_stats("RealFormer", seed=2)]
    paths = [
        attention_plots.plot_entropy(stats, str(tmp_path / "entropy.png")),
        attention_plots.plot_jsd(stats, str(tmp_path / "jsd.png")),
        attention_plots.plot_entropy(stats, str(tmp_path / "entropy_heads.png"), per_head=True),
        attention_plots.plot_jsd(stats[0], str(tmp_path / "jsd_heads.png"), per_head=True),
        # degenerate data: one layer (no JSD), constant values
        attention_plots.plot_jsd(_fake_stats("one", layers=1), str(tmp_path / "none.png"), per_head=True),
    ]
    const = attention_stats.AttentionStatistics(np.zeros([2, 1, 3], np.float32), np.zeros([1, 1, 3], np.float32), 1, "c")
    paths.append(attention_plots.plot_entropy(const, str(tmp_path / "const.png")))
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        assert data.startswith(PNG_HEADER) and len(data) > 2000, path
    coarse = attention_plots.plot_entropy(stats, str(tmp_path / "coarse.png"), per_head=True, dpi=40)
    assert os.path.getsize(coarse) < os.path.getsize(paths[2]) / 2  # dpi 40 against the default 110


def test_text_examples(tmp_path):
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    text = tmp_path / "text.txt"
    text.write_text("The cat sees the book.\n\nthe dog " + "reads " * 20 + "\n")
    ex = analyze.text_examples(str(text), vocab, max_seq_length=8)
    tokens = [line.strip() for line in open(vocab)]
    ids = {t: i for i, t in enumerate(tokens)}
    first = [ids[t] for t in ("[CLS]", "the", "cat", "sees", "the", "book", ".", "[SEP]")]
    assert ex["input_ids"].shape == (2, 8)
    assert ex["input_ids"][0].tolist() == first and ex["input_mask"][0].tolist() == [1] * 8
    assert ex["input_ids"][1, 0] == ids["[CLS]"] and ex["input_ids"][1, 7] == ids["[SEP]"]  # truncated
    short = analyze.text_examples(str(text), vocab, max_seq_length=12)
    assert short["input_mask"][0].tolist() == [1] * 8 + [0] * 4 and short["input_ids"][0, 8:].tolist() == [0] * 4
    from realformer_tf.errors import InputError

    with pytest.raises(InputError, match="does not exist"):
        analyze.text_examples(str(tmp_path / "missing.txt"), vocab, 8)


# -- scripts (subprocesses) -------------------------------------------------------------------

@pytest.mark.slow
def test_analyze_attention_script(tmp_path):
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    text = h.write_text(tmp_path / "text.txt", num_docs=2, sentences_per_doc=6)
    prefixes = []
    for name, residual in (("post", False), ("realformer", True)):
        cfg = h.tiny_config(residual_attention=residual)
        model = modeling.BertModel(cfg)
        os.makedirs(tmp_path / name)
        prefixes.append(bert_checkpoint.save_bert_checkpoint(model, str(tmp_path / name / "bert_model.ckpt")))
        cfg.to_json_file(str(tmp_path / name / "bert_config.json"))
    out = tmp_path / "out"
    proc = h.run_script("analyze_attention.py", *h.flags(
        checkpoints=f"{prefixes[0]},{tmp_path / 'realformer'}", labels="Post-LN,RealFormer",
        text_file=text, vocab_file=vocab, max_seq_length=16, num_examples=5, batch_size=2,
        output_dir=out))
    assert proc.returncode == 0, f"analyze_attention.py failed:\n{proc.stdout}\n{proc.stderr}"
    summary = json.load(open(out / "attention_summary.json"))
    assert [c["label"] for c in summary["checkpoints"]] == ["Post-LN", "RealFormer"]
    assert all(c["num_examples"] == 5 and c["num_layers"] == 2 for c in summary["checkpoints"])
    for name in ("entropy.png", "jsd.png", "entropy_heads.png", "jsd_heads.png"):
        assert (out / name).read_bytes().startswith(PNG_HEADER)

    no_input = h.run_script("analyze_attention.py", *h.flags(
        checkpoints=prefixes[0], input_file=str(tmp_path / "x.tfrecord"), output_dir=out))
    assert no_input.returncode == 1 and "error:" in no_input.stderr and "x.tfrecord" in no_input.stderr
    no_checkpoint = h.run_script("analyze_attention.py", *h.flags(
        checkpoints=str(tmp_path / "nowhere" / "bert_model.ckpt"), text_file=text, vocab_file=vocab,
        output_dir=out))
    assert no_checkpoint.returncode == 1 and "no checkpoint at" in no_checkpoint.stderr
    assert "nowhere" in no_checkpoint.stderr
    no_config = h.run_script("analyze_attention.py", *h.flags(
        checkpoints=prefixes[0], bert_config_files=str(tmp_path / "none.json"), text_file=text,
        vocab_file=vocab, output_dir=out))
    assert no_config.returncode == 1 and "none.json does not exist" in no_config.stderr
