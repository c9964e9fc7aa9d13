"""The pretraining comparison with transformers (research.compare_pretraining): both sides
see the same records in the same order and apply the same recipe, so a few steps from
the same initial weights end at the same weights; its evaluation, resume and report."""

import json
import os

import numpy as np
import pytest

import helpers_data as h
from experiments.study import compare_pretraining as cp
from experiments.study import peer_bert
from realformer_tf.checkpoints import hf
from realformer_tf.checkpoints import tf_checkpoint as ckpt

pytest.importorskip("torch")
pytest.importorskip("transformers")

SEQ, PRED = 24, 4


def settings(tmp_path, **overrides):
    train = h.write_pretraining_records(tmp_path / "train.tfrecord", 40, SEQ, PRED, seed=1)
    held_out = h.write_pretraining_records(tmp_path / "eval.tfrecord", 12, SEQ, PRED, seed=2)
    values = dict(train_file=train, eval_file=held_out, vocab_size=h.vocab_size(), max_seq_length=SEQ,
                  max_predictions_per_seq=PRED, hidden_size=24, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=40, train_batch_size=4, learning_rate=3e-2, num_train_steps=4,
                  num_warmup_steps=1, eval_every=2, eval_batch_size=4, max_eval_steps=3)
    values.update(overrides)
    return cp.Settings(**values)


def test_learning_rate_is_berts_schedule():
    rates = [peer_bert.learning_rate(step, 1.0, 10, 4) for step in range(12)]
    np.testing.assert_allclose(rates[:5], [0, 0.25, 0.5, 0.75, 0.6])
    assert rates[10] == rates[11] == 0.0


def test_masked_lm_metrics_against_a_plain_loop():
    rng = np.random.default_rng(0)
    logits, ids = rng.normal(size=(3, 4, 7)), rng.integers(0, 7, size=(3, 4))
    weights = (rng.random((3, 4)) > 0.3).astype(np.float32)
    hits = nll = total = 0.0
    for b in range(3):
        for p in range(4):
            if weights[b, p]:
                row = logits[b, p]
                nll += np.log(np.exp(row).sum()) - row[ids[b, p]]
                hits += float(np.argmax(row) == ids[b, p])
                total += 1
    accuracy, loss, weight = peer_bert.masked_lm_metrics(logits, ids, weights)
    assert weight == total
    np.testing.assert_allclose([accuracy, loss], [hits / total, nll / total], rtol=1e-7)


@pytest.mark.slow
def test_both_sides_train_the_same_weights_on_the_same_data(tmp_path):
    s = settings(tmp_path)
    batches = cp.eval_batches(s)
    init_checkpoint, folder = cp.initial_weights(s, seed=3, work_dir=str(tmp_path / "w"))
    ours_curve, final = cp.run_ours(s, 3, init_checkpoint, str(tmp_path / "w"), batches)
    peer_curve, peer = cp.run_peer(s, 3, folder, batches)

    # The same weights after four updates (same data, order, loss, schedule, clipping,
    # AdamW): every weight moved, and the two sides differ by a small fraction of that
    # (float32 differences, which Adam's normalized step carries into every element).
    ours, start = ckpt.open_named_weights(final), ckpt.open_named_weights(init_checkpoint)
    differences, moves = [], []
    for hf_name, array in peer.named_weights().items():
        mapped = hf.to_original_name(hf_name)
        if mapped is None:  # the tied decoder, buffers
            continue
        name, transpose = mapped
        want, initial = ((x.T if transpose else x) for x in (ours.get(name), start.get(name)))
        differences.append(np.abs(array - want).ravel())
        moves.append(np.abs(want - initial).ravel())
    difference, move = np.concatenate(differences), np.concatenate(moves)
    assert np.median(move) > 5e-3, np.median(move)
    assert np.median(difference) < 0.01 * np.median(move), (np.median(difference), np.median(move))
    assert difference.max() < 0.03 * move.max(), (difference.max(), move.max())
    assert sorted(ours_curve) == sorted(peer_curve) == [0, 2, 4]
    for step in ours_curve:
        np.testing.assert_allclose(ours_curve[step], peer_curve[step], atol=2e-4)


@pytest.mark.slow
def test_compare_resumes_and_reports(tmp_path, capsys):
    s = settings(tmp_path, num_train_steps=2, eval_every=2)
    out = str(tmp_path / "out")
    results = cp.compare(s, seeds=(1,), output_dir=out, sides=("transformers",))
    assert set(results["runs"]) == {"transformers"} and 0 < results["baselines"]["unigram"] < 1
    assert "both sides are needed" in cp.report_markdown(results)
    results = cp.compare(s, seeds=(1,), output_dir=out)  # resumes: only ours runs now
    saved = json.load(open(os.path.join(out, "compare_pretraining.json")))
    assert saved["runs"]["transformers"]["1"] == results["runs"]["transformers"]["1"]
    assert set(saved["runs"]) == {"ours", "transformers"}
    table = cp.report_markdown(results)
    rows = [line for line in table.splitlines() if line[:3] in ("| 0", "| 2")]
    assert len(rows) == 2 and "nan" not in table and "copy + unigram" in table  # steps 0 and 2
    assert os.path.getsize(cp.plot(results, str(tmp_path / "curves.png"))) > 1000
    with pytest.raises(ValueError, match="other settings"):
        cp.compare(cp.Settings(**dict(vars(s), learning_rate=1e-4)), seeds=(1,), output_dir=out)


