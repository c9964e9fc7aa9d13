"""The pretraining comparison with transformers (research.compare_pretraining): both sides
see the same records in the same order and apply the same recipe, so a few steps from
the same initial weights end at the same weights; its evaluation, resume and report."""

import json
import os

import numpy as np
import pytest

import helpers_data as h
from realformer_tf.checkpoints import hf
from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.research import compare_pretraining as cp
from realformer_tf.research import peer_bert

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
    done = h.run_script("experiments/compare_pretraining.py", *h.flags(**common, seeds="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    table = (out / "compare_pretraining.md").read_text()
    assert "| 2 |" in table and (out / "compare_pretraining.png").stat().st_size > 1000


def test_a_difference_is_marked_only_outside_two_standard_errors_over_seeds():
    from realformer_tf.research import compare_pretraining as cp

    # 2 SE = 2 * sqrt(0.002^2 / 3 + 0.002^2 / 3) = 0.00327
    assert cp._difference(0.0100, 0.002, 3, 0.002, 3) == "+0.0100 (0.0033)*"
    assert cp._difference(-0.0030, 0.002, 3, 0.002, 3) == "-0.0030 (0.0033)"
    assert cp._difference(0.0030, float("nan"), 1, float("nan"), 1) == "+0.0030"  # one seed: no spread
