"""Hugging Face remote code of the causal LM variants (realformer_tf/checkpoints/hf/
remote_code/*_realformer_causal_lm.py): the folders `save_gpt2_folder(...,
allow_variant=True)` (convert_checkpoint.py --model_type=causal_lm --output_format=hf
--hf_allow_variant) writes carry it, and transformers' AutoModelForCausalLM loads them
with trust_remote_code=True and computes our logits on left-padded batches (NormFormer
with the head scale before / after the output projection and the residual scale,
Pre-LN + RealFormer with and without the running mean, RealFormer + NormFormer, Post-LN)
and our greedy text through generate(), with its key/value cache and without; the
folders read back into realformer_tf; without the opt-in the variants stay refused in
one line.

transformers copies remote code into its modules cache: here a temporary folder, never
the user's home.
"""

import json
import os
import sys

import numpy as np
import pytest

import helpers_data as h
import numpy_reference as ref
import realformer_tf
from realformer_tf.checkpoints import causal_lm as lm_checkpoint
from realformer_tf.checkpoints.hf import gpt2
from realformer_tf.errors import VariantExportError
from realformer_tf.families import get_family
from realformer_tf.models.causal_lm.config import CausalLMConfig
from realformer_tf.models.causal_lm.model import CausalLMModel
from realformer_tf.serving import decoding

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOLERANCE = 1e-4
NEW_TOKENS = 4
VOCAB, HIDDEN, HEADS, LAYERS, INNER, POSITIONS = 37, 12, 3, 3, 20, 24
VARIANTS = {
    "normformer-heads-before": dict(layer_norm_type="normformer", normformer_head_scale_position="before_projection",
                                    normformer_residual_scale=True),
    "normformer-heads-after": dict(layer_norm_type="normformer", normformer_head_scale_position="after_projection",
                                   normformer_residual_scale=True),
    "pre-ln-realformer": dict(residual_attention=True),
    "pre-ln-realformer-running-mean": dict(residual_attention=True, use_running_mean=True),
    "realformer-normformer": dict(layer_norm_type="normformer", residual_attention=True, use_running_mean=True,
                                  normformer_head_scale_position="after_projection", normformer_residual_scale=True),
    "post-ln": dict(layer_norm_type="post"),
    # fairseq's switches one by one on a Pre-LN model, and an activation GPT-2 lacks
    "pre-ln-ffn-norm-exact-gelu": dict(normformer_ffn_activation_norm=True, hidden_act="gelu_exact"),
}


@pytest.fixture(scope="module", autouse=True)
def modules_cache(hf_modules_cache):
    """transformers' copies of the remote code go to a temporary folder (conftest)."""
    return hf_modules_cache


def config(**overrides):
    values = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  intermediate_size=INNER, max_position_embeddings=POSITIONS, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, layer_norm_eps=1e-6)  # not the default: it must carry over
    return CausalLMConfig(**dict(values, **overrides))


def random_model(seed, **overrides):
    """Our causal LM with random non-trivial weights (every LayerNorm, scale and bias)."""
    model = CausalLMModel(config(**overrides))
    model.build()
    return ref.randomize_weights(model, seed)


def batches():
    """Two left-padded batches of different lengths: (ids, mask), pads 0."""
    rng = np.random.default_rng(3)
    out = []
    for length, real in ((9, (9, 6)), (5, (3, 5))):
        mask = np.array([[0] * (length - n) + [1] * n for n in real], np.int32)
        out.append(((rng.integers(1, VOCAB, (2, length)) * mask).astype(np.int32), mask))
    return out


def positions_of(mask):
    """The position ids of a left-padded batch, as decoding.generate and transformers'
    generate() count them (pads 0)."""
    return np.maximum(np.cumsum(mask, axis=1) - 1, 0)


def load(folder, auto_class="AutoModelForCausalLM", **config_overrides):
    model = getattr(transformers, auto_class).from_pretrained(folder, trust_remote_code=True, **config_overrides)
    return model.eval()


def t(array):
    return torch.tensor(np.asarray(array), dtype=torch.long)


def logit_diffs(ours, theirs):
    """max |diff| of the logits at the real positions of both batches, with the
    positions generate() gives and with the default ones (0, 1, ... on every row)."""
    diffs = {}
    for ids, mask in batches():
        real = mask.astype(bool)
        for name, positions in (("counted", positions_of(mask)), ("default", None)):
            inputs = {"input_ids": ids, "input_mask": mask}
            kwargs = {"attention_mask": t(mask)}
            if positions is not None:
                inputs["position_ids"], kwargs["position_ids"] = positions, t(positions)
            want = np.asarray(ours(inputs)["logits"], np.float64)
            with torch.no_grad():
                got = theirs(t(ids), **kwargs).logits.numpy().astype(np.float64)
            diffs[f"{name}@{ids.shape[1]}"] = float(np.max(np.abs(got - want)[real]))
    return diffs


