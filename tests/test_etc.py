"""ETC model, config, input features, checkpoints and the pretraining task.

The layers themselves (GlobalLocalAttention / Block / Encoder against a dense NumPy
reference) are tested in test_etc_layers.py.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from realformer_tf import etc_modeling
from realformer_tf.checkpoints import etc_official
from realformer_tf.errors import ConfigError
from realformer_tf.models.etc import inputs as etc_inputs


# ==================================================================== input utilities
def test_relative_ids_and_masks_match_hand_built_tables():
    r, M = 2, 1
    long_mask = np.array([[1, 1, 1, 1, 1, 0]])
    sentence_ids = np.array([[0, 0, 1, 1, 2, 2]])
    global_mask = np.array([[1, 1, 1]])
    side = {k: v.numpy() for k, v in etc_inputs.make_side_inputs(
        long_mask, global_mask, sentence_ids, r, M, include_l2l_relative_ids=True).items()}
    assert "l2l_relative_att_ids" not in etc_inputs.make_side_inputs(long_mask, global_mask, sentence_ids, r, M)
    # Window offsets -2..2 clipped to [-1, 1], + 1.
    np.testing.assert_array_equal(side["l2l_relative_att_ids"][0], [[0, 0, 1, 2, 2]] * 6)
    np.testing.assert_array_equal(side["g2g_relative_att_ids"][0], [[1, 2, 2], [0, 1, 2], [0, 0, 1]])
    # 2M+1 = 3: other sentence; 2M+2 = 4: same sentence; the padding token: no sentence.
    l2g_ids = [[4, 3, 3], [4, 3, 3], [3, 4, 3], [3, 4, 3], [3, 3, 4], [3, 3, 3]]
    np.testing.assert_array_equal(side["l2g_relative_att_ids"][0], l2g_ids)
    np.testing.assert_array_equal(side["g2l_relative_att_ids"][0], np.transpose(l2g_ids))
    # Local mask in ETC's layout: entry m of token i is token i - 2 + m.
    np.testing.assert_array_equal(side["l2l_att_mask"][0], [
        [0, 0, 1, 1, 1],
        [0, 1, 1, 1, 1],
        [1, 1, 1, 1, 1],
        [1, 1, 1, 1, 0],   # token 5 is padding
        [1, 1, 1, 0, 0],   # beyond the end
        [0, 0, 1, 0, 0],   # padding sees padding (never a fully masked row)
    ])
    np.testing.assert_array_equal(side["l2g_att_mask"][0], [[1, 1, 1]] * 5 + [[0, 0, 0]])
    np.testing.assert_array_equal(side["g2g_att_mask"][0], np.ones((3, 3)))

    hard = {k: v.numpy() for k, v in etc_inputs.make_side_inputs(
        long_mask, global_mask, sentence_ids, r, M, use_hard_g2l_mask=True, use_hard_l2g_mask=True).items()}
    same = [[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]
    np.testing.assert_array_equal(hard["l2g_att_mask"][0], same)
    np.testing.assert_array_equal(hard["g2l_att_mask"][0], np.transpose(same))

    np.testing.assert_array_equal(etc_inputs.relative_ids_table(4, 2), [
        [2, 3, 4, 4], [1, 2, 3, 4], [0, 1, 2, 3], [0, 0, 1, 2]])
    assert "l2l_relative_att_ids" not in etc_inputs.make_side_inputs(long_mask, global_mask, sentence_ids, r, 0)


def test_global_tokens_from_breakpoints_and_sentence_ids():
    ids = np.array([[5, 6, 7, 8, 9, 10, 0, 0], [5, 6, 7, 0, 0, 0, 0, 0]])
    breakpoints = np.array([[0, 1, 0, 0, 1, 1, 0, 0], [0, 0, 1, 0, 0, 0, 0, 0]])
    f = etc_inputs.make_etc_features(ids, global_seq_len=4, local_radius=2, relative_pos_max_distance=1,
                                     breakpoints=breakpoints)
    np.testing.assert_array_equal(f["sentence_ids"].numpy()[0, :6], [0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(f["global_token_ids"].numpy(), [[1, 1, 1, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(f["global_input_mask"].numpy(), [[1, 1, 1, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(f["long_input_mask"].numpy()[1], [1, 1, 1, 0, 0, 0, 0, 0])
    g = etc_inputs.make_etc_features(ids, 4, 2, 1, sentence_ids=f["sentence_ids"])
    for k in f:
        np.testing.assert_array_equal(f[k].numpy(), g[k].numpy())
    with pytest.raises(ValueError, match="exactly one"):
        etc_inputs.make_etc_features(ids, 4, 2, 1)
    # Usable inside tf.data.
    ds = tf.data.Dataset.from_tensor_slices({"ids": ids, "bp": breakpoints}).batch(2).map(
        lambda d: etc_inputs.make_etc_features(d["ids"], 4, 2, 1, breakpoints=d["bp"]))
    batch = next(iter(ds))
    np.testing.assert_array_equal(batch["l2l_att_mask"].numpy(), f["l2l_att_mask"].numpy())


# =========================================================================== the model
def tiny_config(**overrides):
    values = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  local_radius=3, relative_pos_max_distance=2, relative_vocab_size=8)
    values.update(overrides)
    return etc_modeling.EtcConfig(**values)


def tiny_features(config, seed=0, L=21, G=4):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, config.vocab_size, size=(2, L)).astype(np.int32)
    ids[1, L - 5:] = 0
    sentence_ids = np.minimum(np.arange(L) // 6, G - 1)[None].repeat(2, 0)
    return etc_inputs.features_for_config(config, ids, G, sentence_ids=sentence_ids)


@pytest.mark.parametrize("layer_norm_type", ["post", "pre", "normformer"])
def test_etc_model_runs_for_every_layer_norm_type(layer_norm_type):
    config = tiny_config(layer_norm_type=layer_norm_type, max_absolute_position_embeddings=32,
                         use_hard_g2l_mask=True)
    model = etc_modeling.EtcModel(config)
    features = tiny_features(config)
    out = model(features)
    assert tuple(out["long_output"].shape) == (2, 21, 16)
    assert tuple(out["global_output"].shape) == (2, 4, 16)
    assert len(out["long_scores"]) == len(out["global_scores"]) == 2
    assert tuple(out["long_scores"][0].shape) == (2, 2, 6, 4, 12 + 4)  # 21 -> 6 blocks of 4
    assert tuple(out["global_scores"][0].shape) == (2, 2, 4, 4 + 21)
    for t in [out["long_output"], out["global_output"]] + out["long_scores"] + out["global_scores"]:
        assert np.all(np.isfinite(t.numpy()))
    # Defaults derived from padding (no side inputs) also work.
    bare = model({"long_token_ids": features["long_token_ids"], "global_token_ids": features["global_token_ids"]})
    assert np.all(np.isfinite(bare["long_output"].numpy()))
    with pytest.raises(ValueError, match="max_absolute_position_embeddings"):
        model({"long_token_ids": tf.ones([1, 40], tf.int32), "global_token_ids": tf.ones([1, 1], tf.int32)})


def test_etc_model_trains_with_tiny_mlm_loss():
    keras.utils.set_random_seed(0)
    config = tiny_config()
    model = etc_modeling.EtcPretrainingModel(config)
    features = tiny_features(config, seed=1)
    positions = np.array([[1, 4, 9, 15], [0, 3, 7, 12]], np.int32)
    labels = np.take_along_axis(features["long_token_ids"].numpy(), positions, axis=1)
    masked = features["long_token_ids"].numpy().copy()
    np.put_along_axis(masked, positions, 2, axis=1)  # id 2 plays [MASK]
    inputs = dict(features, long_token_ids=tf.constant(masked), masked_lm_positions=tf.constant(positions))
    optimizer = keras.optimizers.Adam(learning_rate=1e-2)
    model(inputs)
    optimizer.build(model.trainable_variables)  # slots outside tf.function: one trace

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)["masked_lm_logits"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [float(step()) for _ in range(12)]
    print("ETC MLM losses", [round(v, 3) for v in losses])
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.6 * losses[0], losses


# ==================================================================== serialization
def _same_outputs(a, b, call):
    for x, y in zip(call(a), call(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)


def test_etc_model_get_config_from_config_round_trip():
    config = tiny_config(layer_norm_type="normformer", use_running_mean=True, share_qkv_projections=False)
    model = etc_modeling.EtcModel(config)
    features = tiny_features(config)
    model(features)
    clone = etc_modeling.EtcModel.from_config(model.get_config())
    clone(features)
    assert clone.config == config
    clone.set_weights(model.get_weights())
    _same_outputs(model, clone, lambda m: [m(features)["long_output"], m(features)["global_output"]])


def test_etc_model_keras_save_and_load(tmp_path):
    config = tiny_config(num_hidden_layers=1)
    model = etc_modeling.EtcClassifierModel(config, num_labels=3)
    features = tiny_features(config)
    logits = model(features)["logits"].numpy()
    path = str(tmp_path / "etc.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded(features)["logits"].numpy(), logits, atol=1e-6)


# ============================================================================ config
def test_etc_config_defaults_validation_and_json(tmp_path):
    c = etc_modeling.EtcConfig(vocab_size=100)
    assert (c.local_radius, c.relative_pos_max_distance, c.relative_vocab_size) == (84, 12, 32)
    assert (c.segment_vocab_size, c.max_absolute_position_embeddings) == (16, 0)
    assert c.share_qkv_projections and c.share_feed_forward_params and not c.share_kv_projections
    assert c.residual_attention and c.layer_norm_type == "post" and not c.use_running_mean
    assert "ETC+RealFormer" in c.describe()
    path = tmp_path / "etc_config.json"
    c.to_json_file(str(path))
    assert etc_modeling.EtcConfig.from_json_file(str(path)) == c
    assert etc_modeling.EtcConfig(vocab_size=5, use_pre_activation_order=True).layer_norm_type == "pre"

    bad = [
        (dict(relative_vocab_size=20), r"relative_vocab_size \(20\) must be at least 2\*relative_pos_max_distance\+4 = 28"),
        (dict(relative_pos_max_distance=2, relative_vocab_size=7), "at least .* = 8"),
        (dict(hidden_size=100, num_attention_heads=12), "not a multiple of num_attention_heads"),
        (dict(local_radius=0), "local_radius must be a positive integer"),
        (dict(layer_norm_type="sandwich"), "layer_norm_type='sandwich' is not one of"),
        (dict(use_pre_activation_order=True, layer_norm_type="post"), "use_pre_activation_order"),
        (dict(normformer_residual_scale=True), "normformer_residual_scale is a NormFormer option"),
        (dict(share_qkv_projections="yes"), "share_qkv_projections must be true or false"),
        (dict(hidden_act="swoosh"), "hidden_act='swoosh' is not one of"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ConfigError, match=message):
            etc_modeling.EtcConfig(vocab_size=10, **kwargs)
    # Relative positions off: any relative_vocab_size is fine.
    etc_modeling.EtcConfig(vocab_size=10, relative_pos_max_distance=0, relative_vocab_size=0)
    with pytest.raises(ConfigError, match="unknown field.*local_radiuss"):
        etc_modeling.EtcConfig.from_dict({"vocab_size": 10, "local_radiuss": 3})


# ===================================================================== tasks
def test_fixed_block_features_for_bert_records():
    ids = np.array([[5, 6, 7, 8, 9, 10, 11, 12, 13, 0], [5, 6, 7, 0, 0, 0, 0, 0, 0, 0]], np.int32)
    mask = (ids > 0).astype(np.int32)
    seg = np.array([[0, 0, 0, 0, 1, 1, 1, 1, 1, 0], [0] * 10], np.int32)
    f = etc_inputs.make_fixed_block_features(ids, mask, seg, tokens_per_global=4, local_radius=2,
                                             relative_pos_max_distance=1)
    np.testing.assert_array_equal(f["global_token_ids"].numpy(), [[1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(f["global_token_type_ids"].numpy(), [[0, 1, 1], [0, 0, 0]])
    np.testing.assert_array_equal(f["sentence_ids"].numpy()[0], [0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(f["long_token_type_ids"].numpy(), seg)
    assert f["l2g_att_mask"].shape == (2, 10, 3)


def test_etc_checkpoints_pretraining_to_classifier(tmp_path):
    from realformer_tf.errors import CheckpointError

    config = tiny_config(num_hidden_layers=1)
    pre = etc_modeling.EtcPretrainingModel(config)
    names = etc_official.etc_variables(pre)
    assert len(names) == len(pre.weights)
    assert {n.split("/")[0] for n in names} == {"etc", "predictions", "seq_relationship"}
    prefix = etc_official.save_etc_checkpoint(pre, str(tmp_path / "etc_model.ckpt"))
    clf = etc_modeling.EtcClassifierModel(config, num_labels=2)
    etc_official.load_etc_checkpoint(clf, prefix, skip_heads=True)
    encoder = {n: v for n, v in etc_official.etc_variables(clf).items() if n.startswith("etc/")}
    assert encoder and all(np.array_equal(v.numpy(), names[n].numpy()) for n, v in encoder.items())
    other = etc_modeling.EtcClassifierModel(tiny_config(num_hidden_layers=1, share_qkv_projections=False), 2)
    with pytest.raises(CheckpointError):
        etc_official.load_etc_checkpoint(other, prefix, skip_heads=True)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["none", "bfloat16", "float16"])
def test_etc_pretraining_task_runs_in_the_shared_trainer(tmp_path, precision):
    from realformer_tf.training import distribution

    float16 = distribution.set_mixed_precision(precision)  # float16: with loss scaling
    try:
        _train_etc_pretraining(tmp_path, float16)
    finally:
        distribution.set_mixed_precision("none")


def _train_etc_pretraining(tmp_path, float16):
    from realformer_tf import optimization
    from realformer_tf.families import get_family
    from realformer_tf.jobs.runner import RunOptions
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask
    from realformer_tf.training.trainer import Trainer

    family, options = get_family("etc"), RunOptions(etc_tokens_per_global=8)

    config = tiny_config()
    rng = np.random.default_rng(0)
    n, L, P = 8, 24, 3
    ids = rng.integers(5, config.vocab_size, size=(n, L)).astype(np.int32)
    records = {
        "input_ids": ids, "input_mask": np.ones((n, L), np.int32), "segment_ids": np.zeros((n, L), np.int32),
        "masked_lm_positions": np.tile(np.array([[2, 9, 17]], np.int32), (n, 1)),
        "masked_lm_ids": ids[:, [2, 9, 17]], "masked_lm_weights": np.ones((n, P), np.float32),
        "next_sentence_labels": rng.integers(0, 2, size=(n, 1)).astype(np.int32),
    }
    base = lambda ctx=None, start_step=0: tf.data.Dataset.from_tensor_slices(records).repeat().batch(4, drop_remainder=True)  # noqa: E731
    trainer = Trainer(PretrainingTask(config, family=family), tf.distribute.get_strategy(), str(tmp_path),
                      optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-3, 4, 1,
                                                                         float16_loss_scaling=float16),
                      steps_per_loop=2, save_checkpoints_steps=2, global_batch_size=4)
    trainer.restore_or_initialize()
    train = trainer.train(family.adapt_dataset_fn(base, config, options), 4, log_fn=lambda *_: None)
    assert np.isfinite(train["loss"]) and int(trainer.global_step.numpy()) == 4
    assert all(np.isfinite(w.numpy().astype(np.float32)).all() for w in trainer.model.weights)
    results = trainer.evaluate(family.adapt_dataset_fn(lambda ctx=None: base(ctx).take(2), config, options), -1)
    assert {"masked_lm_accuracy", "next_sentence_loss", "loss"} <= set(results)
    prefix = family.save_final_checkpoint(trainer.model, str(tmp_path), config)
    assert etc_modeling.EtcConfig.from_json_file(str(tmp_path / "etc_config.json")) == config
    etc_official.load_etc_checkpoint(etc_modeling.EtcClassifierModel(config, 2), prefix, skip_heads=True)
