"""Data parallelism computes what one device computes.

MirroredStrategy runs in the test process, over the two logical CPUs of
tests/conftest.py (its `two_replicas`). MultiWorkerMirroredStrategy runs two worker processes: TF_CONFIG is read when
TensorFlow starts, and the processes are what is tested.
"""

import json
import os
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from realformer_tf import optimization
from realformer_tf.jobs.tasks.pretraining import PretrainingTask
from realformer_tf.training.distribution import run_settings
from realformer_tf.training.trainer import Trainer


# Same examples per step, same initial weights, no dropout: MirroredStrategy over two
# logical CPUs vs the default strategy.
GLOBAL, STEPS, SEQ, PRED = 8, 5, 16, 4


def _mirrored_examples():
    batches = [h.fixed_pretraining_batch(GLOBAL, SEQ, PRED, seed=100 + s) for s in range(STEPS)]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def _one_pipeline(examples):
    def dataset_fn(input_context=None, start_step=0):
        # One input pipeline on one host: the replicas take consecutive per-replica
        # batches of it, so replica r of step s sees examples [s*GLOBAL + r*per, ... + per),
        # the same examples the single device sees in its step s.
        per = input_context.get_per_replica_batch_size(GLOBAL) if input_context else GLOBAL
        assert input_context is None or input_context.num_input_pipelines == 1
        return tf.data.Dataset.from_tensor_slices(examples).batch(per, drop_remainder=True).repeat()

    return dataset_fn


def _make_optimizer(name):
    if name == "sgd":  # updates proportional to the gradient: no scale invariance to hide a bug
        return keras.optimizers.SGD(learning_rate=0.5)
    return optimization.create_optimizer("adamw", 1e-3, STEPS, 0)


def _train(strategy, dataset_fn, model_dir, optimizer, clip, initial=None):
    config = h.tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    with run_settings(1, "none"):
        trainer = Trainer(
            PretrainingTask(config), strategy, model_dir, optimizer_fn=lambda: _make_optimizer(optimizer),
            steps_per_loop=1, save_checkpoints_steps=1000, clip_norm=clip, global_batch_size=GLOBAL,
        )
        trainer.restore_or_initialize()
    if initial is not None:
        trainer.model.set_weights(initial)
    start = [w.copy() for w in trainer.model.get_weights()]
    losses = []
    trainer.train(dataset_fn, STEPS, log_fn=lambda line: losses.append(float(line.rsplit("| loss ", 1)[1].split()[0])))
    return trainer, start, trainer.model.get_weights(), losses


def _first_gradient_norm(trainer, examples):
    features = {k: tf.constant(v[:GLOBAL]) for k, v in examples.items()}
    with tf.GradientTape() as tape:
        sums = trainer.task.metric_sums(features, trainer.model(features, training=True))
        loss = sum(sums[t][0] / sums[t][1] for t in trainer.task.loss_terms)
    return float(tf.linalg.global_norm(tape.gradient(loss, trainer.model.trainable_variables)))


def _mirrored_against_one_device(mirrored, out, optimizer, clip):
    examples = _mirrored_examples()
    dataset_fn = _one_pipeline(examples)
    assert mirrored.num_replicas_in_sync == 2
    # Check the assumption of _one_pipeline on the first step's two per-replica batches.
    first = next(iter(mirrored.distribute_datasets_from_function(dataset_fn)))
    parts = [p.numpy() for p in mirrored.experimental_local_results(first["input_ids"])]
    np.testing.assert_array_equal(np.concatenate(parts), examples["input_ids"][:GLOBAL])

    one, one_start, one_end, one_losses = _train(tf.distribute.get_strategy(), dataset_fn, f"{out}/default",
                                                 optimizer, clip)
    _, two_start, two_end, two_losses = _train(mirrored, dataset_fn, f"{out}/mirrored", optimizer, clip,
                                               initial=one_start)
    one.model.set_weights(one_start)
    return dict(
        start_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(one_start, two_start)),
        max_weight_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(one_end, two_end)),
        max_update=max(float(np.max(np.abs(a - b))) for a, b in zip(one_start, one_end)),
        first_gradient_norm=_first_gradient_norm(one, examples),
        losses_default=one_losses, losses_mirrored=two_losses)


