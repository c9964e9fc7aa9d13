"""Attention analysis (entropy, adjacent-layer JSD, probabilities from carried scores,
summaries, violin plots), analyze_attention.py, and the small-scale reproduction
(experiments/reproduce.py and realformer_tf/research/: grid, experiments, study_*)."""

import dataclasses
import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from realformer_tf import modeling
from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.errors import UsageError
from realformer_tf.research import analysis, attention_plots, attention_stats
from realformer_tf.research import experiments, grid, run_archive, study_files, study_report, study_stats

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


def test_attention_summary_means_every_token():
    stats = _fake_stats("a", layers=3, heads=4, tokens=37)
    entropy, jsd = study_stats.attention_summary(json.loads(json.dumps(attention_stats.summarize(stats))))
    assert entropy == pytest.approx(float(np.mean(stats.entropy, dtype=np.float64)), rel=1e-6)
    assert jsd == pytest.approx(float(np.mean(stats.jsd, dtype=np.float64)), rel=1e-6)
    one_layer = attention_stats.summarize(_fake_stats("b", layers=1))
    assert math.isnan(study_stats.attention_summary(one_layer)[1])


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


def test_run_archive_keeps_the_small_files_and_restores_them(tmp_path):
    run_dir, archived = tmp_path / "out" / "bert_L1", tmp_path / "archive" / "bert_L1"
    (run_dir / "summaries" / "train").mkdir(parents=True)
    (run_dir / "summaries" / "train" / "events.out").write_bytes(b"curve")
    (run_dir / "timing.json").write_text('{"train_seconds": 3.0}')
    (run_dir / "ckpt-5.data-00000-of-00001").write_bytes(b"weights")
    assert run_archive.save(str(run_dir), str(archived)) == []  # not finished: nothing kept
    (run_dir / "eval_results.txt").write_text("global_step = 5\n")
    copied = run_archive.save(str(run_dir), str(archived))
    assert copied[-1] == "eval_results.txt"  # the finished mark last
    assert sorted(copied) == ["eval_results.txt", os.path.join("summaries", "train", "events.out"), "timing.json"]
    assert not (archived / "ckpt-5.data-00000-of-00001").exists()
    assert not list(archived.rglob("*.partial"))

    fresh = tmp_path / "elsewhere" / "bert_L1"
    (fresh / "summaries" / "train").mkdir(parents=True)
    (fresh / "summaries" / "train" / "events.unfinished").write_bytes(b"half a curve")
    assert len(run_archive.restore(str(archived), str(fresh))) == 3
    assert (fresh / "eval_results.txt").read_text() == "global_step = 5\n"
    assert [p.name for p in (fresh / "summaries" / "train").iterdir()] == ["events.out"]
    assert run_archive.restore(str(archived), str(fresh)) == []  # already there
    assert run_archive.restore(str(tmp_path / "archive" / "none"), str(tmp_path / "x")) == []


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


def test_text_examples(tmp_path):
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    text = tmp_path / "text.txt"
    text.write_text("The cat sees the book.\n\nthe dog " + "reads " * 20 + "\n")
    ex = analysis.text_examples(str(text), vocab, max_seq_length=8)
    tokens = [line.strip() for line in open(vocab)]
    ids = {t: i for i, t in enumerate(tokens)}
    first = [ids[t] for t in ("[CLS]", "the", "cat", "sees", "the", "book", ".", "[SEP]")]
    assert ex["input_ids"].shape == (2, 8)
    assert ex["input_ids"][0].tolist() == first and ex["input_mask"][0].tolist() == [1] * 8
    assert ex["input_ids"][1, 0] == ids["[CLS]"] and ex["input_ids"][1, 7] == ids["[SEP]"]  # truncated
    short = analysis.text_examples(str(text), vocab, max_seq_length=12)
    assert short["input_mask"][0].tolist() == [1] * 8 + [0] * 4 and short["input_ids"][0, 8:].tolist() == [0] * 4
    from realformer_tf.data.records import InputError

    with pytest.raises(InputError, match="does not exist"):
        analysis.text_examples(str(tmp_path / "missing.txt"), vocab, 8)


# -- the reproduction's library -------------------------------------------------------------

