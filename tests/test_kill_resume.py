"""kill -9 at random points of pretraining (BERT, the causal LM), translation and fine-tuning:
each rerun resumes from the last complete checkpoint, loses at most one save interval,
and the run ends with the weights of an uninterrupted run (same --seed: the data order
is replayed and the dropout seeds are checkpointed).

Every kill is a real SIGKILL of a run_*.py subprocess, at a random step (plus a random
delay, so some land inside a save) or during start-up; the runs that finish run in this
process. `pytest -s` prints the tally. ETC has no case of its own: it runs through the
same runner and Trainer as BERT pretraining.
"""

import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import helpers_data as h

# kills at steps a loaded machine would shift: the serial pass (Makefile)
pytestmark = pytest.mark.serial

SAVE_EVERY = 4
KILLS = int(os.environ.get("REALFORMER_KILLS", "3"))  # per test; more for a longer tally
STEP_LINE = re.compile(r"^step (\d+)/(\d+) ", re.M)
RESUMED_LINE = re.compile(r"^Resumed from \S+ at step (\d+)$", re.M)


def _command(script, args):
    return [sys.executable, os.path.join(h.ROOT, script), *args]


def _run_to_completion(script, args, log_path):
    """The uninterrupted runs (the reference, and the last rerun after the kills) run in
    this process; only the runs that are killed need a process of their own."""
    proc = h.run_script(script, *args)
    text = proc.stdout + proc.stderr
    with open(log_path, "w") as log:
        log.write(text)
    assert proc.returncode == 0, f"{script} failed ({proc.returncode}):\n{text[-3000:]}"
    return text


def _run_and_kill(script, args, log_path, kill_at_step, delay, timeout=300):
    """Starts the script and SIGKILLs it once it has printed step `kill_at_step` (None:
    `delay` seconds after the start) and `delay` more seconds have passed. Returns
    (log text, whether it was killed)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_command(script, args), cwd=h.ROOT, env=h.script_env(PYTHONUNBUFFERED="1"),
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + timeout
            while proc.poll() is None and time.time() < deadline:
                steps = [int(s) for s, _ in STEP_LINE.findall(open(log_path).read())]
                if kill_at_step is None or (steps and steps[-1] >= kill_at_step):
                    time.sleep(delay)
                    break
                time.sleep(0.02)
            killed = proc.poll() is None
            if killed:
                os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    text = open(log_path).read()
    assert killed or proc.returncode == 0, f"{script} failed ({proc.returncode}):\n{text[-3000:]}"
    return text, killed


def _kill_and_resume(script, args, tmp_path, total_steps, kills, seed):
    """Kills the run `kills` times at random points, then lets it finish; returns the
    per-kill (last step printed before the kill, step the rerun resumed at)."""
    rng = random.Random(seed)
    plan = [(None, rng.uniform(1.0, 4.0))]  # once during start-up / set-up
    steps = sorted(rng.randrange(1, total_steps) for _ in range(kills - 1))  # spread over the run
    plan += [(step, rng.uniform(0.0, 0.3)) for step in steps]
    last_seen, resumed_at = [], []
    for attempt, (step, delay) in enumerate(plan):
        text, killed = _run_and_kill(script, args, tmp_path / f"attempt{attempt}.log", step, delay)
        match = RESUMED_LINE.search(text)
        if attempt:
            resumed_at.append(int(match.group(1)) if match else 0)
        if not killed:
            break
        steps = [int(s) for s, _ in STEP_LINE.findall(text)]
        last_seen.append(max(steps, default=resumed_at[-1] if resumed_at else 0))
    final = _run_to_completion(script, args, tmp_path / "final.log")
    match = RESUMED_LINE.search(final)
    resumed_at.append(int(match.group(1)) if match else 0)
    return list(zip(last_seen, resumed_at))


def _max_weight_difference(prefix_a, prefix_b):
    import tensorflow as tf

    a, b = tf.train.load_checkpoint(prefix_a), tf.train.load_checkpoint(prefix_b)
    names = sorted(a.get_variable_to_shape_map())
    assert names == sorted(b.get_variable_to_shape_map())
    return max(float(np.max(np.abs(a.get_tensor(n) - b.get_tensor(n)))) for n in names)


def _compare_with_uninterrupted(what, script, args, tmp_path, total_steps, seed, kills=KILLS,
                                checkpoint="bert_model.ckpt"):
    """Runs `script` uninterrupted and, in another output_dir, killed KILLS times;
    checks the kills' losses and the final weights. Returns the two output dirs."""
    reference, killed = str(tmp_path / "reference"), str(tmp_path / "killed")
    (tmp_path / "logs").mkdir()
    _run_to_completion(script, args(reference), tmp_path / "reference.log")
    outcomes = _kill_and_resume(script, args(killed), tmp_path / "logs", total_steps, kills, seed)
    difference = _max_weight_difference(os.path.join(reference, checkpoint), os.path.join(killed, checkpoint))
    lost = [max(0, seen - resumed) for seen, resumed in outcomes]
    print(f"\n{what}: {len(outcomes)} kill(s); (last step printed, resumed at): {outcomes}; "
          f"steps lost per kill: {lost}; max |weight difference| vs uninterrupted: {difference:.3g}")
    assert outcomes, "no kill landed"
    for (seen, resumed), steps_lost in zip(outcomes, lost):
        assert resumed % SAVE_EVERY == 0, (seen, resumed)  # saves at multiples of the interval
        assert steps_lost <= SAVE_EVERY, (seen, resumed)
    assert difference <= 1e-5
    return reference, killed