@pytest.mark.slow
# AdamW (the real optimizer) and plain SGD, which unlike Adam is not invariant to the
# gradient's scale, so a missing or doubled cross-replica sum would show; with clip_norm
# 0.05 the clipping of the global (all-reduced) gradient is active.
@pytest.mark.parametrize("optimizer,clip", [("adamw", 1.0), ("sgd", None), ("sgd", 0.05)])
def test_mirrored_two_replicas_match_one_device(tmp_path, two_replicas, optimizer, clip):
    m = _mirrored_against_one_device(two_replicas, str(tmp_path), optimizer, clip)
    print(f"mirrored vs default, {optimizer}-clip{clip}: {m}")
    assert m["start_diff"] == 0.0
    assert m["max_update"] > 1e-3, m  # the weights did move
    assert m["max_weight_diff"] < 1e-5, m
    assert len(m["losses_default"]) == STEPS
    # The progress lines print 4 significant digits.
    np.testing.assert_allclose(m["losses_mirrored"], m["losses_default"], rtol=2e-3)
    if clip == 0.05:
        assert m["first_gradient_norm"] > 0.05 * 2  # clipping did act


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.mark.slow
@pytest.mark.serial  # two worker processes
def test_multi_worker_mirrored_two_local_workers(tmp_path):
    """Two worker processes on this host train together through run_pretraining.py and
    end with identical weights. They share --output_dir, as on a gs:// bucket: the chief
    (worker 0) writes there, worker 1 into its scratch folder tmp_worker_1/ inside it.
    BERT only: what two processes add (the cluster, the chief's output_dir, the sharded
    input) is the runner's, the same for every family; ETC's inputs under a strategy are
    test_training_xla's MirroredStrategy case."""
    import tensorflow as tf

    max_seq, max_pred, steps = 16, 4, 3
    records = h.write_pretraining_records(tmp_path / "records.tfrecord", 40, max_seq, max_pred)
    config = h.write_config(tmp_path / "bert_config.json")
    checkpoint = "bert_model.ckpt"
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs, logs = [], []
    out = str(tmp_path / "shared_output")
    for index in range(2):
        args = h.flags(
            input_file=records, output_dir=out, do_train=True, do_eval=True,
            bert_config_file=config, train_batch_size=8, eval_batch_size=8, max_seq_length=max_seq,
            max_predictions_per_seq=max_pred, num_train_steps=steps, num_warmup_steps=1,
            learning_rate=1e-3, save_checkpoints_steps=steps, iterations_per_loop=1,
            max_eval_steps=2, distribution_strategy="multi_worker_mirrored", model_type="bert",
        )
        env = h.script_env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        log = open(tmp_path / f"worker{index}.log", "w+")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, os.path.join(h.ROOT, "run_pretraining.py"), *args],
                                      cwd=h.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    try:
        for p in procs:
            p.wait(timeout=400)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read())
        log.close()
    for index, (p, text) in enumerate(zip(procs, texts)):
        assert p.returncode == 0, f"worker {index} exit {p.returncode}:\n{text}"
        # MultiWorkerMirroredStrategy is a CollectiveAllReduceStrategy underneath.
        assert "CollectiveAllReduceStrategy with 2 replica(s)" in text, text

    dirs = [tmp_path / "shared_output", tmp_path / "shared_output" / "tmp_worker_1"]
    readers = [tf.train.load_checkpoint(str(d / checkpoint)) for d in dirs]
    names = sorted(readers[0].get_variable_to_shape_map())
    assert names == sorted(readers[1].get_variable_to_shape_map())
    diff = max(float(np.max(np.abs(readers[0].get_tensor(n) - readers[1].get_tensor(n)))) for n in names)
    print(f"multi-worker max weight difference between the workers: {diff}")
    assert diff <= 1e-6
    for latest in (tf.train.latest_checkpoint(str(dirs[0])),
                   tf.train.latest_checkpoint(str(dirs[1] / "checkpoints"))):
        reader = tf.train.load_checkpoint(latest)
        step_key = next(k for k in reader.get_variable_to_shape_map() if "global_step" in k)
        assert int(reader.get_tensor(step_key)) == steps
    # Both evaluated the same (all-reduced) metrics.
    results = [open(d / "eval_results.txt").read() for d in dirs]
    assert results[0] == results[1]


@pytest.mark.slow
def test_mirrored_resumed_run_matches_an_uninterrupted_one(tmp_path, two_replicas):
    """A run stopped at step 4 and resumed to 8 under MirroredStrategy (two logical
    CPUs) ends where an uninterrupted one does: the seeded data order is replayed per
    replica batch."""
    from realformer_tf.data import pretraining as data

    records = h.write_pretraining_records(tmp_path / "train.tfrecord", 40, 16, 4)
    dataset_fn = data.make_dataset_fn([str(records)], 16, 4, 8, is_training=True, seed=5)
    config = h.tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

    def train(model_dir, steps):
        with run_settings(1, "none"):
            trainer = Trainer(PretrainingTask(config), two_replicas, str(model_dir), steps_per_loop=2,
                              save_checkpoints_steps=2, global_batch_size=8,
                              optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-3, 8, 0))
            trainer.restore_or_initialize()
        trainer.train(dataset_fn, steps, log_fn=lambda _: None)
        return [w.numpy() for w in trainer.model.weights]

    uninterrupted = train(tmp_path / "full", 8)
    train(tmp_path / "parts", 4)
    resumed = train(tmp_path / "parts", 8)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(uninterrupted, resumed))
    print(f"mirrored, resumed vs uninterrupted: max weight difference {diff}")
    assert diff <= 1e-6
