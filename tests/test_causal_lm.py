"""The causal language model against an independent NumPy computation, for every variant
(Pre-LN, Post-LN, NormFormer with and without its residual scale, fairseq's head scale
alone, RealFormer, its running mean, RealFormer + NormFormer): logits; cached decoding
equal to recomputing the prefix; no logit sees a later token; perplexity as exp(mean
NLL); greedy and seeded sampling; `.keras` files; config errors."""

import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from realformer_tf.errors import ConfigError, UsageError
from realformer_tf.jobs.tasks.causal_lm import next_token_sums, perplexity_lines
from realformer_tf.models.causal_lm.config import CausalLMConfig
from realformer_tf.models.causal_lm.model import CausalLMModel
from realformer_tf.serving import decoding

VOCAB, HIDDEN, HEADS, LAYERS, INNER, POSITIONS = 37, 12, 3, 3, 20, 24
VARIANTS = {
    "pre_ln": dict(layer_norm_type="pre"),
    "post_ln": dict(layer_norm_type="post"),
    "normformer": dict(layer_norm_type="normformer"),
    "normformer_residual_scale": dict(layer_norm_type="normformer", normformer_residual_scale=True),
    "fairseq_head_scale_only": dict(normformer_head_scale=True, normformer_head_scale_position="after_projection"),
    "realformer": dict(residual_attention=True),
    "realformer_running_mean": dict(residual_attention=True, use_running_mean=True),
    "realformer_normformer": dict(layer_norm_type="normformer", residual_attention=True),
}
RNG = np.random.default_rng(56)
IDS = RNG.integers(1, VOCAB, size=(2, 11)).astype(np.int32)
MASK = np.ones_like(IDS)
MASK[1, :3] = 0  # a left-padded row


def config(**overrides):
    values = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  intermediate_size=INNER, max_position_embeddings=POSITIONS, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, layer_norm_eps=ref.LN_EPS)  # the reference's epsilon
    return CausalLMConfig(**dict(values, **overrides))


@pytest.fixture(scope="module")
def models():
    """{variant: a model with random non-trivial weights}."""
    built = {}
    for seed, (name, overrides) in enumerate(VARIANTS.items()):
        model = CausalLMModel(config(**overrides))
        model.build()
        built[name] = ref.randomize_weights(model, seed)
    return built


def positions_of(mask):
    return np.maximum(np.cumsum(mask, axis=1) - 1, 0)


def numpy_logits(model, ids, mask):
    """The causal LM computed in float64 NumPy from the model's weights alone."""
    cfg = model.config
    wte = ref.to_numpy(model.token_embeddings.embeddings)
    wpe = ref.to_numpy(model.position_embeddings.embeddings)
    x = wte[ids] + wpe[positions_of(mask)]
    blocks, final = ref.stack_params(model.decoder)
    options = cfg.block_options()
    layer_norm_type = "post" if cfg.layer_norm_type == "post" else "pre"
    hidden, _, _ = ref.encoder_stack(
        x, blocks, final, attention_mask=mask, residual_attention=cfg.residual_attention, causal=True,
        num_heads=cfg.num_attention_heads, layer_norm_type=layer_norm_type,
        use_running_mean=cfg.use_running_mean, head_scale_position=options["head_scale_position"])
    return hidden @ wte.T


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_equal_numpy(models, variant):
    model = models[variant]
    got = model({"input_ids": IDS, "input_mask": MASK, "position_ids": positions_of(MASK)})["logits"]
    want = numpy_logits(model, IDS, MASK)
    real = MASK.astype(bool)  # a padded query row attends to nothing real: no reference value
    ref.assert_close(f"{variant} logits", np.asarray(got)[real], want[real], 1e-5)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cached_steps_equal_recomputing_the_prefix_and_see_no_future(models, variant):
    """Prefill 4 tokens, then one token per step: each step's logits equal the whole
    prefix recomputed; changing tokens after t changes no logit at or before t."""
    model = models[variant]
    ids = IDS[:1]
    full = np.asarray(model({"input_ids": ids})["logits"])[0]
    step = model.call_with_cache({"input_ids": ids[:, :4]}, model.empty_cache(1))
    ref.assert_close(f"{variant} prefill", np.asarray(step["logits"])[0], full[:4], 1e-5)
    for t in range(4, ids.shape[1]):
        step = model.call_with_cache({"input_ids": ids[:, t:t + 1]}, step["cache"])
        ref.assert_close(f"{variant} step {t}", np.asarray(step["logits"])[0, 0], full[t], 1e-5)
    changed = ids.copy()
    changed[:, 6:] = (changed[:, 6:] + 5) % VOCAB
    later = np.asarray(model({"input_ids": changed})["logits"])[0]
    assert np.array_equal(later[:6], full[:6]) and not np.allclose(later[6:], full[6:])