def test_variant_configs():
    expected = {
        "bert": (False, False, "post"), "pre_ln": (False, False, "pre"),
        "realformer": (True, False, "post"), "realformer_mean": (True, True, "post"),
        "normformer": (False, False, "normformer"), "realformer_normformer": (True, False, "normformer"),
    }
    assert list(grid.STUDY_VARIANTS) == list(expected)
    for name, (residual, mean, norm) in expected.items():
        cfg = modeling.BertConfig(**grid.model_config(name, "small", 30522, 128))
        assert (cfg.residual_attention, cfg.use_running_mean, cfg.layer_norm_type) == (residual, mean, norm)
        assert not cfg.normformer_residual_scale
        assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (4, 256, 4)
    assert grid.parse_variants("all") == list(expected)
    assert grid.parse_variants("normformer_residual_scale,bert") == ["normformer_residual_scale", "bert"]
    with pytest.raises(UsageError, match="unknown variant.*nope.*choose from bert, realformer"):
        grid.parse_variants("bert,nope")
    with pytest.raises(ValueError, match="unknown variant.*post"):  # an old name is no flag value
        grid.parse_variants("post")


def test_a_study_started_under_the_old_names_is_reused(tmp_path):
    """study.json of an older version names the variants post / pre, and its run folders
    post_L2_...: the names map to the current ones and the folders are found."""
    budget = grid.BUDGETS["toy"]
    repro = experiments.Reproduction(str(tmp_path), ["post", "pre", "realformer"], budget, "train", "eval", 48,
                                     probe_variants=["post"])
    assert repro.variants == ["bert", "pre_ln", "realformer"] and repro.probe_variants == ["bert"]
    run = grid.Run("bert", 1e-3, 1, 2, budget.num_train_steps, budget.num_warmup_steps)
    assert run.name == "bert_L2_lr0.001_s1_n5"
    assert os.path.basename(repro.run_dir(run)) == run.name  # nothing on disk: the new name
    old = tmp_path / "post_L2_lr0.001_s1_n5"
    old.mkdir()
    (old / "eval_results.txt").write_text(f"global_step = {budget.num_train_steps}\nloss = 4.0\n"
                                          "masked_lm_accuracy = 0.25\nmasked_lm_loss = 3.5\n")
    assert repro.run_dir(run) == str(old)
    assert repro.existing(run).status == "done" and repro.existing(run).accuracy == 0.25


def test_split_documents():
    text = "\n\n".join(f"doc {i} line a\ndoc {i} line b" for i in range(10)) + "\n"
    train, held_out = study_files.split_documents(text, eval_every=5)
    assert "doc 4 line a\ndoc 4 line b" in held_out and "doc 9 line b" in held_out
    assert "doc 4" not in train and train.count("line a") == 8
    with pytest.raises(ValueError, match="two documents"):
        study_files.split_documents("only one\ndocument\n", 5)


def test_read_scalars_and_reuse_detection(tmp_path):
    budget = grid.BUDGETS["toy"]
    repro = experiments.Reproduction(str(tmp_path), ["bert", "realformer"], budget, "train", "eval", 48,
                                     probe_variants=["bert"])
    steps, warmup = budget.num_train_steps, budget.num_warmup_steps
    base = [grid.Run(v, 1e-3, 1, 2, steps, warmup) for v in ("bert", "realformer")]
    assert repro.plan() == base + [grid.Run("bert", 1e-2, 1, 2, steps, warmup)]
    done_run, diverged_run = base[0], repro.plan()[2]
    done = repro.run_dir(done_run)
    assert os.path.basename(done) == "bert_L2_lr0.001_s1_n5"
    os.makedirs(done)
    with open(os.path.join(done, "eval_results.txt"), "w") as f:
        f.write(f"global_step = {budget.num_train_steps}\nloss = 4.0\nmasked_lm_accuracy = 0.25\n"
                "masked_lm_loss = 3.5\nnext_sentence_accuracy = 0.5\n")
    result = repro.existing(done_run)
    assert result.status == "done" and result.accuracy == 0.25
    diverged = repro.run_dir(diverged_run)
    os.makedirs(diverged)
    with open(os.path.join(diverged, "diverged.txt"), "w") as f:
        f.write("loss became nan in the steps ending at global step 3; training stopped.\n")
    result = repro.existing(diverged_run)
    assert (result.status, result.steps) == ("diverged", 3) and math.isnan(result.accuracy)
    partial = repro.run_dir(base[1])
    os.makedirs(partial)
    with open(os.path.join(partial, "eval_results.txt"), "w") as f:
        f.write("global_step = 2\nloss = 4.0\n")  # an older, shorter run: not finished
    assert repro.existing(base[1]) is None
    assert [r.status for r in repro.collect()] == ["done", "missing", "diverged"]

    summaries = os.path.join(done, "summaries", "train")
    writer = tf.summary.create_file_writer(summaries)
    with writer.as_default():
        for step, loss in ((1, 5.0), (2, 4.5), (3, 4.0)):
            tf.summary.scalar("loss", loss, step=step)
    writer.close()
    assert study_files.read_scalars(summaries)["loss"] == [(1, 5.0), (2, 4.5), (3, 4.0)]
    assert study_files.read_scalars(str(tmp_path / "missing")) == {}