def test_the_program_runs_the_comparison_and_refuses_bad_flags(tmp_path):
    s = settings(tmp_path, num_train_steps=2, eval_every=2)
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    common = dict(train_file=s.train_file, eval_file=s.eval_file, vocab_file=vocab, output_dir=str(out),
                  max_seq_length=SEQ, max_predictions_per_seq=PRED, hidden_size=24, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=40, train_batch_size=4, num_train_steps=2,
                  num_warmup_steps=1, eval_every=2, eval_batch_size=4, max_eval_steps=2)
    bad = h.run_script("experiments/compare_pretraining.py", *h.flags(**common, seeds="one"))
    assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1].startswith("error: --seeds=one")
    missing = h.run_script("experiments/compare_pretraining.py", *h.flags(**dict(common, eval_file="nowhere*")))
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines()[-1] == "error: --eval_file=nowhere*: no file matches; give the pretraining TFRecords"
    wrong_side = h.run_script("experiments/compare_pretraining.py", *h.flags(**common, sides="x-transformers"))
    assert wrong_side.returncode == 1 and "(the sides of --variant=bert)" in wrong_side.stderr
    done = h.run_script("experiments/compare_pretraining.py", *h.flags(**common, seeds="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    table = (out / "compare_pretraining.md").read_text()
    assert "| 2 |" in table and (out / "compare_pretraining.png").stat().st_size > 1000


def test_processes_sharing_an_output_dir_keep_each_others_runs(tmp_path):
    """Two processes load the file, then each saves its own run: the second save keeps
    the first's run, and a process's own earlier runs survive another's overwrite."""
    s = settings(tmp_path)
    path = str(tmp_path / "out" / "compare_pretraining.json")
    run = {"steps": [0], "accuracy": [0.1], "loss": [5.0], "seconds": 1.0}
    first = {"settings": cp._recorded_settings(s), "baselines": {"unigram": 0.1, "copy_unigram": 0.2},
             "runs": {"ours": {"1": run}}}
    second = json.loads(json.dumps(dict(first, runs={"transformers": {"1": run}})))
    cp._save(path, first, s)
    saved = cp._save(path, second, s)
    assert saved["runs"] == {"ours": {"1": run}, "transformers": {"1": run}}
    with open(path, "w") as f:  # a process from before the lock writes only its own runs
        json.dump(dict(first, runs={"ours": {"2": run}}), f)
    saved = cp._save(path, saved, s)
    assert {side: sorted(runs) for side, runs in saved["runs"].items()} == {"ours": ["1", "2"], "transformers": ["1"]}
    assert json.load(open(path)) == saved
    assert saved["settings"]["train_file"] == os.path.basename(s.train_file)  # no machine's path


def test_a_difference_is_marked_only_outside_two_standard_errors_over_seeds():
    from experiments.study import compare_pretraining as cp

    # 2 SE = 2 * sqrt(0.002^2 / 3 + 0.002^2 / 3) = 0.00327
    assert cp._difference(0.0100, 0.002, 3, 0.002, 3) == "+0.0100 (0.0033)*"
    assert cp._difference(-0.0030, 0.002, 3, 0.002, 3) == "-0.0030 (0.0033)"
    assert cp._difference(0.0030, float("nan"), 1, float("nan"), 1) == "+0.0030"  # one seed: no spread


# -- the NormFormer peer: x-transformers ------------------------------------------------------

def test_xtransformers_peer_has_normformers_blocks():
    pytest.importorskip("x_transformers")
    import torch
    from experiments.study import peer_xtransformers as px

    model = px.xtransformers_normformer(vocab_size=50, hidden_size=24, num_layers=2, num_heads=2,
                                        intermediate_size=48, max_seq_length=16)
    stack = model.encoder.attn_layers
    assert stack.layer_types == ("a", "f", "a", "f")
    for layer_type, (norms, block, _) in zip(stack.layer_types, stack.layers):
        assert norms[0] is not None  # Pre-LN before every sublayer
        if layer_type == "a":  # NormFormer: a norm after attention and a scale per head
            assert norms[1] is not None and block.head_scale_params.numel() == 2
            assert block.to_q.out_features == 24  # heads x head size = width (12 each)
        else:  # no norm after the feed-forward, one after its activation
            assert isinstance(norms[1], torch.nn.Identity)
            assert any(type(m).__name__ == "LayerNorm" and m.ln.normalized_shape == (48,)
                       for m in block.modules() if hasattr(m, "ln"))
    assert px.drop_feed_forward_post_norms(stack) == 0  # already dropped, attention norms kept
    with pytest.raises(ValueError, match="intermediate_size=50 is not a multiple of hidden_size=24"):
        px.xtransformers_normformer(50, 24, 1, 2, 50, 16)


def test_bert_initialize_draws_every_weight_as_bert_does():
    """Each linear and embedding weight: a normal with sd 0.02 cut at 2 sd (so its sd is
    0.02 * 0.88), biases 0; the norms' gains and the head scales are left as they were
    (x-transformers stores most gains as an offset from 1, so 0)."""
    pytest.importorskip("x_transformers")
    import torch
    from experiments.study import peer_xtransformers as px

    torch.manual_seed(0)
    model = px.xtransformers_normformer(vocab_size=300, hidden_size=24, num_layers=2, num_heads=2,
                                        intermediate_size=48, max_seq_length=16)
    own_embedding_sd = float(model.encoder.token_emb.emb.weight.std())
    kept = {name: p.detach().numpy().copy() for name, p in model.named_parameters()
            if "gamma" in name or "head_scale" in name}
    drawn = px.bert_initialize(model)
    linears = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))]
    assert drawn == len(linears) >= 2 * 6 + 3  # per layer q, k, v, out, ff in, ff out; embeddings, heads
    for module in linears:
        weight = module.weight.detach().numpy()
        assert np.abs(weight).max() <= 0.04
        if weight.size >= 1000:
            assert 0.0155 < weight.std() < 0.0195, (module, weight.std())
        if getattr(module, "bias", None) is not None:
            assert not module.bias.detach().numpy().any()
    assert own_embedding_sd > 0.15  # x-transformers' own: Kaiming's sd sqrt(2 / 24) = 0.29
    assert len(kept) == 2 * 5 + 1  # per layer: 2 pre-norms, the attention post-norm and head scale, the
    # feed-forward post-activation norm; the final norm
    for name, parameter in model.named_parameters():
        if name in kept:
            np.testing.assert_array_equal(parameter.detach().numpy(), kept[name])
    with pytest.raises(ValueError, match="init='xavier'"):
        px.PeerXNormFormer(dict(vocab_size=30, hidden_size=24, num_layers=1, num_heads=2, intermediate_size=48,
                                max_seq_length=16), 1, 1e-3, 10, 1, init="xavier")


