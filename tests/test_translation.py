"""The translation family: the encoder-decoder against NumPy (Admin's profiled scales and
each residual-attention path), against transformers' Marian on the same weights, its
cache, beam search against an exhaustive search, the label-smoothed loss against
fairseq's formula, the data's batches, and one journey from text to served translations.

Shapes are tiny and not powers of two (hidden 12, 3 heads, intermediate 19)."""

import itertools
import json

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
import numpy_reference as ref
from realformer_tf.errors import ConfigError
from realformer_tf.models.translation.config import TranslationConfig
from realformer_tf.models.translation.model import TranslationModel
from realformer_tf.serving import translation_decoding as decoding

V, H, N, I = 23, 12, 3, 19
# name -> (residual_attention, decoder_residual_attention, cross_residual_attention, admin)
VARIANTS = {
    "post_ln": (False, None, None, False),
    "admin": (False, None, None, True),
    "admin_realformer": (True, None, None, True),
    "encoder_and_cross_paths": (True, False, True, True),
    "decoder_self_path_only": (False, True, False, False),
}


def config(**overrides):
    values = dict(vocab_size=V, hidden_size=H, num_hidden_layers=2, num_decoder_layers=3, num_attention_heads=N,
                  intermediate_size=I, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  max_position_embeddings=40)
    values.update(overrides)
    return TranslationConfig(**values)


def variant_config(name):
    own, decoder_self, cross, admin = VARIANTS[name]
    return config(residual_attention=own, decoder_residual_attention=decoder_self, cross_residual_attention=cross,
                  admin_residual_scale=admin)


def batch(seed=0, source_lengths=(9, 6, 4), target_lengths=(7, 3, 5)):
    rng = np.random.default_rng(seed)
    source = np.zeros((len(source_lengths), max(source_lengths)), np.int32)
    target = np.zeros((len(target_lengths), max(target_lengths)), np.int32)
    for row, (s, t) in enumerate(zip(source_lengths, target_lengths)):
        source[row, :s] = rng.integers(4, V, s)
        target[row, :t] = np.concatenate([[2], rng.integers(4, V, t - 1)])
    return {"source_ids": source, "target_ids": target}


@pytest.fixture(scope="module")
def models():
    """One model per variant, weights randomized; Admin's profiled on a batch first."""
    built = {}
    for name in VARIANTS:
        model = TranslationModel(variant_config(name))
        model(batch())
        ref.randomize_weights(model, seed=len(built))
        if model.config.admin_residual_scale:
            model.profile_admin(batch(seed=5))
        built[name] = model
    return built