@pytest.mark.parametrize("variant", ["pre_ln", "realformer_normformer"])
def test_greedy_generation_equals_recomputing_argmax(models, variant):
    model = models[variant]
    prompts = [[3, 7, 9, 4, 11], [5, 6]]
    ids, mask = decoding.left_pad(prompts)
    out = decoding.generate(model, ids, mask, 6)
    for row, prompt in enumerate(prompts):
        seq = list(prompt)
        for _ in range(6):
            logits = np.asarray(model({"input_ids": np.array([seq], np.int32)})["logits"])[0, -1]
            seq.append(int(np.argmax(logits)))
        assert out["ids"].numpy()[row].tolist() == seq[len(prompt):]
    assert out["length"].numpy().tolist() == [6, 6]


def test_sampling_is_seeded_and_top_k_1_is_greedy(models):
    model = models["realformer"]
    ids, mask = decoding.left_pad([[3, 7, 9], [5, 6]])
    run = tf.function(lambda seed, k: decoding.generate(model, ids, mask, 8, 1.3, k, 0.9, seed)["ids"])
    first, again, other = run(1, 0).numpy(), run(1, 0).numpy(), run(2, 0).numpy()
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    greedy = decoding.generate(model, ids, mask, 8)["ids"].numpy()
    assert np.array_equal(run(3, 1).numpy(), greedy)


def test_generation_stops_rows_at_the_end_of_document_token(models):
    model = models["pre_ln"]
    ids, mask = decoding.left_pad([[3, 7, 9]])
    greedy = decoding.generate(model, ids, mask, 6)["ids"].numpy()[0]
    eos = int(greedy[2])
    out = decoding.generate(model, ids, mask, 6, eos_id=eos, pad_id=0)
    first = greedy.tolist().index(eos)
    assert out["length"].numpy()[0] == first + 1
    assert out["ids"].numpy()[0].tolist() == greedy[:first + 1].tolist() + [0] * (5 - first)


def test_sampling_options_out_of_range_are_one_error():
    with pytest.raises(UsageError, match=r"temperature=-1.*top_k=-2.*top_p=1.5.*max_new_tokens=0"):
        decoding.check_sampling(-1.0, -2, 1.5, 0)
    decoding.check_sampling(0.0, 0, 1.0, 1)


def test_perplexity_is_exp_of_the_mean_next_token_nll(models):
    model = models["normformer"]
    logits = model({"input_ids": IDS})["logits"]
    sums = {k: (float(s), float(c)) for k, (s, c) in next_token_sums(tf.constant(IDS), logits).items()}
    x = np.asarray(logits, np.float64)[:, :-1]
    log_probs = x - x.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, IDS[:, 1:, None].astype(np.int64), -1)[..., 0]
    assert sums["lm_loss"][1] == nll.size
    loss = sums["lm_loss"][0] / sums["lm_loss"][1]
    np.testing.assert_allclose(loss, nll.mean(), rtol=1e-5)
    lines = perplexity_lines({"lm_loss": loss})
    np.testing.assert_allclose(lines["perplexity"], np.exp(nll.mean()), rtol=1e-5)
    np.testing.assert_allclose(lines["bits_per_token"], nll.mean() / np.log(2), rtol=1e-5)