# -- scripts (subprocesses) -------------------------------------------------------------------

def _check(proc, what):
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"


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
    _check(proc, "analyze_attention.py")
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


@pytest.mark.slow
def test_reproduce_toy_end_to_end(tmp_path):
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    train = h.write_pretraining_records(tmp_path / "train.tfrecord", 32, 32, 5)
    held_out = h.write_pretraining_records(tmp_path / "eval.tfrecord", 16, 32, 5, seed=1)
    out = tmp_path / "out"
    args = h.flags(budget="toy", output_dir=out, variants="bert,realformer", probe_variants="bert",
                   depths="1,2", seeds="1,2", sweep_learning_rates="1e9", train_input_file=train,
                   eval_input_file=held_out, vocab_file=vocab, workers=2)
    proc = h.run_script("experiments/reproduce.py", *args)
    _check(proc, "reproduce.py")
    # 2 variants x 2 depths x 2 seeds, plus Post-LN at lr 1e9 for both seeds (its base-lr
    # sweep run is the 1-layer depth run), shared by two workers.
    assert "Study: 10 runs" in proc.stdout and "[worker 1] [" in proc.stdout and "ETA" in proc.stdout
    results = json.load(open(out / "results.json"))["runs"]
    assert [r["status"] for r in results].count("done") == 8
    assert {r["name"] for r in results if r["status"] == "diverged"} == {"bert_L1_lr1e+09_s1_n5",
                                                                        "bert_L1_lr1e+09_s2_n5"}
    for r in results:
        if r["status"] == "done":
            assert r["results"]["global_step"] == 5 and 0 <= r["results"]["masked_lm_accuracy"] <= 1
    report = (out / "results.md").read_text()
    assert "| Post-LN BERT | 2 | 2/2 | " in report and "largest stable lr" in report
    assert "| Post-LN BERT | " in report.split("## Learning-rate sweep")[1]
    claims = json.load(open(out / "claims.json"))
    assert {c["verdict"] for c in claims} <= {"reproduced", "not reproduced", "inconclusive"}
    assert any("gap grows from 1 to 2 layers" in c["text"] for c in claims)
    assert not any("larger learning rates" in c["text"] for c in claims)  # RealFormer was not swept
    for name in ("depth.png", "sweep.png", "learning_curves.png", "entropy.png", "jsd.png"):
        assert (out / name).read_bytes().startswith(PNG_HEADER), name
    assert len(json.load(open(out / "attention_summary.json"))["checkpoints"]) == 2  # seed 1, 2 layers

    # One run again from its seed, alone, in a fresh folder: the same held-out numbers.
    name = "realformer_L2_lr0.001_s2_n5"
    alone = h.run_script("experiments/reproduce.py", *h.flags(
        budget="toy", output_dir=tmp_path / "again", variants="bert,realformer", probe_variants="bert",
        depths="1,2", seeds="1,2", sweep_learning_rates="1e9", train_input_file=train,
        eval_input_file=held_out, vocab_file=vocab, only=name))
    _check(alone, "reproduce.py --only")
    first = study_files.read_eval_results(str(out / name / "eval_results.txt"))
    second = study_files.read_eval_results(str(tmp_path / "again" / name / "eval_results.txt"))
    for key in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "loss"):
        assert second[key] == first[key], key
    assert not (tmp_path / "again" / "results.md").exists()

    # A rerun reuses every finished (or diverged) run; a wrong --only name is one clear error.
    archive = tmp_path / "archive"
    again = h.run_script("experiments/reproduce.py", *args, "--noanalysis", "--workers=1",
                         f"--archive_dir={archive}")
    _check(again, "reproduce.py rerun")
    assert again.stdout.count("reusing the finished run") == 10
    assert "0 worker(s)" in again.stdout and "[worker" not in again.stdout  # nothing left to train
    assert "0 finished run(s) restored" in again.stdout

    # The archive (no checkpoints) brings the study to a new output_dir: nothing trains
    # again, and the report, attention section included, is the same.
    assert not list(archive.rglob("*.index")) and len(list(archive.glob("*/eval_results.txt"))) == 8
    moved = [a for a in args if not a.startswith("--output_dir=")] + [f"--output_dir={tmp_path / 'moved'}"]
    restored = h.run_script("experiments/reproduce.py", *moved, "--workers=1", f"--archive_dir={archive}")
    _check(restored, "reproduce.py from the archive")
    assert "10 finished run(s) restored" in restored.stdout
    assert restored.stdout.count("reusing the finished run") == 10 and "training " not in restored.stdout
    def undated(text):  # the report's last lines say when it was written
        return re.sub(r"Written \d{4}-\d\d-\d\d \d\d:\d\d", "Written", text)

    assert undated((tmp_path / "moved" / "results.md").read_text()) == undated(report)
    assert json.load(open(tmp_path / "moved" / "claims.json")) == claims

    # A third seed, reported before it is trained: the 10 finished runs, the 5 others listed.
    partial = [a for a in moved if not a.startswith(("--output_dir=", "--seeds="))]
    partial += [f"--output_dir={tmp_path / 'partial'}", "--seeds=1,2,3", f"--archive_dir={archive}"]
    interim = h.run_script("experiments/reproduce.py", *partial, "--report_only")
    _check(interim, "reproduce.py --report_only")
    assert "Report of 10 finished run(s), 5 not finished" in interim.stdout and "training " not in interim.stdout
    interim_report = (tmp_path / "partial" / "results.md").read_text()
    assert "| Post-LN BERT | 2 | 2/3 | " in interim_report
    assert "realformer_L2_lr0.001_s3_n5" in interim_report.split("Not finished:")[1]
    both = h.run_script("experiments/reproduce.py", *partial, "--report_only", f"--only={name}")
    h.one_error_line(both, "--only", "--report_only")
    wrong = h.run_script("experiments/reproduce.py", *args, "--only=bert_L9_lr1_s1_n5")
    assert wrong.returncode == 1 and "is not a run of this grid" in wrong.stderr


