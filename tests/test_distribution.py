"""Data parallelism computes what one device computes.

Each case runs in its own Python process: logical devices and TF_CONFIG must be set
before TensorFlow initializes, and the pytest process has already imported it.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import helpers_data as h

TESTS = os.path.dirname(os.path.abspath(__file__))

# Same examples per step, same initial weights, no dropout: MirroredStrategy over two
# logical CPUs vs the default strategy. Prints one JSON line of measurements.
MIRRORED_SCRIPT = r"""
import json, sys
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras
sys.path.insert(0, TESTS)
import helpers_data as h
from realformer_tf import optimization
from realformer_tf.jobs.tasks.pretraining import PretrainingTask
from realformer_tf.training.trainer import Trainer

GLOBAL, STEPS, SEQ, PRED = 8, 5, 16, 4
config = h.tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
batches = [h.fixed_pretraining_batch(GLOBAL, SEQ, PRED, seed=100 + s) for s in range(STEPS)]
examples = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def dataset_fn(input_context=None, start_step=0):
    # One input pipeline on one host: the replicas take consecutive per-replica batches
    # of it, so replica r of step s sees examples [s*GLOBAL + r*per, ... + per), the
    # same examples the single device sees in its step s.
    per = input_context.get_per_replica_batch_size(GLOBAL) if input_context else GLOBAL
    assert input_context is None or input_context.num_input_pipelines == 1
    return tf.data.Dataset.from_tensor_slices(examples).batch(per, drop_remainder=True).repeat()


def make_optimizer(name):
    if name == "sgd":  # updates proportional to the gradient: no scale invariance to hide a bug
        return keras.optimizers.SGD(learning_rate=0.5)
    return optimization.create_optimizer("adamw", 1e-3, STEPS, 0)


def run(strategy, model_dir, optimizer, clip, initial=None):
    keras.utils.set_random_seed(1)
    trainer = Trainer(
        PretrainingTask(config), strategy, model_dir, optimizer_fn=lambda: make_optimizer(optimizer),
        steps_per_loop=1, save_checkpoints_steps=1000, clip_norm=clip, global_batch_size=GLOBAL,
    )
    trainer.restore_or_initialize()
    if initial is not None:
        trainer.model.set_weights(initial)
    start = [w.copy() for w in trainer.model.get_weights()]
    losses = []
    trainer.train(dataset_fn, STEPS, log_fn=lambda line: losses.append(float(line.rsplit("| loss ", 1)[1].split()[0])))
    return trainer, start, trainer.model.get_weights(), losses


def first_gradient_norm(trainer):
    features = {k: tf.constant(v[:GLOBAL]) for k, v in examples.items()}
    with tf.GradientTape() as tape:
        sums = trainer.task.metric_sums(features, trainer.model(features, training=True))
        loss = sum(sums[t][0] / sums[t][1] for t in trainer.task.loss_terms)
    return float(tf.linalg.global_norm(tape.gradient(loss, trainer.model.trainable_variables)))


mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert mirrored.num_replicas_in_sync == 2

# Check the assumption above on the first step's two per-replica batches.
first = next(iter(mirrored.distribute_datasets_from_function(dataset_fn)))
parts = [p.numpy() for p in mirrored.experimental_local_results(first["input_ids"])]
np.testing.assert_array_equal(np.concatenate(parts), examples["input_ids"][:GLOBAL])

report = {}
for optimizer, clip in CASES:
    name = f"{optimizer}-clip{clip}"
    one, one_start, one_end, one_losses = run(tf.distribute.get_strategy(), f"{OUT}/{name}/default", optimizer, clip)
    _, two_start, two_end, two_losses = run(mirrored, f"{OUT}/{name}/mirrored", optimizer, clip, initial=one_start)
    one.model.set_weights(one_start)
    report[name] = dict(
        start_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(one_start, two_start)),
        max_weight_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(one_end, two_end)),
        max_update=max(float(np.max(np.abs(a - b))) for a, b in zip(one_start, one_end)),
        first_gradient_norm=first_gradient_norm(one),
        losses_default=one_losses, losses_mirrored=two_losses)