def test_keras_file_round_trip(models, tmp_path):
    import keras

    model = models["realformer_normformer"]
    path = str(tmp_path / "lm.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    assert again.config == model.config
    np.testing.assert_allclose(np.asarray(again({"input_ids": IDS})["logits"]),
                               np.asarray(model({"input_ids": IDS})["logits"]), atol=1e-6)


@pytest.mark.parametrize("values, message", [
    (dict(vocab_size=10, type_vocab_size=2), "is a BERT \\(masked-LM\\) config"),
    (dict(vocab_size=10, layer_norm_type="post", normformer_head_scale=True), "not 'post'"),
    (dict(vocab_size=10, normformer_head_scal=True), "did you mean normformer_head_scale"),
    (dict(vocab_size=10, residual_attention=None), "states its variant"),
    (dict(vocab_size=10, max_position_embeddings=0), "max_position_embeddings must be a positive integer"),
])
def test_config_errors_name_the_field(values, message):
    with pytest.raises(ConfigError, match=message):
        CausalLMConfig.from_dict(values, source="lm.json")


def test_config_states_the_variant_and_the_switches():
    assert CausalLMConfig.from_dict({"vocab_size": 10}).residual_attention is False  # a file that omits it
    nf = config(layer_norm_type="normformer", normformer_ffn_activation_norm=False)
    options = nf.block_options()
    assert (options["attention_output_norm"], options["ffn_activation_norm"], options["use_head_scale"]) == (
        True, False, True)
    assert "NormFormer (attention-output LN, head scale)" in nf.describe()
    block = CausalLMModel(nf).decoder.blocks[0]
    block.build((None, None, HIDDEN))
    assert hasattr(block, "attention_post_layer_norm") and not hasattr(block, "intermediate_layer_norm")


def test_vanilla_model_equals_transformers_gpt2_both_ways(tmp_path):
    """Our Pre-LN model written as a GPT-2 folder computes in transformers the logits it
    computes here (and greedy text is the same); a folder transformers saved from its own
    random GPT-2 loads here and computes its logits."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from realformer_tf.checkpoints import causal_lm as lm_checkpoint
    from realformer_tf.families import get_family

    model = CausalLMModel(config(layer_norm_eps=1e-5))
    model.build()
    ref.randomize_weights(model, 11)
    folder = lm_checkpoint.save_gpt2_folder(model, str(tmp_path / "ours"))
    theirs = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    positions = positions_of(MASK)
    with torch.no_grad():
        want = theirs(torch.tensor(IDS, dtype=torch.long), attention_mask=torch.tensor(MASK),
                      position_ids=torch.tensor(positions, dtype=torch.long)).logits.numpy()
    got = np.asarray(model({"input_ids": IDS, "input_mask": MASK, "position_ids": positions})["logits"])
    ref.assert_close("GPT-2 logits", got[MASK.astype(bool)], want[MASK.astype(bool)], 1e-4)
    prompt = IDS[:1, :5]
    with torch.no_grad():
        greedy = theirs.generate(torch.tensor(prompt, dtype=torch.long), max_new_tokens=6, do_sample=False,
                                 attention_mask=torch.ones(prompt.shape, dtype=torch.long), pad_token_id=0)
    ours = decoding.generate(model, prompt, np.ones_like(prompt), 6)["ids"].numpy()
    assert ours[0].tolist() == greedy[0, 5:].tolist()

    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=POSITIONS, n_embd=HIDDEN, n_layer=2, n_head=HEADS, n_inner=INNER)).eval()
    gpt2.save_pretrained(str(tmp_path / "theirs"))
    family = get_family("causal_lm")
    loaded = family.build_model(family.load_config(str(tmp_path / "theirs")), "pretraining")
    family.load_checkpoint(loaded, str(tmp_path / "theirs"))
    with torch.no_grad():
        want = gpt2(torch.tensor(IDS, dtype=torch.long)).logits.numpy()
    ref.assert_close("GPT-2 folder loaded", np.asarray(loaded({"input_ids": IDS})["logits"]), want, 1e-4)


def test_gpt2_export_refuses_what_gpt2_does_not_compute(models, tmp_path):
    from realformer_tf.checkpoints import causal_lm as lm_checkpoint
    from realformer_tf.errors import VariantExportError

    for variant in ("realformer", "normformer", "post_ln"):
        with pytest.raises(VariantExportError, match="GPT-2 computes Pre-LN"):
            lm_checkpoint.save_gpt2_folder(models[variant], str(tmp_path / variant))
        assert not (tmp_path / variant).exists()


def test_normformer_equals_x_transformers_decoder(tmp_path):
    """x-transformers' `Decoder` with NormFormer's options (pre_norm, attn_head_scale,
    ff_post_act_ln, and sandwich_norm for the norm after attention, whose second norm
    after the feed-forward NormFormer does not have: replaced by the identity) computes
    our NormFormer's logits from our weights. x-transformers has no biases in attention
    and no LayerNorm biases, so ours are zeroed; it scales learned positions by
    dim ** -0.5, so its table is ours * sqrt(dim); its gelu is the exact one; its norms
    may store their gain as the offset from 1 (`unit_offset`); its tied output is scaled
    by dim ** -0.5 unless `tie_embedding_scale=1.0` (GPT-2's and fairseq's are not)."""
    torch = pytest.importorskip("torch")
    x_transformers = pytest.importorskip("x_transformers")

    model = CausalLMModel(config(layer_norm_type="normformer", hidden_act="gelu_exact", layer_norm_eps=1e-5))
    model.build()
    ref.randomize_weights(model, 5)
    for variable in model.weights:
        if variable.path.endswith("/beta") or ("/attention/" in variable.path and variable.path.endswith("/bias")):
            variable.assign(np.zeros(variable.shape, np.float32))
    theirs = x_transformers.TransformerWrapper(
        num_tokens=VOCAB, max_seq_len=POSITIONS, tie_embedding=True, tie_embedding_scale=1.0,
        attn_layers=x_transformers.Decoder(dim=HIDDEN, depth=LAYERS, heads=HEADS, attn_dim_head=HIDDEN // HEADS,
                                           ff_mult=INNER / HIDDEN, pre_norm=True, sandwich_norm=True,
                                           attn_head_scale=True, ff_post_act_ln=True)).eval()
    _load_into_x_transformers(theirs, model, torch)
    with torch.no_grad():
        want = theirs(torch.tensor(IDS, dtype=torch.long)).numpy()
    ref.assert_close("x-transformers NormFormer", np.asarray(model({"input_ids": IDS})["logits"]), want, 1e-4)


def _load_into_x_transformers(theirs, model, torch):
    def tensor(variable, transpose=False):
        array = np.asarray(variable.numpy(), np.float32)
        return torch.tensor(array.T if transpose else array)

    def set_gain(norm, layer_norm):  # x-transformers may keep a gain as its offset from 1
        norm.gamma.copy_(tensor(layer_norm.gamma) - float(getattr(norm, "unit_offset", False)))

    with torch.no_grad():
        theirs.token_emb.emb.weight.copy_(tensor(model.token_embeddings.embeddings))
        theirs.pos_emb.emb.weight.copy_(tensor(model.position_embeddings.embeddings) * HIDDEN ** 0.5)
        for i, block in enumerate(model.decoder.blocks):
            (attn_norms, attention, _), (ff_norms, ff, _) = theirs.attn_layers.layers[2 * i], theirs.attn_layers.layers[2 * i + 1]
            set_gain(attn_norms[0], block.attention_layer_norm)
            set_gain(attn_norms[1], block.attention_post_layer_norm)
            attention.head_scale_params.copy_(tensor(block.attention.head_scale).reshape(1, HEADS, 1, 1))
            for mine, their in (("query_dense", "to_q"), ("key_dense", "to_k"), ("value_dense", "to_v"),
                                ("output_dense", "to_out")):
                getattr(attention, their).weight.copy_(tensor(getattr(block.attention, mine).kernel, True))
            set_gain(ff_norms[0], block.output_layer_norm)
            ff_norms[1] = torch.nn.Identity()  # NormFormer normalizes the attention branch only
            inner, norm, _, outer = ff.ff
            inner[0].weight.copy_(tensor(block.intermediate_dense.kernel, True))
            inner[0].bias.copy_(tensor(block.intermediate_dense.bias))
            set_gain(norm, block.intermediate_layer_norm)
            outer.weight.copy_(tensor(block.output_dense.kernel, True))
            outer.bias.copy_(tensor(block.output_dense.bias))
        set_gain(theirs.attn_layers.final_norm, model.decoder.final_layer_norm)


# -- the journey: text -> records -> pretraining -> held-out perplexity -> generation ------
@pytest.mark.slow
def test_journey_text_to_generated_text(tmp_path):
    """The README's causal-LM commands on a tiny corpus: the program reports held-out
    perplexity = exp(loss) that beats the untrained model's, a rerun resumes (nothing
    left to train), generate.py's greedy text is the model's own argmax chain, and the
    SavedModel (--export_dir) serves it without the package, its `score` the model's
    log-likelihood."""
    import json

    import helpers_data as h
    from realformer_tf.app import create_pretraining_data, generate, run_pretraining
    from realformer_tf.families import get_family

    vocab = h.write_vocab(tmp_path / "vocab.txt")
    for name, seed in (("train", 1), ("held", 2)):
        text = h.write_text(tmp_path / f"{name}.txt", num_docs=12 if name == "train" else 4, seed=seed)
        assert create_pretraining_data.main([
            "cpd", "--objective=causal_lm", f"--input_file={text}", f"--vocab_file={vocab}", "--max_seq_length=16",
            f"--output_file={tmp_path / name}.tfrecord"]) == 0
    lm_config = tmp_path / "lm.json"
    lm_config.write_text(json.dumps(dict(vocab_size=h.vocab_size(), hidden_size=16, num_hidden_layers=2,
                                         num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                                         residual_attention=True, layer_norm_type="normformer")))
    out = tmp_path / "out"
    argv = ["rp", "--model_type=causal_lm", f"--bert_config_file={lm_config}", f"--input_file={tmp_path}/train.tfrecord",
            f"--eval_input_file={tmp_path}/held.tfrecord", f"--output_dir={out}", "--do_train", "--do_eval",
            "--max_seq_length=16", "--train_batch_size=8", "--eval_batch_size=8", "--num_train_steps=60",
            "--num_warmup_steps=6", "--learning_rate=0.01", "--iterations_per_loop=20", "--save_checkpoints_steps=30",
            "--seed=3", f"--export_dir={tmp_path / 'export'}", f"--vocab_file={vocab}"]
    assert run_pretraining.main(argv) == 0
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
    loss, perplexity = float(results["lm_loss"]), float(results["perplexity"])
    assert int(results["global_step"]) == 60 and abs(perplexity - np.exp(loss)) < 1e-6 * perplexity
    assert loss < np.log(h.vocab_size()) - 0.5  # well below a uniform guess (3.87 nats)
    assert (out / "lm_model.ckpt.index").exists() and (out / "lm_config.json").exists()
    with h.captured_output() as captured:
        assert run_pretraining.main(argv) == 0  # the rerun resumes at step 60: nothing to train
    assert "Training already finished: step 60 of 60" in captured["stdout"]

    with h.captured_output() as captured:
        assert generate.main(["gen", f"--init_checkpoint={out}", f"--vocab_file={vocab}", "--prompt=the cat",
                              "--max_new_tokens=5", "--stop_at_end_of_document=false"]) == 0
    family = get_family("causal_lm")
    model = family.build_model(family.load_config(str(out / "lm_config.json")), "pretraining")
    family.load_checkpoint(model, str(out))
    from official.nlp.tools import tokenization
    tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
    seq = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("the cat"))
    for _ in range(5):
        seq.append(int(np.argmax(np.asarray(model({"input_ids": np.array([seq], np.int32)})["logits"])[0, -1])))
    want = "the cat " + " ".join(tokenizer.convert_ids_to_tokens(seq[2:]))
    assert captured["stdout"].strip().splitlines()[-1] == want.replace(" ##", "")
    served = _serve_without_the_package(tmp_path / "export" / "1", ["the cat", "a dog sees"], tmp_path)
    assert served["text"][0] == want.replace(" ##", "")[len("the cat "):]
    ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("a dog sees"))
    logits = np.asarray(model({"input_ids": np.array([ids], np.int32)})["logits"], np.float64)[0, :-1]
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    want_score = float(np.sum(log_probs[np.arange(len(ids) - 1), ids[1:]]))
    assert served["num_tokens"][1] == len(ids) - 1
    np.testing.assert_allclose(served["log_likelihood"][1], want_score, rtol=1e-5)


# Runs in a fresh interpreter with realformer_tf unimportable (h.run_without_package);
# tensorflow_text registers the tokenizer ops.
SERVE = r"""
import json, sys
import tensorflow as tf, tensorflow_text
model = tf.saved_model.load(sys.argv[1])
prompts = json.loads(sys.argv[2])
out = model.signatures["generate"](prompt=tf.constant(prompts[:1]), max_new_tokens=tf.constant(5),
                                   temperature=tf.constant(0.0), top_k=tf.constant(0), top_p=tf.constant(1.0),
                                   seed=tf.constant(0))