# -- the seeded study: its grid, its statistics ------------------------------------------------------

def test_study_grid_covers_depths_seeds_and_the_sweep_once():
    budget = grid.BUDGETS["study"]
    variants = list(grid.STUDY_VARIANTS)
    runs = grid.plan_runs(budget, variants, variants)
    depth_runs = [r for r in runs if r.steps == budget.num_train_steps]
    sweep_runs = [r for r in runs if r.steps == budget.sweep_train_steps]
    assert len(depth_runs) == len(variants) * len(budget.depths) * len(budget.seeds) == 36
    assert {(r.layers, r.seed) for r in depth_runs} == {(d, s) for d in budget.depths for s in budget.seeds}
    lrs = {budget.learning_rate, *budget.sweep_learning_rates}
    assert len(sweep_runs) == len(variants) * len(lrs) * len(budget.sweep_seeds)
    assert {r.learning_rate for r in sweep_runs} == lrs and {r.layers for r in sweep_runs} == {budget.depths[0]}
    assert len(set(runs)) == len(runs) == len(depth_runs) + len(sweep_runs)
    assert len({r.name for r in runs}) == len(runs)
    # Seed by seed, so a study stopped early holds whole seeds.
    assert [r.seed for r in runs] == sorted(r.seed for r in runs)
    # A sweep as long as the depth runs shares its base-lr runs with them.
    same_length = dataclasses.replace(budget, sweep_train_steps=0, sweep_warmup_steps=0)
    shared = grid.plan_runs(same_length, variants, variants)
    assert len(shared) == len(runs) - len(variants) * len(budget.sweep_seeds)


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_workers_share_the_runs_exactly_once_and_evenly(workers):
    budget = grid.BUDGETS["study"]
    runs = grid.plan_runs(budget, list(grid.STUDY_VARIANTS), ["bert", "pre_ln"])
    shares = [grid.share_of(runs, k, workers) for k in range(workers)]
    assert sorted(r.name for share in shares for r in share) == sorted(r.name for r in runs)
    costs = [sum(r.cost for r in share) for share in shares]
    assert max(costs) - min(costs) <= max(r.cost for r in runs)
    for share in shares:  # each worker keeps the plan's order (seed by seed)
        assert share == [r for r in runs if r in share]


