"""The fused CPU dropout (realformer_tf/kernels/fused_dropout.cc, layers/dropout.py).

The op's mask is checked bit for bit against SplitMix64 written in NumPy, its gradient
against the mask applied to dy, its statistics (keep rate, independence of neighbours
and of consecutive seeds) against the binomial; the layer is Keras' Dropout wherever
the op does not apply, and the training loop trains with it."""

import re

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from realformer_tf import kernels
from realformer_tf.layers.dropout import Dropout

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def fused_ops():
    library = kernels.load()
    assert library is not None, "the fused kernels did not build on this machine"
    return library


def mix64(z):
    z = np.asarray(z, np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def keep_mask_np(shape, seed, rate):
    """SplitMix64 started at the seed's key, one draw per element, top 32 bits vs rate."""
    with np.errstate(over="ignore"):
        words = np.array(seed, np.int64).view(np.uint64)  # the op reads the int64 seed's bits
        key = mix64(mix64(words[0] + GOLDEN) + words[1])
        counters = np.arange(1, int(np.prod(shape)) + 1, dtype=np.uint64) * GOLDEN
        bits = mix64(key + counters) >> np.uint64(32)
    return (bits >= np.uint64(round(rate * 2**32))).reshape(shape)


def dropout_op(x, seed, rate):
    return fused_ops().realformer_dropout(tf.constant(x, tf.float32), tf.constant(seed, tf.int64), rate=rate)


@pytest.mark.parametrize("shape,seed,rate", [((3, 7, 37), (5, 11), 0.3), ((2, 300), (0, 0), 0.1),
                                             ((5, 1), (2**40, -3), 0.5), ((0, 6), (1, 2), 0.1)])
def test_mask_is_splitmix64_and_kept_values_are_tensorflows(shape, seed, rate):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    keep = keep_mask_np(shape, seed, rate)
    scale = np.float32(1.0 / (1.0 - rate))  # TensorFlow's dropout rounds the scale to float once
    np.testing.assert_array_equal(dropout_op(x, seed, rate).numpy(), np.where(keep, x * scale, 0.0))


def test_gradient_is_the_same_mask_applied_to_dy():
    x = tf.constant(np.random.default_rng(1).normal(size=(4, 9, 13)), tf.float32)
    dy = np.random.default_rng(2).normal(size=(4, 9, 13)).astype(np.float32)
    seed = tf.constant([7, 8], tf.int64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(fused_ops().realformer_dropout(x, seed, rate=0.2) * dy)
    expected = np.where(keep_mask_np(x.shape, (7, 8), 0.2), dy * np.float32(1 / 0.8), 0.0)
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), expected)


def test_keep_rate_and_independence_are_binomial():
    """1M draws: the drop rate, neighbours dropped together and masks of consecutive seeds
    (the Keras seed generator's next seeds) agree with independent Bernoulli(rate) draws
    within 5 standard deviations."""
    n, rate = 1_000_003, 0.1
    ones = np.ones(n, np.float32)
    dropped = dropout_op(ones, (3, 0), rate).numpy() == 0
    dropped_next_seed = dropout_op(ones, (3, 1), rate).numpy() == 0

    def assert_binomial(hits, trials, p):
        assert abs(hits - trials * p) < 5 * np.sqrt(trials * p * (1 - p)), (hits, trials, p)

    assert_binomial(dropped.sum(), n, rate)
    assert_binomial((dropped[1:] & dropped[:-1]).sum(), n - 1, rate**2)
    assert_binomial((dropped & dropped_next_seed).sum(), n, rate**2)


def test_zero_rate_drops_nothing_and_nan_is_dropped_to_zero():
    x = np.array([1.0, np.nan, np.inf, -2.0] * 50, np.float32)
    np.testing.assert_array_equal(dropout_op(x, (1, 1), 0.0).numpy(), x)
    y = dropout_op(x, (1, 1), 0.5).numpy()
    keep = keep_mask_np(x.shape, (1, 1), 0.5)
    assert not np.isnan(y[~keep]).any() and (y[~keep] == 0).all()


