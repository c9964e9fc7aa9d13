"""Numerical safety, determinism and start-up refusals of the shared training loop."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from realformer_tf import cli, distribution, modeling, optimization
from realformer_tf.tasks.pretraining import PretrainingTask
from realformer_tf.training import NonFiniteLossError, Trainer

SEQ, PRED = 16, 4


def _fixed_batches_fn(seed=0, poison=False):
    batch = h.fixed_pretraining_batch(8, SEQ, PRED, seed=seed)
    if poison:  # a NaN in the data makes the loss NaN
        batch["masked_lm_weights"] = np.full_like(batch["masked_lm_weights"], np.nan)

    def dataset_fn(input_context=None):
        return tf.data.Dataset.from_tensors(batch).repeat()

    return dataset_fn


def _trainer(tmp_path, learning_rate, **config):
    task = PretrainingTask(h.tiny_config(**config))
    return Trainer(
        task, tf.distribute.get_strategy(), str(tmp_path),
        optimizer_fn=lambda: optimization.create_optimizer("adamw", learning_rate, 100, 0),
        steps_per_loop=2, save_checkpoints_steps=2, global_batch_size=8,
    )


def test_nan_loss_stops_with_step_and_last_good_checkpoint(tmp_path):
    trainer = _trainer(tmp_path, 1e-3)
    trainer.restore_or_initialize()
    trainer.train(_fixed_batches_fn(), 2)  # a good checkpoint at step 2
    with pytest.raises(NonFiniteLossError, match=r"global step 4.*Last good checkpoint: .*ckpt-2"):
        trainer.train(_fixed_batches_fn(poison=True), 6)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")  # the NaN state was not saved


def test_same_seed_same_loss_curve(tmp_path):
    curves = []
    for run in range(2):
        keras.utils.set_random_seed(7)
        trainer = _trainer(tmp_path / f"run{run}", 1e-3)
        trainer.restore_or_initialize()
        losses = []
        trainer.train(_fixed_batches_fn(), 6, log_fn=losses.append)
        curves.append([line.split("| loss ")[1].split(" ")[0] for line in losses])
    assert len(curves[0]) == 3 and curves[0] == curves[1]


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_48_layer_running_sums_stay_finite_in_half_precision(policy):
    keras.mixed_precision.set_global_policy(policy)
    try:
        config = h.tiny_config(num_hidden_layers=48, hidden_size=8, num_attention_heads=2,
                               intermediate_size=8, residual_attention=True)
        model = modeling.BertModel(config)
        batch = h.fixed_pretraining_batch(2, SEQ, PRED)
        batch["input_mask"][1, :] = 0  # a fully padded row too
        with tf.GradientTape() as tape:
            out = model({k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=True)
            loss = tf.reduce_mean(tf.cast(out["sequence_output"], tf.float32) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        last = out["attention_scores"][-1]
        assert last.dtype == tf.as_dtype(policy.split("_")[1])
        assert np.isfinite(last.numpy().astype(np.float32)).all()
        assert np.isfinite(out["sequence_output"].numpy().astype(np.float32)).all()
        assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in grads if g is not None)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_batch_not_divisible_by_replicas_is_refused():
    fake = types.SimpleNamespace(num_replicas_in_sync=8)
    with pytest.raises(cli.UsageError, match=r"--train_batch_size=12 is not divisible by the 8 replicas"):
        cli.per_replica(fake, 12, "train_batch_size")
    assert distribution.per_replica_batch_size(16, fake, "train_batch_size") == 2


def test_output_dir_of_another_model_is_refused(tmp_path):
    config = h.tiny_config()
    cli.claim_output_dir(str(tmp_path), config, {"task": "pretraining"})
    cli.claim_output_dir(str(tmp_path), config, {"task": "pretraining"})  # the same run: fine
    other = h.tiny_config(num_hidden_layers=3, layer_norm_type="normformer")
    with pytest.raises(cli.UsageError, match=r"holds checkpoints of another model .*layer_norm_type, num_hidden_layers"):
        cli.claim_output_dir(str(tmp_path), other, {"task": "pretraining"})
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n')
    (foreign / "model.ckpt-5.index").write_bytes(b"")
    with pytest.raises(cli.UsageError, match="not written by this tool"):
        cli.claim_output_dir(str(foreign), config, {"task": "pretraining"})