print(json.dumps(report))
"""


def _run_python(code, timeout=600, env=None):
    proc = subprocess.run([sys.executable, "-c", code], cwd=h.ROOT, env=env or h.script_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_mirrored_two_replicas_match_one_device(tmp_path):
    # AdamW (the real optimizer) and plain SGD, which unlike Adam is not invariant to
    # the gradient's scale, so a missing or doubled cross-replica sum would show; with
    # clip_norm 0.05 the clipping of the global (all-reduced) gradient is active.
    cases = [("adamw", 1.0), ("sgd", None), ("sgd", 0.05)]
    code = f"TESTS = {TESTS!r}\nOUT = {str(tmp_path)!r}\nCASES = {cases!r}\n" + MIRRORED_SCRIPT
    report = _run_python(code)
    for name, m in report.items():
        print(f"mirrored vs default, {name}: {m}")
    for name, m in report.items():
        assert m["start_diff"] == 0.0, name
        assert m["max_update"] > 1e-3, (name, m)  # the weights did move
        assert m["max_weight_diff"] < 1e-5, (name, m)
        assert len(m["losses_default"]) == 5
        # The progress lines print 4 significant digits.
        np.testing.assert_allclose(m["losses_mirrored"], m["losses_default"], rtol=2e-3, err_msg=name)
    assert report["sgd-clip0.05"]["first_gradient_norm"] > 0.05 * 2  # clipping did act


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
@pytest.mark.parametrize("model_type", ["bert", "etc"])
@pytest.mark.serial  # two worker processes
def test_multi_worker_mirrored_two_local_workers(tmp_path, model_type):
    """Two worker processes on this host train together through run_pretraining.py and
    end with identical weights. They share --output_dir, as on a gs:// bucket: the chief
    (worker 0) writes there, worker 1 into its scratch folder tmp_worker_1/ inside it."""
    import tensorflow as tf

    max_seq, max_pred, steps = 16, 4, 3
    records = h.write_pretraining_records(tmp_path / "records.tfrecord", 40, max_seq, max_pred)
    if model_type == "etc":
        config = str(tmp_path / "etc_config.json")
        with open(config, "w") as f:
            json.dump(h.tiny_etc_config_dict(), f)
    else:
        config = h.write_config(tmp_path / "bert_config.json")
    checkpoint = {"bert": "bert_model.ckpt", "etc": "etc_model.ckpt"}[model_type]
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
            max_eval_steps=2, distribution_strategy="multi_worker_mirrored", model_type=model_type,
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


# A run stopped at step 4 and resumed to 8 under MirroredStrategy (two logical CPUs)
# ends where an uninterrupted one does: the seeded data order is replayed per replica
# batch. Prints one JSON line.
MIRRORED_RESUME_SCRIPT = r"""
import json, sys
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras
sys.path.insert(0, TESTS)
import helpers_data as h
from realformer_tf import optimization
from realformer_tf.data import pretraining as data
from realformer_tf.jobs.tasks.pretraining import PretrainingTask
from realformer_tf.training.trainer import Trainer

records = h.write_pretraining_records(OUT + "/train.tfrecord", 40, 16, 4)
dataset_fn = data.make_dataset_fn([records], 16, 4, 8, is_training=True, seed=5)
config = h.tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def train(model_dir, steps):
    keras.utils.set_random_seed(1)
    trainer = Trainer(PretrainingTask(config), mirrored, model_dir, steps_per_loop=2, save_checkpoints_steps=2,
                      optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-3, 8, 0), global_batch_size=8)
    trainer.restore_or_initialize()
    trainer.train(dataset_fn, steps, log_fn=lambda _: None)
    return [w.numpy() for w in trainer.model.weights]


uninterrupted = train(OUT + "/full", 8)
train(OUT + "/parts", 4)
resumed = train(OUT + "/parts", 8)
print(json.dumps({"max_weight_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(uninterrupted, resumed))}))
"""


@pytest.mark.slow
def test_mirrored_resumed_run_matches_an_uninterrupted_one(tmp_path):
    report = _run_python(f"TESTS = {TESTS!r}\nOUT = {str(tmp_path)!r}\n" + MIRRORED_RESUME_SCRIPT)
    print(f"mirrored, resumed vs uninterrupted: {report}")
    assert report["max_weight_diff"] <= 1e-6