# -- NumPy: the whole model ---------------------------------------------------------------
def sinusoids(length, width):
    """Row p: sin(p / 10000^(2i/width)) for i < width/2, then the cosines (a plain loop)."""
    table = np.zeros((length, width))
    for p in range(length):
        for i in range(width // 2):
            table[p, i] = np.sin(p / 10000 ** (2 * i / width))
            table[p, width // 2 + i] = np.cos(p / 10000 ** (2 * i / width))
    return table


def numpy_logits(model, inputs):
    """The model's logits and its three score paths, from its weights, in float64."""
    c = model.config
    table = ref._np(model.token_embeddings.embeddings)
    source, target = inputs["source_ids"], inputs["target_ids"]
    source_mask, target_mask = (source != 0).astype(np.float64), (target != 0).astype(np.float64)

    def embed(ids):
        return table[ids] * np.sqrt(c.hidden_size) + sinusoids(ids.shape[1], c.hidden_size)[None]

    paths = c.paths()
    memory, _, encoder_scores = ref.encoder_stack(
        embed(source), [ref.encoder_block_params(b) for b in model.encoder.blocks], None, attention_mask=source_mask,
        residual_attention=paths["encoder self"], num_heads=c.num_attention_heads, hidden_act="relu")
    x, self_scores, cross_scores = embed(target), None, None
    for i, block in enumerate(model.decoder.blocks):
        x, self_scores, cross_scores = ref.decoder_block(
            x, memory, ref.decoder_block_params(block), c.num_attention_heads, layer_index=i, hidden_act="relu",
            residual_attention=paths["decoder self"], cross_residual_attention=paths["cross"],
            self_attention_mask=target_mask, memory_mask=source_mask, prev_self_scores=self_scores,
            prev_cross_scores=cross_scores)
    return x @ table.T, encoder_scores[-1], self_scores, cross_scores


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_and_score_paths_equal_numpy(models, variant):
    model = models[variant]
    inputs = batch(seed=1)
    out = model(inputs)
    logits, encoder_scores, self_scores, cross_scores = numpy_logits(model, inputs)
    real = inputs["target_ids"] != 0  # padded query rows are not compared (masked keys only)
    ref.assert_close(f"translation/{variant}/logits", np.asarray(out["logits"])[real], logits[real], 2e-4)
    ref.assert_close(f"translation/{variant}/encoder", out["encoder_scores"][-1], encoder_scores, 2e-4)
    ref.assert_close(f"translation/{variant}/self", out["decoder_self_scores"][-1], self_scores, 2e-4)
    ref.assert_close(f"translation/{variant}/cross", out["cross_scores"][-1], cross_scores, 2e-4)


def test_admin_profile_sets_every_residual_scale_in_order(models):
    """Admin: omega_1 = 1 on each stack; at initialization (LayerNorms the identity)
    omega_{i+1}^2 = omega_i^2 + Var[f_i] grows with depth; every residual scale holds its
    record (the NumPy comparison above then uses them)."""
    fresh = TranslationModel(variant_config("admin_realformer"))
    for stack in fresh.profile_admin(batch(seed=5)).values():
        omegas = [r[0] for r in stack]
        assert omegas[0] == 1.0 and all(b > a for a, b in zip(omegas, omegas[1:])), omegas
    model = models["admin_realformer"]
    records = model.profile_admin(batch(seed=5))
    assert len(records["encoder"]) == 2 * 2 and len(records["decoder"]) == 3 * 3
    for stack in records.values():
        for (omega, var_in, var_out), (next_omega, _, _) in zip(stack, stack[1:]):
            assert var_out > 0 and next_omega == pytest.approx(np.sqrt(var_in + var_out))
    decoder_scales = [ref._np(getattr(block, f"{part}_residual_scale")) for block in model.decoder.blocks
                      for part in ("self_attention", "cross_attention", "ffn")]
    np.testing.assert_allclose([s[0] for s in decoder_scales], [r[0] for r in records["decoder"]], rtol=1e-6)
    with pytest.raises(ValueError, match="admin_residual_scale"):
        models["post_ln"].profile_admin(batch())


def test_post_ln_model_equals_transformers_marian(models, tmp_path):
    """The vanilla model (post-LN, no Admin or residual attention) is Marian's: written as
    a MarianMTModel folder, transformers computes the same logits on padded batches, and
    greedy decoding gives the same tokens."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from realformer_tf.checkpoints import translation as translation_checkpoint

    model = models["post_ln"]
    folder = translation_checkpoint.save_marian_folder(model, str(tmp_path / "marian"))
    theirs = transformers.MarianMTModel.from_pretrained(folder).eval()
    inputs = batch(seed=2)
    with torch.no_grad():
        logits = theirs(input_ids=torch.tensor(inputs["source_ids"], dtype=torch.long),
                        attention_mask=torch.tensor(inputs["source_ids"] != 0, dtype=torch.long),
                        decoder_input_ids=torch.tensor(inputs["target_ids"], dtype=torch.long),
                        decoder_attention_mask=torch.tensor(inputs["target_ids"] != 0, dtype=torch.long)).logits
    real = inputs["target_ids"] != 0
    ref.assert_close("translation/marian", np.asarray(model(inputs)["logits"])[real], logits.numpy()[real], 2e-5)
    source = inputs["source_ids"][:1, :9]
    ours = decoding.greedy(model, source, max_extra_length=3)["ids"].numpy()[0]
    with torch.no_grad():
        generated = theirs.generate(torch.tensor(source, dtype=torch.long), num_beams=1, do_sample=False,
                                    max_new_tokens=len(ours), min_new_tokens=len(ours), eos_token_id=None,
                                    forced_eos_token_id=None, decoder_start_token_id=2)[0, 1:].numpy()
    np.testing.assert_array_equal(ours, generated[:len(ours)])


def test_marian_folder_refuses_what_marian_does_not_compute(models, tmp_path):
    from realformer_tf.checkpoints import translation as translation_checkpoint
    from realformer_tf.errors import VariantExportError

    with pytest.raises(VariantExportError, match="residual attention, Admin's residual scales"):
        translation_checkpoint.save_marian_folder(models["admin_realformer"], str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()


# -- decoding -------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["admin_realformer", "encoder_and_cross_paths"])
def test_cached_steps_equal_recomputing(models, variant):
    """Decoding one position at a time on the cache gives the full forward's logits."""
    model = models[variant]
    inputs = batch(seed=3, target_lengths=(6, 6, 6))
    full = np.asarray(model(inputs)["logits"])
    source_mask = inputs["source_ids"] != 0
    memory = model.encode(inputs["source_ids"])
    cache = model.empty_cache(3)
    for t in range(6):
        step = model.decode(inputs["target_ids"][:, t:t + 1], memory, source_mask, cache=cache)
        cache = step["cache"]
        ref.assert_close(f"cache/{variant}/{t}", step["logits"][:, 0], full[:, t], 1e-4)


def test_beam_of_one_is_greedy_and_greedy_is_the_argmax_chain(models):
    model = models["admin_realformer"]
    source = batch(seed=4)["source_ids"]
    greedy = decoding.greedy(model, source, max_extra_length=2)
    beam = decoding.beam_search(model, source, beam_size=1, alpha=0.0, max_extra_length=2)
    np.testing.assert_array_equal(greedy["ids"].numpy(), beam["ids"].numpy())
    for row in range(3):
        target = [2]
        for _ in range(greedy["ids"].shape[1]):
            logits = model({"source_ids": source[row:row + 1], "target_ids": np.array([target], np.int32)})["logits"]
            allowed = np.where(np.isin(np.arange(V), [0, 2]), -np.inf, np.asarray(logits)[0, -1])  # not <pad>, <s>
            target.append(int(np.argmax(allowed)))
            if target[-1] == 3:
                break
        got = greedy["ids"].numpy()[row].tolist()
        assert got[:len(target) - 1] == target[1:] and not any(got[len(target) - 1:])


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_finds_the_exhaustive_best(alpha):
    """With a beam wider than every hypothesis, the search returns the best of all
    sequences that end in </s> within the length limit, under GNMT's length penalty
    ((5 + length) / 6) ** alpha: enumerated and scored with full forward passes, the
    probabilities over the tokens a translation may hold (not <pad> 0 or <s> 2)."""
    model = TranslationModel(config(vocab_size=6, num_decoder_layers=2, residual_attention=True))
    source = np.array([[4, 3]], np.int32)
    model({"source_ids": source, "target_ids": source})
    ref.randomize_weights(model, seed=11)
    limit = 3  # = source length 2 + max_extra_length 1
    best, best_score = None, -np.inf
    for length in range(1, limit + 1):
        for body in itertools.product((1, 4, 5), repeat=length - 1):
            sequence = list(body) + [3]
            target = np.array([[2] + sequence[:-1]], np.int32)
            logits = np.asarray(model({"source_ids": source, "target_ids": target})["logits"], np.float64)[0]
            logits[:, [0, 2]] = -np.inf
            log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
            score = sum(log_probs[t, token] for t, token in enumerate(sequence)) / ((5 + length) / 6) ** alpha
            if score > best_score:
                best, best_score = sequence, score
    out = decoding.beam_search(model, source, beam_size=6 ** limit, alpha=alpha, max_extra_length=1)
    assert out["ids"].numpy()[0].tolist()[:len(best)] == best
    np.testing.assert_allclose(out["score"].numpy()[0], best_score, rtol=1e-4)


def test_mixed_bfloat16_model_and_searches(models):
    """Under mixed_bfloat16 the logits stay float32 and near the float32 model's on the
    same weights, and both searches run (Model Garden's holds its cache in float32)."""
    model = models["admin_realformer"]
    half = TranslationModel(model.config, dtype="mixed_bfloat16")
    inputs = batch(seed=10)
    half(inputs)
    for mine, theirs in zip(half.weights, model.weights):
        mine.assign(theirs)
    logits = half(inputs)["logits"]
    real = inputs["target_ids"] != 0
    assert logits.dtype == tf.float32
    np.testing.assert_allclose(np.asarray(logits)[real], np.asarray(model(inputs)["logits"])[real], atol=0.1)
    beam = decoding.beam_search(half, inputs["source_ids"], beam_size=3, max_extra_length=2)
    greedy = decoding.greedy(half, inputs["source_ids"], max_extra_length=2)
    assert beam["ids"].shape[0] == greedy["ids"].shape[0] == 3 and np.all(np.isfinite(beam["score"].numpy()))


# -- training pieces ------------------------------------------------------------------------
def test_label_smoothed_loss_is_fairseqs_formula():
    from realformer_tf.jobs.tasks.translation import label_smoothed_sums

    rng = np.random.default_rng(7)
    logits = rng.normal(size=(2, 5, V)) * 3
    labels = rng.integers(1, V, (2, 5))
    labels[1, 3:] = 0
    sums = label_smoothed_sums(tf.constant(labels), tf.constant(logits, tf.float32), pad_id=0, epsilon=0.1)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    want_loss = want_nll = 0.0
    for b, t in zip(*np.nonzero(labels)):
        nll, smooth = -log_probs[b, t, labels[b, t]], -log_probs[b, t].sum()
        eps_i = 0.1 / (V - 1)  # fairseq's label_smoothed_nll_loss
        want_loss += (1.0 - 0.1 - eps_i) * nll + eps_i * smooth
        want_nll += nll
    assert float(sums["loss"][1]) == 8
    np.testing.assert_allclose(float(sums["loss"][0]), want_loss, rtol=1e-5)
    np.testing.assert_allclose(float(sums["nll"][0]), want_nll, rtol=1e-5)


def test_batches_cover_every_pair_once_within_max_tokens_and_resume_exactly():
    from realformer_tf.data import translation as data

    rng = np.random.default_rng(8)
    examples = [{"source_ids": np.arange(4, 4 + n, dtype=np.int32), "target_ids": np.ones(m, np.int32),
                 "target_labels": np.ones(m, np.int32)} for n, m in rng.integers(1, 30, (97, 2))]
    plan = data.plan_batches(examples, max_tokens=64, shuffle_seed=3)
    assert sorted(i for b in plan for i in b) == list(range(97))
    for indices in plan:
        padded = data.pad_batch(examples, indices, pad_id=0)
        longest = max(padded["source_ids"].shape[1], padded["target_ids"].shape[1])
        assert len(indices) * data.BUCKET_WIDTH * -(-longest // data.BUCKET_WIDTH) <= 64 or len(indices) == 1
    static = data.plan_batches(examples, max_tokens=64, shuffle_seed=3, static_shapes=True)
    assert sorted(i for b in static for i in b) == list(range(97))
    shapes = {}
    for indices in static:  # under XLA: one shape per power-of-two length
        padded = data.pad_batch(examples, indices, pad_id=0, max_tokens=64)
        length = padded["source_ids"].shape[1]
        assert length in (8, 16, 32) and padded["target_ids"].shape == padded["source_ids"].shape
        assert shapes.setdefault(length, padded["source_ids"].shape) == padded["source_ids"].shape
        assert not padded["target_labels"][len(indices):].any()  # the filler rows are all padding
    dataset_fn = data.make_dataset_fn(examples, 64, 0, is_training=True, seed=3)
    whole = [b["source_ids"].numpy() for b in dataset_fn(None).take(len(plan) + 5)]
    resumed = [b["source_ids"].numpy() for b in dataset_fn(None, start_step=len(plan) - 2).take(7)]
    for a, b in zip(whole[len(plan) - 2:], resumed):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("values, message", [
    ({"model_type": "causal_lm"}, "model_type must be 'translation'"),
    ({"eos_id": 40}, "eos_id=40 is outside the vocabulary"),
    ({"bos_id": 0}, "must differ"),
    ({"position_embedding": "rotary"}, "position_embedding='rotary' is not one of"),
    ({"admin_residual_scale": True, "layer_norm_type": "pre"}, "admin_residual_scale"),
    ({"cross_residual_attention": "yes"}, "cross_residual_attention must be true, false or null"),
])
def test_config_errors_name_the_field(values, message):
    with pytest.raises(ConfigError, match=message):
        config(vocab_size=40, **values)


def test_config_file_round_trip_and_bert_config_refused(tmp_path):
    c = variant_config("encoder_and_cross_paths")
    path = tmp_path / "translation_config.json"
    c.to_json_file(str(path))
    assert TranslationConfig.from_json_file(str(path)) == c
    assert c.describe().startswith("Translation, Admin: residual attention on encoder self, cross, post-LN")
    with pytest.raises(ConfigError, match="is a BERT"):
        TranslationConfig.from_dict(h.tiny_config_dict())


def test_keras_file_round_trip(models, tmp_path):
    import keras

    model = models["admin_realformer"]
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    inputs = batch(seed=9)
    np.testing.assert_array_equal(np.asarray(loaded(inputs)["logits"]), np.asarray(model(inputs)["logits"]))


# -- the journey ----------------------------------------------------------------------------
EN = "the a man woman dog cat house river king city sees finds loves takes old young big small red green".split()
ES = "el un hombre mujer perro gato casa río rey ciudad ve encuentra ama toma viejo joven grande pequeño rojo verde"


def write_toy_corpus(folder, split, count, seed):
    """A word-for-word English -> Spanish toy corpus (learnable in a few hundred steps)."""
    words, rng = dict(zip(EN, ES.split())), np.random.default_rng(seed)
    english, spanish = [], []
    for _ in range(count):
        sentence = [EN[i] for i in rng.integers(0, len(EN), rng.integers(3, 8))]
        english.append(" ".join(sentence).capitalize() + ".")
        spanish.append(" ".join(words[w] for w in sentence).capitalize() + ".")
    (folder / f"{split}.en").write_text("\n".join(english) + "\n", encoding="utf-8")
    (folder / f"{split}.es").write_text("\n".join(spanish) + "\n", encoding="utf-8")
    return spanish


@pytest.mark.slow
def test_journey_parallel_text_to_served_translations(tmp_path):
    """make_vocab.py (a joint SentencePiece model) -> run_translation.py (Admin +
    RealFormer on the three paths: train, checkpoint averaging, dev BLEU, predict, export)
    -> the SavedModel serves the same translations without the package; the reported
    BLEU is sacreBLEU's of the written translations; a bad corpus is one error line."""
    import sacrebleu

    from realformer_tf.app import make_vocab

    write_toy_corpus(tmp_path, "train", 2500, seed=1)
    references = write_toy_corpus(tmp_path, "dev", 40, seed=2)
    assert make_vocab.main(["mv", f"--input_file={tmp_path}/train.en,{tmp_path}/train.es", "--vocab_size=100",
                            "--vocab_type=sentencepiece", "--do_lower_case=False",
                            f"--output_file={tmp_path}/spm"]) == 0
    (tmp_path / "config.json").write_text(json.dumps(dict(
        model_type="translation", vocab_size=100, hidden_size=32, num_hidden_layers=2, num_decoder_layers=2,
        num_attention_heads=4, intermediate_size=64, residual_attention=True, admin_residual_scale=True,
        attention_probs_dropout_prob=0.0, max_position_embeddings=64)))
    out = tmp_path / "out"
    common = [f"--bert_config_file={tmp_path}/config.json", f"--spm_model_file={tmp_path}/spm.model",
              f"--output_dir={out}", "--max_seq_length=48", "--max_tokens=1024", "--seed=1"]
    proc = h.run_script("run_translation.py", *common, "--do_train", "--do_eval", "--do_predict",
                        f"--train_source_file={tmp_path}/train.en", f"--train_target_file={tmp_path}/train.es",
                        f"--eval_source_file={tmp_path}/dev.en", f"--eval_target_file={tmp_path}/dev.es",
                        f"--predict_source_file={tmp_path}/dev.en", f"--predict_target_file={tmp_path}/dev.es",
                        "--num_train_steps=1000", "--num_warmup_steps=100", "--learning_rate=0.003",
                        "--iterations_per_loop=250", "--save_checkpoints_steps=250", "--average_last_checkpoints=2",
                        f"--export_dir={tmp_path}/export", "--export_beam_sizes=1,4")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Admin: residual scales profiled on the first batch" in proc.stdout
    assert "Averaged 2 checkpoints: ckpt-750, ckpt-1000" in proc.stdout
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
    translations = (out / "translations.txt").read_text(encoding="utf-8").splitlines()
    bleu = sacrebleu.corpus_bleu(translations, [references]).score
    assert abs(float(results["predict_bleu"]) - bleu) < 1e-9 and abs(float(results["eval_bleu"]) - bleu) < 1e-9
    assert bleu > 50, (bleu, translations[:3])  # learned: an untrained model scores ~0
    assert float(results["eval_perplexity"]) == pytest.approx(np.exp(float(results["eval_nll"])))
    proc = h.run_script("experiments/translation_curve.py", f"--run_dir={out}", f"--spm_model_file={tmp_path}/spm.model",
                        f"--source_file={tmp_path}/dev.en", f"--reference_file={tmp_path}/dev.es", "--max_sentences=0",
                        "--beam_size=4", f"--output={tmp_path}/curve")
    assert proc.returncode == 0, proc.stderr[-3000:]
    curve = {p["checkpoint"]: p["bleu"] for p in json.loads((tmp_path / "curve.json").read_text())["points"]}
    assert list(curve) == ["step 250", "step 500", "step 750", "step 1000", "averaged_model.ckpt",
                           "translation_model.ckpt"]
    assert curve["averaged_model.ckpt"] == pytest.approx(bleu) and curve["step 250"] < curve["step 1000"]
    served = _serve_without_the_package(tmp_path / "export" / "1", (tmp_path / "dev.en").read_text().splitlines()[:4],
                                        tmp_path)
    assert served == translations[:4]

    (tmp_path / "short.es").write_text("Uno.\n", encoding="utf-8")
    proc = h.run_script("run_translation.py", *common[:2], f"--output_dir={tmp_path}/bad", "--do_train",
                        "--max_seq_length=48",
                        f"--train_source_file={tmp_path}/dev.en", f"--train_target_file={tmp_path}/short.es")
    h.one_error_line(proc, "dev.en has 40 lines but", "short.es has 1")
    assert not (tmp_path / "bad").exists()


# Runs in a fresh interpreter with realformer_tf unimportable (h.run_without_package);
# tensorflow_text registers the SentencePiece ops.
SERVE = r"""
import json, sys
import tensorflow as tf, tensorflow_text
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["translate"](source=tf.constant(json.loads(sys.argv[2])), beam_size=tf.constant(4))
print(json.dumps([t.decode() for t in out["translation"].numpy()], ensure_ascii=False))
"""


def _serve_without_the_package(path, sources, tmp_path):
    return h.run_without_package(SERVE, path, json.dumps(sources), cwd=tmp_path)

# -- convert_checkpoint.py --model_type=translation ----------------------------------------
def _training_checkpoint(model, prefix):
    """`model`'s weights as a training run's checkpoint holds them (Trainer's names)."""
    from realformer_tf.training.trainer import checkpointable_weights

    return tf.train.Checkpoint(model_weights=checkpointable_weights(model)).write(prefix)


def _marian_logits(folder, inputs):
    """transformers' MarianMTModel from `folder`: its logits on a padded batch."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    theirs = transformers.MarianMTModel.from_pretrained(folder).eval()
    as_tensor = lambda ids: torch.tensor(ids, dtype=torch.long)  # noqa: E731
    with torch.no_grad():
        return theirs(input_ids=as_tensor(inputs["source_ids"]), attention_mask=as_tensor(inputs["source_ids"] != 0),
                      decoder_input_ids=as_tensor(inputs["target_ids"]),
                      decoder_attention_mask=as_tensor(inputs["target_ids"] != 0)).logits.numpy()


def test_convert_checkpoint_writes_translation_names_and_a_marian_folder(models, tmp_path):
    """A training checkpoint of the vanilla model -> translation_model.ckpt names (the
    same tensors) -> a Marian folder (--output_format=hf) that transformers'
    MarianMTModel loads and computes our logits with; --task defaults to the family's
    one model."""
    pytest.importorskip("transformers")
    from realformer_tf.checkpoints import translation as translation_checkpoint

    model = models["post_ln"]
    want = {name: v.numpy() for name, v in translation_checkpoint.translation_variables(model).items()}
    model.config.to_json_file(str(tmp_path / "translation_config.json"))
    trained = _training_checkpoint(model, str(tmp_path / "run" / "ckpt-1"))
    common = dict(model_type="translation", bert_config_file=tmp_path / "translation_config.json")

    proc = h.run_script("convert_checkpoint.py", *h.flags(input_checkpoint=trained,
                                                          output_checkpoint=tmp_path / "translation_model.ckpt",
                                                          **common))
    assert proc.returncode == 0, proc.stderr[-2000:]
    reader = tf.train.load_checkpoint(str(tmp_path / "translation_model.ckpt"))
    named = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    assert sorted(named) == sorted(want) and all(np.array_equal(named[n], want[n]) for n in want)

    proc = h.run_script("convert_checkpoint.py", *h.flags(input_checkpoint=tmp_path / "translation_model.ckpt",
                                                          output_format="hf", output_checkpoint=tmp_path / "marian",
                                                          **common))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning" not in proc.stdout and "Converted" in proc.stdout
    assert json.loads((tmp_path / "marian" / "config.json").read_text())["model_type"] == "marian"
    inputs = batch(seed=6)
    real = inputs["target_ids"] != 0
    ref.assert_close("convert/marian", np.asarray(model(inputs)["logits"])[real],
                     _marian_logits(str(tmp_path / "marian"), inputs)[real], 2e-5)


@pytest.mark.parametrize("case", ["admin", "admin_realformer", "decoder_self_path_only", "already_named",
                                  "pretraining_task", "marian_input"])
def test_convert_checkpoint_refuses_translation_cases_in_one_line(models, tmp_path, case):
    """A Marian folder of a model Marian does not compute (Admin's scales, residual
    attention on any path; --hf_allow_variant or not), a checkpoint already under our
    names, a task the family has not, a Marian folder as the input (written, not read):
    one error line, nothing written."""
    from realformer_tf.checkpoints import translation as translation_checkpoint

    model = models["post_ln" if case in ("already_named", "pretraining_task", "marian_input") else case]
    model.config.to_json_file(str(tmp_path / "translation_config.json"))
    output = tmp_path / "out"
    trained = _training_checkpoint(model, str(tmp_path / "run" / "ckpt-1"))
    args = dict(model_type="translation", bert_config_file=tmp_path / "translation_config.json",
                output_checkpoint=output, input_checkpoint=trained)
    if case == "already_named":
        args["input_checkpoint"] = translation_checkpoint.save_translation_checkpoint(
            model, str(tmp_path / "translation_model.ckpt"))
    elif case == "pretraining_task":
        args["task"] = "pretraining"
    elif case == "marian_input":
        del args["bert_config_file"]
        args["input_checkpoint"] = translation_checkpoint.save_marian_folder(model, str(tmp_path / "marian"))
    else:
        args.update(output_format="hf", hf_allow_variant=case == "admin")
    proc = h.run_script("convert_checkpoint.py", *h.flags(**args))
    expected = {"admin": "this model has Admin's residual scales, which transformers' MarianMTModel would compute",
                "admin_realformer": "this model has residual attention, Admin's residual scales",
                "decoder_self_path_only": "this model has residual attention,",
                "already_named": "already uses the translation model's names",
                "pretraining_task": "--model_type=translation has no pretraining model; its models: translation",
                "marian_input": "marian is a folder, not a translation config file"}[case]
    marian = "hf" in args.values()
    h.one_error_line(proc, expected, *(["Marian computes a post-LN Transformer without residual attention"] * marian))
    assert not output.exists() and not list(tmp_path.glob("out.*"))
