"""Training through `Trainer` with `jit_compile=True`: the per-replica forward+backward and
the eval step compiled with XLA, for every encoder variant and ETC, in float32 and mixed
precision, under the default strategy and MirroredStrategy (the two logical CPUs of
tests/conftest.py)."""

import numpy as np
import pytest

import helpers_data as h
from realformer_tf.models import variants
from realformer_tf.errors import UsageError

# The variant table's names (NormFormer's optional residual scale: the smoke check's cases).
VARIANTS = [name for name in variants.VARIANTS if name != "normformer_residual_scale"]
GLOBAL, SEQ, PRED = 6, 12, 3


def make_task(variant, dropout=0.1):
    """A tiny pretraining task of `variant` (a variant name or "etc")."""
    if variant == "etc":
        from realformer_tf import etc_modeling
        from realformer_tf.families import get_family
        from realformer_tf.jobs.tasks.pretraining import PretrainingTask

        config = etc_modeling.EtcConfig(
            vocab_size=h.vocab_size(), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=24, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
            local_radius=3, relative_pos_max_distance=2, relative_vocab_size=8)
        return PretrainingTask(config, family=get_family("etc")), config
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask

    config = h.tiny_config(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, intermediate_size=24,
                           **variants.get_variant(variant).settings)
    return PretrainingTask(config), config


def dataset_fn_for(variant, config):
    import tensorflow as tf

    batches = [h.fixed_pretraining_batch(GLOBAL, SEQ, PRED, seed=40 + s) for s in range(3)]
    examples = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}

    def dataset_fn(input_context=None, start_step=0):
        per = input_context.get_per_replica_batch_size(GLOBAL) if input_context else GLOBAL
        return tf.data.Dataset.from_tensor_slices(examples).repeat().batch(per, drop_remainder=True)

    if variant == "etc":
        from realformer_tf.families import get_family
        from realformer_tf.jobs.runner import RunOptions

        return get_family("etc").adapt_dataset_fn(dataset_fn, config, RunOptions(etc_tokens_per_global=4))
    return dataset_fn


def train(strategy, variant, jit_compile, model_dir, steps=2, dropout=0.1, float16=False, initial=None,
          evaluate=True):
    """Trains `steps` steps; returns (trainer, train metrics, eval metrics or None, start
    weights)."""
    import keras

    from realformer_tf import optimization
    from realformer_tf.training.trainer import Trainer

    keras.utils.set_random_seed(3)
    task, config = make_task(variant, dropout)
    trainer = Trainer(task, strategy, model_dir, steps_per_loop=steps, save_checkpoints_steps=1000,
                      optimizer_fn=lambda: optimization.create_optimizer(
                          "adamw", 1e-3, steps, 1, float16_loss_scaling=float16),
                      global_batch_size=GLOBAL, jit_compile=jit_compile)
    trainer.restore_or_initialize()
    if initial is not None:
        trainer.model.set_weights(initial)
    start = [w.copy() for w in trainer.model.get_weights()]
    dataset_fn = dataset_fn_for(variant, config)
    metrics = trainer.train(dataset_fn, steps, log_fn=lambda _: None)
    evaluation = trainer.evaluate(dataset_fn, 1) if evaluate else None
    return trainer, metrics, evaluation, start


def check_trained(trainer, metrics, evaluation, start, steps=2):
    assert trainer.jit_compile is True
    assert trainer.jit_compile_update is (trainer.strategy.num_replicas_in_sync == 1)
    assert int(trainer.global_step.numpy()) == steps
    assert np.isfinite(metrics["loss"]) and metrics["loss"] > 0, metrics
    assert evaluation is None or (np.isfinite(evaluation["loss"]) and evaluation["loss"] > 0), evaluation
    end = trainer.model.get_weights()
    assert all(np.isfinite(w.astype(np.float32)).all() for w in end)
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(start, end)) > 1e-4  # it trained


@pytest.mark.parametrize("variant", [*VARIANTS, "etc"])
def test_every_variant_trains_compiled(tmp_path, variant):
    import tensorflow as tf

    check_trained(*train(tf.distribute.get_strategy(), variant, True, str(tmp_path)))