def greedy(theirs, ids, mask, use_cache):
    with torch.no_grad():
        out = theirs.generate(t(ids), attention_mask=t(mask), max_new_tokens=NEW_TOKENS, do_sample=False,
                              pad_token_id=0, use_cache=use_cache)
    return out[:, ids.shape[1]:].numpy()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_transformers_computes_our_logits_and_greedy_text(variant, tmp_path):
    model = random_model(len(variant), **VARIANTS[variant])
    folder = lm_checkpoint.save_gpt2_folder(model, str(tmp_path / "hf"), allow_variant=True)
    theirs = load(folder)
    assert type(theirs).__name__ == "RealFormerTfCausalLMForCausalLM"
    diffs = logit_diffs(model, theirs)
    print(variant, "ours -> transformers (remote code), max |diff| of the logits:", diffs)
    assert max(diffs.values()) <= TOLERANCE, diffs
    for ids, mask in batches():
        want = decoding.generate(model, ids, mask, NEW_TOKENS, temperature=0.0)["ids"].numpy()
        assert greedy(theirs, ids, mask, use_cache=True).tolist() == want.tolist(), variant
        assert greedy(theirs, ids, mask, use_cache=False).tolist() == want.tolist(), variant


def test_the_comparison_tells_the_variants_apart(tmp_path):
    """The tolerance catches a model computed as another variant: the same folder with
    the running mean off, residual attention off, or the head scale on the other side
    of the projection gives logits far from ours."""
    model = random_model(7, **VARIANTS["realformer-normformer"])
    folder = lm_checkpoint.save_gpt2_folder(model, str(tmp_path / "hf"), allow_variant=True)
    assert max(logit_diffs(model, load(folder)).values()) <= TOLERANCE
    for wrong in (dict(use_running_mean=False), dict(residual_attention=False),
                  dict(normformer_head_scale_position="before_projection")):
        assert max(logit_diffs(model, load(folder, **wrong)).values()) > 100 * TOLERANCE, wrong


def test_cached_steps_carry_keys_and_values_only(tmp_path):
    """A prompt, then one token at a time through transformers' DynamicCache, gives the
    logits of the whole sequence at once (residual attention: each step recomputes the
    previous block's score rows of the new position, so the cache is keys and values)."""
    model = random_model(5, **VARIANTS["realformer-normformer"])
    theirs = load(lm_checkpoint.save_gpt2_folder(model, str(tmp_path / "hf"), allow_variant=True))
    ids, mask = batches()[0]
    positions = positions_of(mask)
    want = np.asarray(model({"input_ids": ids, "input_mask": mask, "position_ids": positions})["logits"])
    prompt = 6
    with torch.no_grad():
        out = theirs(t(ids[:, :prompt]), attention_mask=t(mask[:, :prompt]), position_ids=t(positions[:, :prompt]),
                     use_cache=True)
        got, cache = [out.logits.numpy()], out.cache
        for i in range(prompt, ids.shape[1]):
            out = theirs(t(ids[:, i:i + 1]), attention_mask=t(mask[:, :i + 1]), position_ids=t(positions[:, i:i + 1]),
                         cache=cache, use_cache=True)
            got.append(out.logits.numpy())
            cache = out.cache
    assert cache.get_seq_length() == ids.shape[1]
    assert len(cache.layers) == LAYERS  # one key/value pair per block, nothing else
    got = np.concatenate(got, axis=1)
    real = mask.astype(bool)
    assert np.max(np.abs(got - want)[real]) <= TOLERANCE