score = model.signatures["score"](text=tf.constant(prompts))
print(json.dumps({"text": [t.decode() for t in out["text"].numpy()],
                  "log_likelihood": score["log_likelihood"].numpy().tolist(),
                  "num_tokens": score["num_tokens"].numpy().tolist()}))
"""


def _serve_without_the_package(path, prompts, tmp_path):
    import json

    import helpers_data as h

    return h.run_without_package(SERVE, path, json.dumps(prompts), cwd=tmp_path)


# -- convert_checkpoint.py --model_type=causal_lm ------------------------------------------
def _training_checkpoint(model, prefix):
    """`model`'s weights as a training run's checkpoint holds them (Trainer's names)."""
    from realformer_tf.training.trainer import checkpointable_weights

    return tf.train.Checkpoint(model_weights=checkpointable_weights(model)).write(prefix)


def _checkpoint_arrays(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_convert_checkpoint_writes_lm_names_and_gpt2_folders_both_ways(tmp_path):
    """A training checkpoint -> lm_model.ckpt names and -> a GPT-2 folder; that folder
    (its config.json the config) -> our names again: the same tensors every way."""
    import json

    import helpers_data as h
    from realformer_tf.checkpoints import causal_lm as lm_checkpoint

    model = CausalLMModel(config(layer_norm_eps=1e-5))
    model.build()
    ref.randomize_weights(model, 21)
    want = {name: v.numpy() for name, v in lm_checkpoint.lm_variables(model).items()}
    model.config.to_json_file(str(tmp_path / "lm_config.json"))
    trained = _training_checkpoint(model, str(tmp_path / "run" / "ckpt-1"))
    common = dict(model_type="causal_lm", bert_config_file=tmp_path / "lm_config.json")

    proc = h.run_script("convert_checkpoint.py", *h.flags(input_checkpoint=trained,
                                                          output_checkpoint=tmp_path / "lm_model.ckpt", **common))
    assert proc.returncode == 0, proc.stderr[-2000:]
    named = _checkpoint_arrays(str(tmp_path / "lm_model.ckpt"))
    assert sorted(named) == sorted(want) and all(np.array_equal(named[n], want[n]) for n in want)

    proc = h.run_script("convert_checkpoint.py", *h.flags(input_checkpoint=trained, output_format="hf",
                                                          output_checkpoint=tmp_path / "gpt2", **common))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "gpt2" / "config.json").read_text())["model_type"] == "gpt2"
    assert "warning" not in proc.stdout

    proc = h.run_script("convert_checkpoint.py", "--model_type=causal_lm", f"--input_checkpoint={tmp_path / 'gpt2'}",
                        f"--output_checkpoint={tmp_path / 'back' / 'lm_model.ckpt'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    back = _checkpoint_arrays(str(tmp_path / "back" / "lm_model.ckpt"))
    assert sorted(back) == sorted(want) and all(np.array_equal(back[n], want[n]) for n in want)


@pytest.mark.parametrize("case", ["realformer", "normformer", "already_named", "classifier"])
def test_convert_checkpoint_refuses_causal_lm_cases_in_one_line(tmp_path, case):
    """A GPT-2 folder of a variant GPT-2 does not compute, a checkpoint already under our
    names, a task the causal LM has not: one error line, nothing written."""
    import helpers_data as h
    from realformer_tf.checkpoints import causal_lm as lm_checkpoint

    model = CausalLMModel(config(**VARIANTS.get(case, {})))
    model.build()
    model.config.to_json_file(str(tmp_path / "lm_config.json"))
    output = tmp_path / "out"
    args = dict(model_type="causal_lm", bert_config_file=tmp_path / "lm_config.json", output_checkpoint=output,
                input_checkpoint=_training_checkpoint(model, str(tmp_path / "run" / "ckpt-1")))
    if case in ("realformer", "normformer"):
        args["output_format"] = "hf"
    elif case == "already_named":
        args["input_checkpoint"] = lm_checkpoint.save_lm_checkpoint(model, str(tmp_path / "lm_model.ckpt"))
    else:
        args["task"] = "classifier"
    proc = h.run_script("convert_checkpoint.py", *h.flags(**args))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-2000:]
    expected = {"realformer": "GPT-2 computes Pre-LN without residual attention or NormFormer",
                "normformer": "GPT-2 computes Pre-LN", "already_named": "already uses the causal LM's names",
                "classifier": "--model_type=causal_lm has no classifier model; its models: pretraining"}[case]
    assert expected in errors[0], errors[0]
    assert not output.exists() and not list(tmp_path.glob("out.*"))
