"""The seeded study behind experiments/reproduce.py (experiments/study/: the grid, training
and evaluating its runs, the run archive, the report's numbers, verdicts and figures),
end to end on a toy grid."""

import dataclasses
import io
import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from experiments.study import grid, reproduction, run_archive, study_files, study_report, study_stats
from realformer_tf import modeling
from realformer_tf.analysis import attention_stats
from realformer_tf.errors import InputError, UsageError

PNG_HEADER = b"\x89PNG\r\n\x1a\n"


def test_attention_summary_means_every_token():
    def statistics(layers, heads=4, tokens=37):
        rng = np.random.default_rng(layers)
        return attention_stats.AttentionStatistics(
            entropy=rng.gamma(2.0, 0.8, size=(layers, heads, tokens)).astype(np.float32),
            jsd=rng.beta(2.0, 5.0, size=(layers - 1, heads, tokens)).astype(np.float32), num_examples=10)

    stats = statistics(layers=3)
    entropy, jsd = study_stats.attention_summary(json.loads(json.dumps(attention_stats.summarize(stats))))
    assert entropy == pytest.approx(float(np.mean(stats.entropy, dtype=np.float64)), rel=1e-6)
    assert jsd == pytest.approx(float(np.mean(stats.jsd, dtype=np.float64)), rel=1e-6)
    one_layer = attention_stats.summarize(statistics(layers=1))
    assert math.isnan(study_stats.attention_summary(one_layer)[1])


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


def test_a_packed_archive_is_one_file_that_changes_only_with_its_runs(tmp_path):
    archive = tmp_path / "archive"
    (archive / "bert_L1" / "summaries" / "train").mkdir(parents=True)
    (archive / "bert_L1" / "summaries" / "train" / "events.out").write_bytes(b"curve")
    (archive / "bert_L1" / "eval_results.txt").write_text("global_step = 5\n")
    (archive / "bert_L1" / "timing.json.partial").write_text("{")  # a copy cut short: not packed
    packed = str(tmp_path / "runs.tar.xz")
    assert run_archive.is_packed(packed) and not run_archive.is_packed(str(archive))
    assert run_archive.pack(str(archive), packed)
    written = open(packed, "rb").read()
    os.utime(archive / "bert_L1" / "eval_results.txt", (0, 0))  # times are not packed
    assert not run_archive.pack(str(archive), packed) and open(packed, "rb").read() == written
    assert sorted(run_archive.unpack(packed, str(tmp_path / "copy"))) == [
        "bert_L1/eval_results.txt", "bert_L1/summaries/train/events.out"]
    assert (tmp_path / "copy" / "bert_L1" / "summaries" / "train" / "events.out").read_bytes() == b"curve"
    (archive / "bert_L2").mkdir()
    (archive / "bert_L2" / "eval_results.txt").write_text("global_step = 5\n")
    assert run_archive.pack(str(archive), packed) and len(run_archive.unpack(packed, str(tmp_path / "copy"))) == 3

    import lzma
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("../outside"), io.BytesIO(b""))
    (tmp_path / "bad.tar.xz").write_bytes(lzma.compress(buffer.getvalue()))
    with pytest.raises(InputError, match="outside its folder"):
        run_archive.unpack(str(tmp_path / "bad.tar.xz"), str(tmp_path / "x"))
    (tmp_path / "plain.tar.xz").write_text("not xz")
    with pytest.raises(InputError, match="not a packed run archive"):
        run_archive.unpack(str(tmp_path / "plain.tar.xz"), str(tmp_path / "x"))


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
    with pytest.raises(UsageError, match="unknown variant.*post"):  # an old name is no flag value
        grid.parse_variants("post")


def test_a_study_started_under_the_old_names_is_reused(tmp_path):
    """study.json of an older version names the variants post / pre, and its run folders
    post_L2_...: the names map to the current ones and the folders are found."""
    budget = grid.BUDGETS["toy"]
    repro = reproduction.Reproduction(str(tmp_path), ["post", "pre", "realformer"], budget, "train", "eval", 48,
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
    repro = reproduction.Reproduction(str(tmp_path), ["bert", "realformer"], budget, "train", "eval", 48,
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
    # Every 2-layer run keeps its attention summary; only seed 1's, which the plots show, its sample.
    assert len(list(archive.glob("*/attention_summary.json"))) == 4
    assert sorted(p.parent.name for p in archive.glob("*/attention_points.npz")) == [
        "bert_L2_lr0.001_s1_n5", "realformer_L2_lr0.001_s1_n5"]
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
    repro = reproduction.Reproduction(str(tmp_path), ["bert", "realformer"], budget, "train", "eval", 48)
    accuracy = {("bert", 1e-3): 0.30, ("bert", 1e-2): 0.11, ("bert", 1e-1): None,  # None: NaN loss
                ("realformer", 1e-3): 0.31, ("realformer", 1e-2): 0.28, ("realformer", 1e-1): 0.10}
    results = []
    for run in repro.plan():
        acc = accuracy[(run.variant, run.learning_rate)]
        results.append(reproduction.RunResult(run, "diverged", {}, 1.0, 3) if acc is None else
                       reproduction.RunResult(run, "done", {"masked_lm_accuracy": acc}, 1.0, run.steps))
    baseline = 0.10  # 0.11 is within the 0.01 margin of it: back at the plateau
    assert study_stats.max_stable_lr(repro, results, "bert", baseline) == 1e-3
    assert study_stats.max_stable_lr(repro, results, "realformer", baseline) == 1e-2
    (claim,) = study_report.stability_claims(repro, results, baseline)
    assert claim.verdict == "reproduced" and "0.01 vs 0.001" in claim.evidence
    table = "\n".join(study_report.sweep_table(repro, results, baseline))
    assert "(2/2 diverged)" in table and "| 0.01 |" in table
    # A study in progress: runs not finished yet count for nothing, not as collapsed.
    interim = [reproduction.RunResult(r.run, "missing", {}, 0.0, 0)
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
    # Packed in one file, the same report; reporting leaves the file as it was.
    packed = tmp_path / "runs.tar.xz"
    run_archive.pack(str(archive), str(packed))
    written = packed.read_bytes()
    grid_flags["archive_dir"] = packed
    assert report("from_packed").returncode == 0 and packed.read_bytes() == written
    assert undated.sub("", (tmp_path / "from_packed" / "results.md").read_text()) == undated.sub("", labelled)
    grid_flags["archive_dir"] = archive
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
    repro = reproduction.Reproduction(str(tmp_path), ["bert"], budget, "train", "eval", 48)
    assert study_stats.sweep_lrs(budget) == (1e-3, 3e-3, 1e-2, 3e-2)
    header = study_report.sweep_table(repro, [], 0.1)[0]
    assert header == "| variant | lr 0.001 | lr 0.003 | lr 0.01 | lr 0.03 | largest stable lr |"
