"""Generates text with a causal language model (run_pretraining.py --model_type=causal_lm).

  python generate.py --init_checkpoint=/tmp/lm --vocab_file=vocab.txt \
    --prompt="and god said" --max_new_tokens=40                       # greedy
  python generate.py --init_checkpoint=/tmp/lm --vocab_file=vocab.txt \
    --prompt_file=prompts.txt --temperature=0.8 --top_k=40 --top_p=0.95 --seed=1

--init_checkpoint is a run's output_dir (its lm_model.ckpt, else its latest training
checkpoint) or a checkpoint prefix; the config is the lm_config.json beside it unless
--bert_config_file says otherwise. Decoding uses a key/value cache; with residual
attention each step threads the new position's score rows through the layers. Each
prompt (--prompt, or one per line of --prompt_file) is printed with its continuation.
A prompt is refused when it and --max_new_tokens do not fit in the model's positions
(max_position_embeddings): nothing is truncated.
"""

import tensorflow as tf
from absl import flags

from realformer_tf import app
from realformer_tf.data.lm_tokenizer import LmTokenizer
from realformer_tf.errors import InputError, UsageError
from realformer_tf.families.causal_lm import CAUSAL_LM
from realformer_tf.serving import decoding


def define_flags(fv):
    """The program's flags on the FlagValues `fv`."""
    flags.DEFINE_string("init_checkpoint", None, "A causal LM run's output_dir, or a checkpoint prefix.", flag_values=fv)
    flags.DEFINE_string("bert_config_file", None, "The causal LM config (default: lm_config.json beside "
                        "--init_checkpoint).", flag_values=fv)
    flags.DEFINE_string("vocab_file", None, "The WordPiece vocab the model was trained with.", flag_values=fv)
    flags.DEFINE_string("spm_model_file", None, "The SentencePiece model it was trained with (instead of "
                        "--vocab_file).", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "WordPiece: whether the training text was lower-cased.", flag_values=fv)
    flags.DEFINE_string("prompt", None, "The text to continue.", flag_values=fv)
    flags.DEFINE_string("prompt_file", None, "A file of prompts, one per line (instead of --prompt).", flag_values=fv)
    flags.DEFINE_integer("max_new_tokens", 50, "Tokens to generate per prompt.", flag_values=fv)
    flags.DEFINE_float("temperature", 0.0, "0: greedy (the most likely token); > 0: sample at this temperature.",
                       flag_values=fv)
    flags.DEFINE_integer("top_k", 0, "Sample from the k most likely tokens only (0: all).", flag_values=fv)
    flags.DEFINE_float("top_p", 1.0, "Sample from the smallest set of tokens of this total probability (1: all).",
                       flag_values=fv)
    flags.DEFINE_integer("seed", 0, "Seed of the sampling: the same seed gives the same text.", flag_values=fv)
    flags.DEFINE_bool("stop_at_end_of_document", True, "Stop a prompt's continuation at the end-of-document "
                      "token ([SEP] or </s>).", flag_values=fv)


def read_prompts(prompt, prompt_file):
    """The prompts of exactly one of --prompt and --prompt_file (its non-empty lines)."""
    if bool(prompt) == bool(prompt_file):
        raise UsageError("give exactly one of --prompt and --prompt_file")
    if prompt:
        return [prompt]
    if not tf.io.gfile.exists(prompt_file):
        raise InputError(f"--prompt_file {prompt_file} does not exist")
    with tf.io.gfile.GFile(prompt_file) as f:
        prompts = [line.strip() for line in f if line.strip()]
    if not prompts:
        raise InputError(f"--prompt_file {prompt_file} has no prompt (no non-empty line)")
    return prompts


def encode_prompts(prompts, tokenizer, config, max_new_tokens):
    """Token ids of each prompt, each refused in one line when it is empty or does not
    fit the model's positions with `max_new_tokens` more."""
    encoded = []
    for number, prompt in enumerate(prompts, 1):
        ids = tokenizer.encode(prompt)
        where = f"prompt {number}" if len(prompts) > 1 else "the prompt"
        if not ids:
            raise InputError(f"{where} ({prompt[:40]!r}) has no token")
        if len(ids) + max_new_tokens > config.max_position_embeddings:
            raise InputError(f"{where} has {len(ids)} tokens; with --max_new_tokens={max_new_tokens} that exceeds "
                             f"the model's {config.max_position_embeddings} positions: shorten it or lower "
                             "--max_new_tokens")
        encoded.append(ids)
    return encoded


def run(f):
    """Generation from the parsed flags `f`."""
    if not f.init_checkpoint:
        raise UsageError("--init_checkpoint is required (a causal LM run's output_dir or a checkpoint)")
    decoding.check_sampling(f.temperature, f.top_k, f.top_p, f.max_new_tokens)
    prompts = read_prompts(f.prompt, f.prompt_file)
    tokenizer = LmTokenizer.from_files(f.vocab_file, f.spm_model_file, f.do_lower_case)
    model, config = CAUSAL_LM.load_trained(f.init_checkpoint, f.bert_config_file)
    tokenizer.check_fits(config.vocab_size, "the model's config")
    print(config.describe(), flush=True)
    ids, mask = decoding.left_pad(encode_prompts(prompts, tokenizer, config, f.max_new_tokens))
    generate = tf.function(lambda i, m: decoding.generate(
        model, i, m, f.max_new_tokens, f.temperature, f.top_k, f.top_p, f.seed,
        eos_id=tokenizer.eos_id if f.stop_at_end_of_document else -1))
    out = generate(tf.constant(ids), tf.constant(mask))
    for prompt, new, length in zip(prompts, out["ids"].numpy(), out["length"].numpy()):
        continuation = [t for t in new[:length] if t != tokenizer.eos_id]
        print(f"{prompt} {tokenizer.decode(continuation)}".strip(), flush=True)


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run)