def test_xtransformers_peer_learns_a_batch_through_the_shared_loop(tmp_path):
    pytest.importorskip("x_transformers")
    from experiments.study import peer_xtransformers as px

    s = settings(tmp_path, variant="normformer", intermediate_size=48)
    batch = cp.eval_batches(s)[0]
    peer = px.PeerXNormFormer(s.peer_sizes(), 1, 1e-2, 60, 5)
    names = dict(peer.params)
    decayed = [n for n in names if not any(part in n for part in peer.no_decay)]
    assert decayed and not any("gamma" in n or "head_scale" in n or n.endswith("bias") for n in decayed)
    logits = peer.masked_lm_logits(batch)
    assert logits.shape == batch["masked_lm_ids"].shape + (s.vocab_size,)
    losses = [peer.train_step(batch) for _ in range(60)]
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    accuracy, _, _ = peer_bert.masked_lm_metrics(peer.masked_lm_logits(batch), batch["masked_lm_ids"],
                                                 batch["masked_lm_weights"])
    assert accuracy > 0.5


@pytest.mark.slow
def test_normformer_comparison_runs_ours_and_xtransformers(tmp_path):
    pytest.importorskip("x_transformers")
    s = settings(tmp_path, variant="normformer", num_train_steps=2, eval_every=2, intermediate_size=48)
    assert s.sides == ("ours", "x-transformers", "x-transformers-bert-init")
    assert s.bert_config().layer_norm_type == "normformer"
    out = str(tmp_path / "out")
    results = cp.compare(s, seeds=(1,), output_dir=out, sides=("ours", "x-transformers"))
    assert set(results["runs"]) == {"ours", "x-transformers"}
    assert "x-transformers-bert-init" not in cp.report_markdown(results)  # a peer without runs: no table
    results = cp.compare(s, seeds=(1,), output_dir=out)  # resumes: only the BERT-initialized peer runs
    assert set(results["runs"]) == set(s.sides)
    for run in results["runs"].values():
        assert run["1"]["steps"] == [0, 2] and all(0 <= a <= 1 for a in run["1"]["accuracy"])
    # the two x-transformers peers start from different weights
    assert results["runs"]["x-transformers"]["1"]["loss"][0] != results["runs"]["x-transformers-bert-init"]["1"]["loss"][0]
    table = cp.report_markdown(results)
    assert "| step | ours accuracy | x-transformers accuracy |" in table and "nan" not in table
    assert "| step | ours accuracy | x-transformers-bert-init accuracy |" in table
    with pytest.raises(ValueError, match="has a peer for bert, normformer"):
        cp.Settings(**dict(vars(s), variant="pre_ln"))
    with pytest.raises(ValueError, match="intermediate_size=40 is not a multiple of hidden_size=24"):
        cp.Settings(**dict(vars(s), intermediate_size=40))  # refused before anything trains