def test_bad_seed_and_rate_are_named():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"seed must have shape \[2\], got \[3\]"):
        fused_ops().realformer_dropout(tf.ones(4), tf.constant([1, 2, 3], tf.int64), rate=0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"rate must be in \[0, 1\), got 1"):
        fused_ops().realformer_dropout(tf.ones(4), tf.constant([1, 2], tf.int64), rate=1.0)


# -- the layer ---------------------------------------------------------------------------

def op_types(fn, *args):
    graph = fn.get_concrete_function(*args).graph
    return {op.type for op in graph.get_operations()}


def test_layer_uses_the_op_only_where_it_applies():
    x = tf.ones((3, 5, 24))

    def train(layer, training=True, jit_compile=False):
        return tf.function(lambda x: layer(x, training=training), jit_compile=jit_compile)

    assert "RealformerDropout" not in op_types(train(Dropout(0.1, fused_kernels=False)), x)  # option off
    assert "RealformerDropout" in op_types(train(Dropout(0.1)), x)  # the default: on
    assert "RealformerDropout" not in op_types(train(Dropout(0.1), training=False), x)
    assert "RealformerDropout" not in op_types(train(Dropout(0.1, noise_shape=(3, 1, 24))), x)
    assert "RealformerDropout" not in op_types(train(Dropout(0.0)), x)
    assert "RealformerDropout" not in op_types(train(Dropout(1.0)), x)
    assert "RealformerDropout" not in op_types(train(Dropout(0.1, dtype="float64")), x)
    assert "RealformerDropout" not in op_types(train(Dropout(0.1, dtype="mixed_bfloat16")), x)
    assert "RealformerDropout" not in op_types(train(Dropout(0.1), jit_compile=True), x)
    assert Dropout.from_config(Dropout(0.1, fused_kernels=False).get_config()).fused_kernels is False


def test_layer_draws_a_fresh_mask_per_call_and_is_keras_dropout_otherwise():
    layer = Dropout(0.25, seed=4)
    x = tf.ones((6, 50))
    step = tf.function(lambda x: layer(x, training=True))
    first, second = step(x).numpy(), step(x).numpy()
    for y in (first, second):
        assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
    assert (first != second).any()
    np.testing.assert_array_equal(layer(x, training=False), x)
    restored = Dropout.from_config(layer.get_config())
    assert (restored.rate, restored.seed, restored.noise_shape) == (0.25, 4, None)
    import keras

    assert isinstance(keras.layers.deserialize(keras.layers.serialize(layer)), Dropout)


def test_models_train_with_it_on_every_path(tmp_path, monkeypatch):
    """A classifier with dropout 0.1 trains through the Trainer with the op in its step
    (default strategy) and, without it, under XLA: the loss is finite and falls."""
    from realformer_tf import optimization
    from realformer_tf.jobs.tasks.classifier import ClassifierTask
    from realformer_tf.training.trainer import Trainer

    batch = h.fixed_pretraining_batch(8, 12, 2, seed=3)
    examples = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    examples["label_ids"] = np.arange(8, dtype=np.int32) % 2
    examples["is_real_example"] = np.ones(8, np.int32)
    used = []
    fused_ops_of = Dropout._fused_ops
    monkeypatch.setattr(Dropout, "_fused_ops", lambda *a: used.append(fused_ops_of(*a)) or used[-1])
    for jit in (False, True):
        logs, used[:] = [], []
        trainer = Trainer(ClassifierTask(h.tiny_config(), num_labels=2, is_regression=False),
                          tf.distribute.get_strategy(), str(tmp_path / str(jit)),
                          optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-2, 30, 1),
                          steps_per_loop=10, save_checkpoints_steps=1000, global_batch_size=8, jit_compile=jit)
        trainer.restore_or_initialize()
        trainer.train(lambda input_context=None, start_step=0: tf.data.Dataset.from_tensor_slices(examples)
                      .batch(8).repeat(), 30, log_fn=logs.append)
        losses = [float(re.search(r"\| loss ([-0-9.e+naif]+)", line).group(1)) for line in logs]
        assert len(losses) == 3 and np.isfinite(losses).all() and losses[-1] < losses[0], losses
        assert any(u is not None for u in used) != jit
