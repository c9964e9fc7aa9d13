"""Official ETC configs and checkpoints (google-research etcmodel).

A config as the official `EtcConfig.to_json_string()` writes it builds the official
structure; a TF1 graph-mode checkpoint under the official variable names (written here
with `tf.compat.v1.get_variable` + `Saver`, as the official training does) loads into it,
and the forward pass matches an independent float64 NumPy implementation of the
official computation that reads the weights by their official names and uses the
official relative-id numbering (0 = self, 1..M right, M+1..2M left). Saving under the
official names and loading back is bit-exact.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from realformer_tf import etc_modeling
from realformer_tf.checkpoints import etc_official as etc_checkpoint
from realformer_tf.errors import CheckpointError
from realformer_tf.errors import ConfigError

ROOT = "etc_document_bert"
STACK = f"{ROOT}/global_local_transformer_layers"
TOLERANCE = 1e-5

# Every field the official writer emits. Pre-activation order, factorized embedding,
# shared projections and feed-forward, absolute positions.
OFFICIAL_A = dict(
    vocab_size=37, segment_vocab_size=4, embedding_size=10, hidden_size=12, num_hidden_layers=2,
    num_attention_heads=3, local_radius=2, att_size_per_head=None, relative_pos_max_distance=3,
    relative_vocab_size=11, max_absolute_position_embeddings=20, intermediate_size=17,
    hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    initializer_range=0.02, share_feed_forward_params=True, share_kv_projections=False,
    share_qkv_projections=True, share_att_output_projection=False, use_pre_activation_order=True,
    use_hard_g2l_mask=False, use_hard_l2g_mask=False, grad_checkpointing_period=1)
# Post-LN, nothing shared, no factorization, no absolute positions.
OFFICIAL_B = dict(
    OFFICIAL_A, embedding_size=None, att_size_per_head=4, max_absolute_position_embeddings=0,
    share_feed_forward_params=False, share_qkv_projections=False, share_kv_projections=False,
    share_att_output_projection=False, use_pre_activation_order=False, grad_checkpointing_period=0)
# share_kv and a shared output projection.
OFFICIAL_C = dict(OFFICIAL_B, share_kv_projections=True, share_att_output_projection=True)
CASES = {"pre-factorized-shared": OFFICIAL_A, "post-unshared": OFFICIAL_B, "post-kv-shared": OFFICIAL_C}
PIECES = ("long_query", "l2l_key", "l2l_value", "l2g_key", "l2g_value",
          "global_query", "g2g_key", "g2g_value", "g2l_key", "g2l_value")


# ------------------------------------------------------------- official names and shapes
def projection_owner(piece, c):
    """The official layer that computes `piece` (FusedGlobalLocalAttention's sharing)."""
    if c["share_qkv_projections"]:
        return {"query": "long_query", "key": "l2l_key", "value": "l2l_value"}[piece.split("_")[1]]
    if c["share_kv_projections"]:
        return {"l2g_key": "l2l_key", "l2g_value": "l2l_value",
                "g2l_key": "g2g_key", "g2l_value": "g2g_value"}.get(piece, piece)
    return piece


def official_shapes(c):
    h, e = c["hidden_size"], c["embedding_size"] or c["hidden_size"]
    heads, r = c["num_attention_heads"], c["relative_vocab_size"]
    shapes = {f"{ROOT}/token_emb_lookup/embedding_table": (c["vocab_size"], e),
              f"{ROOT}/segment_emb_lookup/embedding_table": (c["segment_vocab_size"], h)}
    if e != h:
        shapes.update({f"{ROOT}/token_emb_lookup/projection/kernel": (e, h),
                       f"{ROOT}/token_emb_lookup/projection/bias": (h,)})
    if c["max_absolute_position_embeddings"]:
        for side in ("long", "global"):
            shapes[f"{ROOT}/position_emb_lookup_{side}/embedding_table"] = (c["max_absolute_position_embeddings"], h)
    norms = [f"{ROOT}/long_emb_layer_norm", f"{ROOT}/global_emb_layer_norm"]
    for i in range(c["num_hidden_layers"]):
        fused = f"{STACK}/fused_att_layer_{i}"
        att = f"{fused}/fused_global_local_att"
        norms += [f"{fused}/layer_norm_0", f"{fused}/layer_norm_1"]
        for owner in sorted({projection_owner(p, c) for p in PIECES}):
            shapes[f"{att}/{owner}_projection/linear/kernel"] = (h, h)
            shapes[f"{att}/{owner}_projection/linear/bias"] = (h,)
        for side in ("long",) if c["share_att_output_projection"] else ("long", "global"):
            shapes[f"{att}/{side}_output_projection/kernel"] = (h, h)
            shapes[f"{att}/{side}_output_projection/bias"] = (h,)
        for scope in ("long_qkv_attention/qkv_relative_attention", "global_qkv_attention"):
            shapes[f"{att}/{scope}/relative_emb_table"] = (r, heads, h // heads)
            shapes[f"{att}/{scope}/relative_bias_table"] = (r, heads)
        ffns = ["feed_forward_layer"] if c["share_feed_forward_params"] else [
            "long_feed_forward_layer", "global_feed_forward_layer"]
        for ffn in ffns:
            p = f"{STACK}/{ffn}_{i}"
            shapes.update({f"{p}/dense_layers/layer_0/kernel": (h, c["intermediate_size"]),
                           f"{p}/dense_layers/layer_0/bias": (c["intermediate_size"],),
                           f"{p}/dense_layers/layer_1/kernel": (c["intermediate_size"], h),
                           f"{p}/dense_layers/layer_1/bias": (h,)})
            norms.append(f"{p}/layer_norm")
    for n in norms:
        shapes[f"{n}/gamma"], shapes[f"{n}/beta"] = (h,), (h,)
    return shapes


def random_official_weights(c, seed):
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in official_shapes(c).items():
        if name.endswith("gamma"):
            value = 1.0 + 0.3 * rng.standard_normal(shape)
        elif name.endswith("kernel"):
            value = rng.standard_normal(shape) / np.sqrt(shape[0])
        else:
            value = 0.4 * rng.standard_normal(shape)
        weights[name] = value.astype(np.float32)
    return weights


def write_tf1_checkpoint(prefix, weights):
    with tf.Graph().as_default():
        for name, value in weights.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
        tf.compat.v1.get_variable("global_step", initializer=tf.constant(7, tf.int64))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(sess, prefix)
    return prefix


# ----------------------------------------------------- the official computation, NumPy
def layer_norm(x, w, name):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w[f"{name}/gamma"] + w[f"{name}/beta"]


def dense(x, w, name):
    return x @ w[f"{name}/kernel"] + w[f"{name}/bias"]


def gelu(x):  # the official tensor_utils "gelu": the tanh approximation
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def qkv_attention(q, k, v, mask, rel_ids, emb, bias):
    """QkvRelativeAttention: q [B,Q,N,D], k/v [B,K,N,D], mask/rel_ids [B,Q,K]."""
    scores = np.einsum("bqhd,bkhd->bqkh", q, k)
    all_rel = np.einsum("bqhd,rhd->bqrh", q, emb) + bias
    scores = scores + np.take_along_axis(all_rel, rel_ids[..., None], axis=2)
    scores = scores / np.sqrt(q.shape[-1]) - 10000.0 * (1.0 - mask[..., None])
    probs = np.exp(scores - scores.max(axis=2, keepdims=True))
    probs /= probs.sum(axis=2, keepdims=True)
    return np.einsum("bqkh,bkhd->bqhd", probs, v)


def local_to_dense(local, radius, fill):
    """[B, L, 2r+1] (entry m of i: key i - r + m) -> [B, L, L]; outside: `fill`."""
    b, n, _ = local.shape
    out = np.full((b, n, n), fill, local.dtype)
    for i in range(n):
        for m in range(2 * radius + 1):
            if 0 <= i - radius + m < n:
                out[:, i, i - radius + m] = local[:, i, m]
    return out


def fused_attention(hl, hg, w, att, c, s):
    heads = c["num_attention_heads"]

    def proj(piece, x):
        y = dense(x, w, f"{att}/{projection_owner(piece, c)}_projection/linear")
        return y.reshape(y.shape[0], y.shape[1], heads, -1)

    def rel(scope):
        return w[f"{att}/{scope}/relative_emb_table"], w[f"{att}/{scope}/relative_bias_table"]

    r = c["local_radius"]
    long_ctx = qkv_attention(
        proj("long_query", hl),
        np.concatenate([proj("l2l_key", hl), proj("l2g_key", hg)], 1),
        np.concatenate([proj("l2l_value", hl), proj("l2g_value", hg)], 1),
        np.concatenate([local_to_dense(s["l2l_mask"], r, 0.0), s["l2g_mask"]], -1),
        np.concatenate([local_to_dense(s["l2l_ids"], r, 0), s["l2g_ids"]], -1),
        *rel("long_qkv_attention/qkv_relative_attention"))
    global_ctx = qkv_attention(
        proj("global_query", hg),
        np.concatenate([proj("g2g_key", hg), proj("g2l_key", hl)], 1),
        np.concatenate([proj("g2g_value", hg), proj("g2l_value", hl)], 1),
        np.concatenate([s["g2g_mask"], s["g2l_mask"]], -1),
        np.concatenate([s["g2g_ids"], s["g2l_ids"]], -1),
        *rel("global_qkv_attention"))
    out_global = "long" if c["share_att_output_projection"] else "global"
    flat = lambda x: x.reshape(x.shape[0], x.shape[1], -1)  # noqa: E731
    return (dense(flat(long_ctx), w, f"{att}/long_output_projection"),
            dense(flat(global_ctx), w, f"{att}/{out_global}_output_projection"))


def official_forward(w, c, long_ids, global_ids, long_seg, global_seg, s):
    def embed(ids, seg, side):
        x = w[f"{ROOT}/token_emb_lookup/embedding_table"][ids]
        if f"{ROOT}/token_emb_lookup/projection/kernel" in w:
            x = dense(x, w, f"{ROOT}/token_emb_lookup/projection")
        x = x + w[f"{ROOT}/segment_emb_lookup/embedding_table"][seg]
        if c["max_absolute_position_embeddings"]:
            x = x + w[f"{ROOT}/position_emb_lookup_{side}/embedding_table"][: ids.shape[1]]
        return layer_norm(x, w, f"{ROOT}/{side}_emb_layer_norm")

    def ffn(x, name):
        h = layer_norm(x, w, f"{name}/layer_norm") if pre else x
        out = dense(gelu(dense(h, w, f"{name}/dense_layers/layer_0")), w, f"{name}/dense_layers/layer_1")
        return x + out if pre else layer_norm(x + out, w, f"{name}/layer_norm")

    pre = c["use_pre_activation_order"]
    x_long, x_global = embed(long_ids, long_seg, "long"), embed(global_ids, global_seg, "global")
    for i in range(c["num_hidden_layers"]):
        fused = f"{STACK}/fused_att_layer_{i}"
        ln0, ln1 = f"{fused}/layer_norm_0", f"{fused}/layer_norm_1"
        hl = layer_norm(x_long, w, ln0) if pre else x_long
        hg = layer_norm(x_global, w, ln1) if pre else x_global
        al, ag = fused_attention(hl, hg, w, f"{fused}/fused_global_local_att", c, s)
        x_long = x_long + al if pre else layer_norm(x_long + al, w, ln0)
        x_global = x_global + ag if pre else layer_norm(x_global + ag, w, ln1)
        shared = c["share_feed_forward_params"]
        x_long = ffn(x_long, f"{STACK}/{'' if shared else 'long_'}feed_forward_layer_{i}")
        x_global = ffn(x_global, f"{STACK}/{'' if shared else 'global_'}feed_forward_layer_{i}")
    return x_long, x_global  # no final LayerNorm in either order


# ------------------------------------------------------------------------------ inputs
def to_official_id(ours, m):
    """Our clip(j-i,-M,M)+M numbering -> official (0 self, 1..M right, M+1..2M left)."""
    d = ours - m
    official = np.where(d > 0, d, np.where(d < 0, m - d, 0))
    return np.where(ours <= 2 * m, official, ours)


def make_inputs(c, seed, with_masks):
    rng = np.random.default_rng(seed)
    batch, n, g, r, m = 2, 11, 3, c["local_radius"], c["relative_pos_max_distance"]
    ours = {
        "long_token_ids": rng.integers(1, c["vocab_size"], (batch, n)),
        "global_token_ids": rng.integers(1, c["vocab_size"], (batch, g)),
        "l2l_relative_att_ids": rng.integers(0, 2 * m + 3, (batch, n, 2 * r + 1)),
        "g2g_relative_att_ids": rng.integers(0, 2 * m + 3, (batch, g, g)),
        "l2g_relative_att_ids": rng.integers(2 * m + 1, 2 * m + 3, (batch, n, g)),
        "g2l_relative_att_ids": rng.integers(2 * m + 1, 2 * m + 3, (batch, g, n)),
    }
    masks = {"l2l_att_mask": np.ones((batch, n, 2 * r + 1)), "g2g_att_mask": np.ones((batch, g, g)),
             "l2g_att_mask": np.ones((batch, n, g)), "g2l_att_mask": np.ones((batch, g, n))}
    seg = {"long": np.ones((batch, n), np.int64), "global": np.zeros((batch, g), np.int64)}
    if with_masks:
        masks = {k: (rng.random(v.shape) < 0.7).astype(np.float64) for k, v in masks.items()}
        masks["l2l_att_mask"][..., r] = 1.0  # every token sees itself: no empty softmax
        masks["g2g_att_mask"][..., np.arange(g), np.arange(g)] = 1.0
        seg = {"long": rng.integers(0, 4, (batch, n)), "global": rng.integers(0, 4, (batch, g))}
        ours.update({k: v.astype(np.int32) for k, v in masks.items()})
        ours.update(long_token_type_ids=seg["long"], global_token_type_ids=seg["global"])
    side = {
        "l2l_mask": masks["l2l_att_mask"], "g2g_mask": masks["g2g_att_mask"],
        "l2g_mask": masks["l2g_att_mask"], "g2l_mask": masks["g2l_att_mask"],
        **{f"{k}_ids": to_official_id(ours[f"{k}_relative_att_ids"], m) for k in ("l2l", "g2g", "l2g", "g2l")},
    }
    reference = (ours["long_token_ids"], ours["global_token_ids"], seg["long"], seg["global"], side)
    return ours, reference


def official_model(tmp_path, values, name="etc_config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(values, indent=2, sort_keys=True))
    config = etc_modeling.EtcConfig.from_json_file(str(path))
    return config, etc_modeling.EtcModel(config)


# ------------------------------------------------------------------------------- tests
def test_official_config_fields_and_layout(tmp_path):
    config, _ = official_model(tmp_path, OFFICIAL_A)
    assert config.layout == "official" and config.layer_norm_type == "pre"
    assert config.embedding_size == 10 and config.grad_checkpointing_period == 1
    assert not config.residual_attention  # official etcmodel: plain ETC unless the file says otherwise
    ours = etc_modeling.EtcConfig(vocab_size=10)
    assert ours.layout == "realformer_tf"
    assert etc_modeling.EtcConfig.from_dict({"vocab_size": 10}).layout == "realformer_tf"
    assert etc_modeling.EtcConfig.from_dict(ours.to_dict()) == ours
    with pytest.raises(ConfigError, match="att_size_per_head 5 differs .* 4"):
        etc_modeling.EtcConfig.from_dict(dict(OFFICIAL_A, att_size_per_head=5))
    with pytest.raises(ConfigError, match='needs "layout": "official"'):
        etc_modeling.EtcConfig(vocab_size=10, hidden_size=12, num_attention_heads=3, embedding_size=6)
    with pytest.raises(ConfigError, match="grad_checkpointing_period must be an integer >= 0"):
        etc_modeling.EtcConfig.from_dict(dict(OFFICIAL_A, grad_checkpointing_period=-1))
    with pytest.raises(ConfigError, match="EtcPretrainingModel ties"):
        etc_modeling.EtcPretrainingModel(config)


@pytest.mark.parametrize("case", sorted(CASES))
def test_official_checkpoint_matches_numpy_reference(case, tmp_path):
    values = CASES[case]
    config, model = official_model(tmp_path, dict(values, residual_attention=False))
    weights = random_official_weights(values, seed=len(case))
    prefix = write_tf1_checkpoint(str(tmp_path / "official.ckpt"), weights)
    etc_checkpoint.load_etc_checkpoint(model, prefix)
    w64 = {k: v.astype(np.float64) for k, v in weights.items()}
    for with_masks in (False, True):
        ours, reference = make_inputs(values, seed=3, with_masks=with_masks)
        out = model(ours)
        want_long, want_global = official_forward(w64, values, *reference)
        diffs = [float(np.max(np.abs(out["long_output"].numpy() - want_long))),
                 float(np.max(np.abs(out["global_output"].numpy() - want_global)))]
        print(f"official ETC ({case}, masks={with_masks}) -> ours, max |diff| long/global: {diffs}")
        assert max(diffs) < TOLERANCE, diffs


def test_relative_rows_are_permuted():
    """Official row k holds the relation our row order[k] holds (M = 3)."""
    order = etc_checkpoint.official_row_order(3, 11)
    assert order.tolist() == [3, 4, 5, 6, 2, 1, 0, 7, 8, 9, 10]
    ours = np.arange(11)
    assert all(to_official_id(ours, 3)[order[k]] == k for k in range(11))


@pytest.mark.parametrize("case", sorted(CASES))
def test_save_official_names_then_load_is_bit_exact(case, tmp_path):
    values = CASES[case]
    _, model = official_model(tmp_path, values)  # with residual attention: weights alike
    weights = random_official_weights(values, seed=11)
    etc_checkpoint.load_etc_checkpoint(model, write_tf1_checkpoint(str(tmp_path / "in.ckpt"), weights))
    prefix = etc_checkpoint.save_etc_checkpoint(model, str(tmp_path / "out.ckpt"), official_names=True)
    stored = dict(tf.train.list_variables(prefix))
    assert {k: tuple(v) for k, v in stored.items()} == official_shapes(values)
    reader = tf.train.load_checkpoint(prefix)
    for name, value in weights.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)
    _, again = official_model(tmp_path, values, "again.json")
    etc_checkpoint.load_etc_checkpoint(again, prefix)
    for a, b in zip(model.weights, again.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    ours, _ = make_inputs(values, seed=4, with_masks=True)
    np.testing.assert_array_equal(model(ours)["global_output"].numpy(), again(ours)["global_output"].numpy())


def test_classifier_from_official_encoder_and_heads_round_trip(tmp_path):
    config, _ = official_model(tmp_path, OFFICIAL_B)
    weights = random_official_weights(OFFICIAL_B, seed=5)
    prefix = write_tf1_checkpoint(str(tmp_path / "official.ckpt"), weights)
    classifier = etc_modeling.EtcClassifierModel(config, num_labels=3)
    etc_checkpoint.load_etc_checkpoint(classifier, prefix, skip_heads=True)
    saved = etc_checkpoint.save_etc_checkpoint(classifier, str(tmp_path / "clf.ckpt"), official_names=True)
    names = dict(tf.train.list_variables(saved))
    assert "classifier/output_weights" in names and f"{ROOT}/segment_emb_lookup/embedding_table" in names
    again = etc_modeling.EtcClassifierModel(config, num_labels=3)
    etc_checkpoint.load_etc_checkpoint(again, saved)
    ours, _ = make_inputs(OFFICIAL_B, seed=6, with_masks=False)
    np.testing.assert_array_equal(classifier(ours)["logits"].numpy(), again(ours)["logits"].numpy())


def test_missing_unexpected_misshaped_official_variables_are_named(tmp_path):
    config, model = official_model(tmp_path, OFFICIAL_A)
    weights = random_official_weights(OFFICIAL_A, seed=1)
    emb = f"{ROOT}/token_emb_lookup/embedding_table"
    extra = f"{STACK}/fused_att_layer_0/fused_global_local_att/g2g_key_projection/linear/kernel"
    cases = {
        "lacks": ({k: v for k, v in weights.items() if k != emb}, emb),
        "does not have": (dict(weights, **{extra: np.zeros((12, 12), np.float32)}), extra),
        "shapes that differ": (dict(weights, **{emb: np.zeros((37, 12), np.float32)}), "[37, 12]"),
    }
    for i, (kind, (changed, named)) in enumerate(cases.items()):
        prefix = write_tf1_checkpoint(str(tmp_path / f"bad{i}.ckpt"), changed)
        with pytest.raises(CheckpointError) as err:
            etc_checkpoint.load_etc_checkpoint(model, prefix)
        assert kind in str(err.value) and named in str(err.value), str(err.value)
    ours_layout = etc_modeling.EtcModel(etc_modeling.EtcConfig(**dict(OFFICIAL_B, layout="realformer_tf")))
    with pytest.raises(CheckpointError, match="official-layout"):
        etc_checkpoint.save_etc_checkpoint(ours_layout, str(tmp_path / "x.ckpt"), official_names=True)


def test_official_layout_keras_save_and_load(tmp_path):
    import keras

    config, _ = official_model(tmp_path, OFFICIAL_A)
    model = etc_modeling.EtcClassifierModel(config, num_labels=2)
    ours, _ = make_inputs(OFFICIAL_A, seed=8, with_masks=False)
    logits = model(ours)["logits"].numpy()
    path = str(tmp_path / "etc_official.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.etc.encoder, etc_modeling.PreActivationBlockStack)
    np.testing.assert_allclose(loaded(ours)["logits"].numpy(), logits, atol=1e-6)