def test_verdicts_follow_welch_standard_errors():
    import statistics

    a, b = [0.30, 0.32, 0.31], [0.25, 0.26, 0.24]
    se = math.sqrt(statistics.variance(a) / 3 + statistics.variance(b) / 3)
    verdict, diff, got_se, z = study_stats.compare(a, b)
    assert verdict == "reproduced" and diff == pytest.approx(0.06) and got_se == pytest.approx(se)
    assert z == pytest.approx(0.06 / se)
    assert study_stats.compare(b, a)[0] == "not reproduced"
    assert study_stats.compare(a, b, direction=-1)[0] == "not reproduced"  # "lower is better" claims
    assert study_stats.compare([0.30, 0.40, 0.20], [0.29, 0.39, 0.21])[0] == "inconclusive"
    assert study_stats.compare([0.3], [0.2])[0] == "inconclusive"  # one seed: no spread to judge by
    assert study_stats.compare([0.3, float("nan"), 0.31], [0.2, 0.21])[0] == "reproduced"
    # The gap between two pairs: (0.06 at depth) - (0.01 shallow), se from all four spreads.
    deep, shallow = (a, b), ([0.27, 0.28, 0.26], [0.26, 0.27, 0.25])
    verdict, diff, se4, _ = study_stats.compare_gaps(deep, shallow)
    spread = sum(statistics.variance(x) / 3 for x in (*deep, *shallow))
    assert diff == pytest.approx(0.05) and se4 == pytest.approx(math.sqrt(spread)) and verdict == "reproduced"
    assert study_stats.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0, 3)


def _masked_record(input_ids, positions, labels, max_predictions):
    pad = max_predictions - len(labels)
    features = {
        "input_ids": input_ids, "input_mask": [1] * len(input_ids), "segment_ids": [0] * len(input_ids),
        "masked_lm_positions": list(positions) + [0] * pad, "masked_lm_ids": list(labels) + [0] * pad,
        "masked_lm_weights": [1.0] * len(labels) + [0.0] * pad, "next_sentence_labels": [0],
    }
    return tf.train.Example(features=tf.train.Features(feature={
        k: tf.train.Feature(float_list=tf.train.FloatList(value=v)) if k == "masked_lm_weights"
        else tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in features.items()}))


def test_plateau_baselines_count_unigram_and_copied_tokens(tmp_path):
    path = str(tmp_path / "eval.tfrecord")
    # (input_ids, masked positions, labels): 7 is the most frequent label (3 of 7); the
    # second record keeps token 9 at position 2 (BERT's "keep" case) and 7 at position 0.
    records = [([4, 4, 4, 4, 4, 4], [1, 3], [7, 8]),
               ([7, 4, 9, 4, 6, 4], [0, 2, 4], [7, 9, 5]),
               ([4, 4, 4, 4, 4, 4], [2, 5], [7, 6])]
    with tf.io.TFRecordWriter(path) as writer:
        for ids, positions, labels in records:
            writer.write(_masked_record(ids, positions, labels, 4).SerializeToString())
    # A plain loop over the same tuples, the way a reader would count by hand.
    labels = [label for _, _, ls in records for label in ls]
    top = max(set(labels), key=labels.count)
    unigram = sum(label == top for label in labels) / len(labels)
    copy = sum(ids[p] == label or label == top for ids, ps, ls in records for p, label in zip(ps, ls)) / len(labels)
    assert study_stats.plateau_baselines(path, 6, 4) == (pytest.approx(unigram), pytest.approx(copy))
    assert (unigram, copy) == (3 / 7, 4 / 7)