def test_variant_folders_carry_the_code_and_gpt2_folders_do_not(tmp_path):
    model = random_model(1, **VARIANTS["pre-ln-realformer"])
    folder = lm_checkpoint.save_gpt2_folder(model, str(tmp_path / "hf"), allow_variant=True)
    with open(os.path.join(folder, "config.json")) as f:
        written = json.load(f)
    assert written["model_type"] == "realformer_causal_lm"
    assert written["architectures"] == ["RealFormerTfCausalLMForCausalLM"]
    assert written["auto_map"] == gpt2.VARIANT_AUTO_MAP
    assert {k: written[k] for k in model.config.to_dict() if k != "model_type"} == {
        k: v for k, v in model.config.to_dict().items() if k != "model_type"}  # our fields, as they are
    from realformer_tf.checkpoints.hf import REMOTE_CODE_DIR
    for name in gpt2.REMOTE_CODE_FILES:
        with open(os.path.join(folder, name)) as f, open(os.path.join(REMOTE_CODE_DIR, name)) as g:
            code, packaged = f.read(), g.read()
        assert code == packaged, name
        assert f"Matches realformer_tf {realformer_tf.__version__} " in code, name  # the version it computes
    assert f'REALFORMER_TF_VERSION = "{realformer_tf.__version__}"' in open(
        os.path.join(folder, "configuration_realformer_causal_lm.py")).read()
    # The package never imports its remote code (it does not depend on torch).
    assert not [m for m in sys.modules if m.endswith("_realformer_causal_lm") and m.startswith("realformer_tf")]
    # AutoModel: the decoder alone, its weights found under the task class's prefix.
    with torch.no_grad():
        hidden = load(folder, "AutoModel")(t(batches()[1][0])).last_hidden_state.numpy()
    want = np.asarray(model({"input_ids": batches()[1][0]})["hidden_states"])
    assert np.max(np.abs(hidden - want)) <= TOLERANCE
    # The vanilla Pre-LN model stays a plain GPT-2 folder, allow_variant or not.
    plain = lm_checkpoint.save_gpt2_folder(random_model(2), str(tmp_path / "plain"), allow_variant=True)
    with open(os.path.join(plain, "config.json")) as f:
        plain_config = json.load(f)
    assert plain_config["model_type"] == "gpt2" and "auto_map" not in plain_config
    assert sorted(os.listdir(plain)) == ["config.json", "model.safetensors"]


def test_our_loader_reads_variant_folders_and_their_save_pretrained_copies(tmp_path):
    """load_trained from a variant folder gives the same model (config and weights);
    a folder transformers saved again ("fine-tuned" in PyTorch) reads back too."""
    model = random_model(9, **VARIANTS["realformer-normformer"])
    folder = lm_checkpoint.save_gpt2_folder(model, str(tmp_path / "hf"), allow_variant=True)
    family = get_family("causal_lm")
    loaded, loaded_config = family.load_trained(folder)
    assert loaded_config == model.config
    want = {n: v.numpy() for n, v in lm_checkpoint.lm_variables(model).items()}
    got = {n: v.numpy() for n, v in lm_checkpoint.lm_variables(loaded).items()}
    assert sorted(got) == sorted(want) and all(np.array_equal(got[n], want[n]) for n in want)

    theirs = load(folder)
    with torch.no_grad():
        theirs.transformer.ln_f.bias += 0.5  # "fine-tuned"
    theirs.save_pretrained(str(tmp_path / "saved"))
    again, again_config = family.load_trained(str(tmp_path / "saved"))
    assert again_config == model.config
    ids, mask = batches()[0]
    with torch.no_grad():
        expected = theirs(t(ids), attention_mask=t(mask)).logits.numpy()
    got = np.asarray(again({"input_ids": ids, "input_mask": mask})["logits"])
    assert np.max(np.abs(got - expected)[mask.astype(bool)]) <= TOLERANCE


def test_variants_are_refused_without_the_opt_in_in_one_line(tmp_path):
    model = random_model(4, **VARIANTS["post-ln"])
    with pytest.raises(VariantExportError, match="hf_allow_variant") as refused:
        lm_checkpoint.save_gpt2_folder(model, str(tmp_path / "api"))
    assert "\n" not in str(refused.value) and not (tmp_path / "api").exists()
    model.config.to_json_file(str(tmp_path / "lm_config.json"))
    source = lm_checkpoint.save_lm_checkpoint(model, str(tmp_path / "lm_model.ckpt"))
    args = dict(model_type="causal_lm", bert_config_file=tmp_path / "lm_config.json", input_checkpoint=source,
                output_format="hf")
    proc = h.run_script("convert_checkpoint.py", *h.flags(output_checkpoint=tmp_path / "refused", **args))
    h.one_error_line(proc, "GPT-2 computes Pre-LN without residual attention or NormFormer", "--hf_allow_variant",
                     "trust_remote_code=True")
    assert not (tmp_path / "refused").exists()

    proc = h.run_script("convert_checkpoint.py", "--hf_allow_variant",
                        *h.flags(output_checkpoint=tmp_path / "variant", **args))
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stdout.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "realformer_causal_lm" in warnings[0] and "trust_remote_code=True" in warnings[0]
    assert max(logit_diffs(model, load(str(tmp_path / "variant"))).values()) <= TOLERANCE