@pytest.mark.slow
@pytest.mark.parametrize("variant,precision", [("realformer_normformer", "bfloat16"), ("bert", "float16"),
                                               ("etc", "bfloat16")])
def test_mixed_precision_trains_compiled(tmp_path, variant, precision):
    import tensorflow as tf

    from realformer_tf.training import distribution

    float16 = distribution.set_mixed_precision(precision)  # float16: dynamic loss scaling
    try:
        trainer, metrics, evaluation, start = train(tf.distribute.get_strategy(), variant, True, str(tmp_path),
                                                    float16=float16)
        assert trainer.model.dtype_policy.compute_dtype == precision
        assert (getattr(trainer.optimizer, "dynamic_scale", None) is not None) == (precision == "float16")
        check_trained(trainer, metrics, evaluation, start)
    finally:
        distribution.set_mixed_precision("none")


def test_compiled_step_matches_the_uncompiled_one(tmp_path):
    """RealFormer + NormFormer, no dropout: three AdamW steps with and without XLA end at
    the same weights, metrics and evaluation (float32 round-off apart)."""
    import tensorflow as tf

    strategy = tf.distribute.get_strategy()
    plain, plain_metrics, plain_eval, start = train(strategy, "realformer_normformer", False, str(tmp_path / "a"),
                                                    steps=3, dropout=0.0)
    assert (plain.jit_compile, plain.jit_compile_update) == (False, False)
    xla, xla_metrics, xla_eval, xla_start = train(strategy, "realformer_normformer", True, str(tmp_path / "b"),
                                                  steps=3, dropout=0.0, initial=start)
    assert all(np.array_equal(a, b) for a, b in zip(start, xla_start))
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(start, plain.model.get_weights()))
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(plain.model.get_weights(), xla.model.get_weights()))
    print(f"XLA vs no XLA after 3 steps: max weight difference {diff:.2e} (largest update {moved:.2e})")
    assert moved > 5e-4 and diff < 2e-5  # the steps moved the weights 25x more than XLA differs
    for key in ("loss", "masked_lm_loss", "next_sentence_loss", "masked_lm_accuracy"):
        assert xla_metrics[key] == pytest.approx(plain_metrics[key], rel=1e-5, abs=1e-6), key
        assert xla_eval[key] == pytest.approx(plain_eval[key], rel=1e-5, abs=1e-6), key


def test_jit_compile_values():
    import tensorflow as tf

    from realformer_tf.training.distribution import resolve_jit_compile

    class TwoReplicas:
        num_replicas_in_sync = 2

    default = tf.distribute.get_strategy()
    assert resolve_jit_compile("true", default) == (True, True)
    assert resolve_jit_compile(True, TwoReplicas()) == (True, False)  # a merged update stays uncompiled
    assert resolve_jit_compile("FALSE", default) == (False, False)
    # No GPU or TPU here: auto compiles nothing (slower on CPU).
    assert not tf.config.list_logical_devices("GPU")
    assert resolve_jit_compile("auto", default) == (False, False)
    assert resolve_jit_compile("auto", TwoReplicas()) == (False, False)
    with pytest.raises(UsageError, match="jit_compile='yes' is not one of auto, true, false"):
        resolve_jit_compile("yes")


@pytest.mark.slow
# What MirroredStrategy adds (per-replica compiled steps, the merged update) does not
# depend on the variant, which test_every_variant_trains_compiled covers: the variant
# with every option (RealFormer + NormFormer) and ETC (its own inputs) train and
# evaluate, and BERT trains in bfloat16.
@pytest.mark.parametrize("variant,precision,evaluate", [("realformer_normformer", "none", True),
                                                        ("etc", "none", True), ("bert", "bfloat16", False)])
def test_compiled_training_under_mirrored_strategy(tmp_path, two_replicas, variant, precision, evaluate):
    from realformer_tf.training.distribution import run_settings

    with run_settings(None, precision):  # the dtype policy for this run only
        trainer, metrics, evaluation, start = train(two_replicas, variant, True, str(tmp_path), evaluate=evaluate)
    check_trained(trainer, metrics, evaluation, start)
    print(f"mirrored, compiled, {variant}-{precision}: train loss {metrics['loss']}")