def test_stability_verdict_compares_the_largest_stable_learning_rates(tmp_path):
    budget = dataclasses.replace(grid.BUDGETS["toy"], sweep_learning_rates=(1e-2, 1e-1), seeds=(1, 2))
    repro = experiments.Reproduction(str(tmp_path), ["bert", "realformer"], budget, "train", "eval", 48)
    accuracy = {("bert", 1e-3): 0.30, ("bert", 1e-2): 0.11, ("bert", 1e-1): None,  # None: NaN loss
                ("realformer", 1e-3): 0.31, ("realformer", 1e-2): 0.28, ("realformer", 1e-1): 0.10}
    results = []
    for run in repro.plan():
        acc = accuracy[(run.variant, run.learning_rate)]
        results.append(experiments.RunResult(run, "diverged", {}, 1.0, 3) if acc is None else
                       experiments.RunResult(run, "done", {"masked_lm_accuracy": acc}, 1.0, run.steps))
    baseline = 0.10  # 0.11 is within the 0.01 margin of it: back at the plateau
    assert study_stats.max_stable_lr(repro, results, "bert", baseline) == 1e-3
    assert study_stats.max_stable_lr(repro, results, "realformer", baseline) == 1e-2
    (claim,) = study_report.stability_claims(repro, results, baseline)
    assert claim.verdict == "reproduced" and "0.01 vs 0.001" in claim.evidence
    table = "\n".join(study_report.sweep_table(repro, results, baseline))
    assert "(2/2 diverged)" in table and "| 0.01 |" in table
    # A study in progress: runs not finished yet count for nothing, not as collapsed.
    interim = [experiments.RunResult(r.run, "missing", {}, 0.0, 0)
               if r.run.seed == 2 and r.run.learning_rate != 1e-1 else r for r in results]
    assert study_stats.max_stable_lr(repro, interim, "realformer", baseline) == 1e-2
    assert "| 0.3000 | " in "\n".join(study_report.sweep_table(repro, interim, baseline))


# -- a report of archived runs: the study's own data, and where its time went ---------------------

def _archive_of_finished_runs(archive, budget, variants):
    """An archive of a toy grid's runs, finished as far as the report can tell (held-out
    results at the run's step, timing), without training them."""
    for k, run in enumerate(grid.plan_runs(budget, variants, variants)):
        folder = archive / run.name
        folder.mkdir(parents=True)
        (folder / "eval_results.txt").write_text(f"global_step = {run.steps}\nloss = 4.0\nmasked_lm_accuracy = "
                                                 f"{0.2 + 0.01 * k:.2f}\nmasked_lm_loss = 3.5\n")
        (folder / "timing.json").write_text(json.dumps({"train_seconds": 60.0, "eval_seconds": 1.0}))