@pytest.mark.slow
def test_pretraining_killed_at_random_points(tmp_path):
    seq, pred, steps = 32, 5, 40
    records = h.write_pretraining_records(tmp_path / "train.tfrecord", 72, seq, pred)
    config = h.write_config(tmp_path / "bert_config.json", residual_attention=True)

    def args(output_dir):
        return h.flags(input_file=records, output_dir=output_dir, do_train=True, do_eval=False,
                       bert_config_file=config, train_batch_size=8, max_seq_length=seq,
                       max_predictions_per_seq=pred, num_train_steps=steps, num_warmup_steps=4,
                       learning_rate=1e-3, save_checkpoints_steps=SAVE_EVERY, iterations_per_loop=1,
                       keep_checkpoint_max=2, seed=7)

    _compare_with_uninterrupted("pretraining", "run_pretraining.py", args, tmp_path, steps, seed=1)


@pytest.mark.slow
def test_fine_tuning_killed_at_random_points(tmp_path):
    data_dir = h.write_glue_mrpc(str(tmp_path / "mrpc"), num_train=96, num_dev=12)
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    config = h.write_config(tmp_path / "bert_config.json", layer_norm_type="normformer")
    steps = 96 // 4 * 2

    def args(output_dir):
        return h.flags(task_name="MRPC", data_dir=data_dir, vocab_file=vocab, bert_config_file=config,
                       output_dir=output_dir, do_train=True, do_eval=True, max_seq_length=24,
                       train_batch_size=4, eval_batch_size=4, num_train_epochs=2, learning_rate=1e-3,
                       save_checkpoints_steps=SAVE_EVERY, iterations_per_loop=1, seed=3)

    reference, killed = _compare_with_uninterrupted("fine-tuning (MRPC)", "run_classifier.py", args,
                                                    tmp_path, steps, seed=2)
    with open(os.path.join(reference, "eval_results.txt")) as a, open(os.path.join(killed, "eval_results.txt")) as b:
        assert a.read() == b.read()


@pytest.mark.slow
def test_causal_lm_pretraining_killed_at_random_points(tmp_path):
    """The same guarantee for a causal LM (RealFormer + NormFormer, next-token blocks
    from create_pretraining_data.py --objective=causal_lm; same runner, same Trainer)."""
    import json

    from realformer_tf.app import create_pretraining_data

    seq, steps = 16, 24
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    text = h.write_text(tmp_path / "train.txt", num_docs=12, seed=1)
    records = str(tmp_path / "train.tfrecord")
    assert create_pretraining_data.main(["create_pretraining_data.py", "--objective=causal_lm", f"--input_file={text}",
                                         f"--vocab_file={vocab}", f"--max_seq_length={seq}",
                                         f"--output_file={records}"]) == 0
    config = tmp_path / "lm_config.json"
    config.write_text(json.dumps(dict(vocab_size=h.vocab_size(), hidden_size=16, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                                      residual_attention=True, layer_norm_type="normformer")))

    def args(output_dir):
        return h.flags(input_file=records, output_dir=output_dir, do_train=True, do_eval=False,
                       bert_config_file=config, model_type="causal_lm", train_batch_size=8, max_seq_length=seq,
                       num_train_steps=steps, num_warmup_steps=4, learning_rate=1e-3,
                       save_checkpoints_steps=SAVE_EVERY, iterations_per_loop=1, keep_checkpoint_max=2, seed=7)

    _compare_with_uninterrupted("causal LM pretraining", "run_pretraining.py", args, tmp_path, steps, seed=4,
                                kills=max(2, KILLS - 1), checkpoint="lm_model.ckpt")


@pytest.mark.slow
def test_translation_killed_at_random_points(tmp_path):
    """The same guarantee for translation (Admin + residual attention on the three paths,
    dropout on; run_translation.py's --max_tokens length buckets replayed from --seed and
    skipped to the resumed step; same runner, same Trainer)."""
    import json

    from realformer_tf.app import make_vocab
    from test_translation import write_toy_corpus

    steps = 24
    write_toy_corpus(tmp_path, "train", 100, seed=1)  # 13 batches an epoch: the run crosses an epoch's end
    assert make_vocab.main(["make_vocab.py", f"--input_file={tmp_path}/train.en,{tmp_path}/train.es",
                            "--vocab_size=100", "--vocab_type=sentencepiece", "--do_lower_case=False",
                            f"--output_file={tmp_path}/spm"]) == 0
    config = tmp_path / "translation_config.json"
    config.write_text(json.dumps(dict(model_type="translation", vocab_size=100, hidden_size=16, num_hidden_layers=2,
                                      num_decoder_layers=2, num_attention_heads=2, intermediate_size=32,
                                      max_position_embeddings=32, residual_attention=True,
                                      admin_residual_scale=True)))

    def args(output_dir):
        return h.flags(bert_config_file=config, spm_model_file=tmp_path / "spm.model", output_dir=output_dir,
                       train_source_file=tmp_path / "train.en", train_target_file=tmp_path / "train.es",
                       do_train=True, max_seq_length=24, max_tokens=128, num_train_steps=steps, num_warmup_steps=4,
                       learning_rate=1e-3, save_checkpoints_steps=SAVE_EVERY, iterations_per_loop=1,
                       keep_checkpoint_max=2, seed=7)

    _compare_with_uninterrupted("translation (Admin + RealFormer)", "run_translation.py", args, tmp_path, steps,
                                seed=5, kills=max(2, KILLS - 1), checkpoint="translation_model.ckpt")