def test_report_of_an_archive_is_labelled_with_the_studys_own_data_or_refuses_other_data(tmp_path):
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    train = h.write_pretraining_records(tmp_path / "train.tfrecord", 16, 32, 5)
    held_out = h.write_pretraining_records(tmp_path / "eval.tfrecord", 16, 32, 5, seed=1)
    archive = tmp_path / "archive"
    grid_flags = dict(budget="toy", variants="bert", depths="1", seeds="1,2", sweep_learning_rates="1e-2",
                      archive_dir=archive)
    budget = dataclasses.replace(grid.BUDGETS["toy"], depths=(1,), seeds=(1, 2), sweep_learning_rates=(1e-2,))
    _archive_of_finished_runs(archive, budget, ["bert"])

    def report(output_dir, **data):
        return h.run_script("experiments/reproduce.py", *h.flags(output_dir=tmp_path / output_dir, **grid_flags,
                                                                 **data), "--noanalysis", "--report_only")

    first = report("first", train_input_file=train, eval_input_file=held_out, vocab_file=vocab)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Report of 4 finished run(s), 0 not finished" in first.stdout
    kept = run_archive.load_study_data(str(archive))  # the data the archive's runs are labelled with
    assert kept.vocab_size == h.vocab_size() and (kept.unigram_baseline, kept.copy_unigram_baseline) == \
        study_stats.plateau_baselines(held_out, 32, 5)
    labelled = (tmp_path / "first" / "results.md").read_text()
    assert f"vocab {h.vocab_size()}." in labelled and f"{kept.copy_unigram_baseline:.4f}" in labelled
    # Other data (a larger vocab, other held-out records) against this archive: one line.
    other_vocab = h.write_vocab(tmp_path / "other_vocab.txt", words=h.WORDS + ["zebra", "quokka"])
    other_eval = h.write_pretraining_records(tmp_path / "other_eval.tfrecord", 16, 32, 5, seed=7)
    error = h.one_error_line(report("other", train_input_file=train, eval_input_file=other_eval,
                                    vocab_file=other_vocab), "--archive_dir", "other data", f"vocab {h.vocab_size()}")
    assert f"vocab {h.vocab_size() + 2}" in error and not (tmp_path / "other" / "results.md").exists()
    # The archive alone (no data at hand): the same report, from the archive's data.
    alone = report("alone")
    assert alone.returncode == 0, alone.stderr[-3000:]
    undated = re.compile(r"Written \d{4}-\d\d-\d\d \d\d:\d\d")
    assert undated.sub("", (tmp_path / "alone" / "results.md").read_text()) == undated.sub("", labelled)
    # Never a path of this machine: inputs by their place in the output_dir, or their name.
    for name in ("results.md", "results.json"):
        text = (tmp_path / "first" / name).read_text()
        assert str(tmp_path) not in text and "train.tfrecord" in text, name
    (archive / run_archive.STUDY_DATA).unlink()
    h.one_error_line(report("unnamed"), "does not name the data of its runs", run_archive.STUDY_DATA)


def test_pauses_are_stretches_without_steps_and_the_report_says_what_they_were():
    def session(start, gaps):
        times, wall = [(start, 100)], start
        for k, gap in enumerate(gaps):
            wall += gap
            times.append((wall, 100 * (k + 2)))
        return times

    steady = session(0.0, [7.0] * 29)
    assert study_stats.pauses(steady) == [] and study_stats.usual_seconds_per_step(steady) == pytest.approx(0.07)
    held = session(0.0, [7.0] * 5 + [1200.0] + [7.0] * 23)
    (pause,) = study_stats.pauses(held)
    assert (pause.start, pause.seconds) == (35.0, 1200.0)
    beside = session(10.0, [7.0] * 3 + [1100.0] + [7.0] * 25)  # a worker held up at the same time
    alone = session(5000.0, [8.0] * 10 + [300.0] + [8.0] * 18)
    sessions = {"a": (study_stats.pauses(held), 0.07), "b": (study_stats.pauses(beside), 0.07),
                "c": (study_stats.pauses(alone), 0.08), "d": ([], 0.07)}
    text = study_report.pause_lines(sessions)[-1]
    assert "3 run(s) include pauses" in text and "3 stretch(es) of 5-20 min" in text and "7-8 s per 100 steps" in text
    assert "2 of the 3 pauses overlap a pause of another run" in text
    assert "include pauses" not in study_report.pause_lines({"d": ([], 0.07)})[-1]


def test_sweep_columns_are_in_increasing_learning_rate(tmp_path):
    budget = dataclasses.replace(grid.BUDGETS["toy"], learning_rate=3e-3, sweep_learning_rates=(1e-3, 3e-2, 1e-2))
    repro = experiments.Reproduction(str(tmp_path), ["bert"], budget, "train", "eval", 48)
    assert study_stats.sweep_lrs(budget) == (1e-3, 3e-3, 1e-2, 3e-2)
    header = study_report.sweep_table(repro, [], 0.1)[0]
    assert header == "| variant | lr 0.001 | lr 0.003 | lr 0.01 | lr 0.03 | largest stable lr |"
