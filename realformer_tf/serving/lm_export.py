"""A causal LM as a SavedModel that takes raw text: `generate` and `score` signatures,
the tokenizer in the graph, loadable without this package (TensorFlow and
tensorflow-text only).

- `generate(prompt string [B], max_new_tokens int32, temperature float32, top_k int32,
  top_p float32, seed int32)` -> `text` string [B] (the continuation), `ids` int32
  [B, max_new_tokens] and `length` int32 [B]: `decoding.generate`, as `generate.py`
  runs it (temperature 0: greedy; a row stops after the end-of-document token, which
  the text leaves out).
- `score(text string [B])` -> `log_likelihood` float32 [B], the sum of log p(token |
  the tokens before it) over every token but the first, and `num_tokens` int32 [B]
  (the tokens scored).

The text is tokenized as the data was made: WordPiece with the original BERT
tokenizer's rules (`text_encoder.BertTextEncoder`) or SentencePiece (tensorflow-text's
op on the model's proto, kept in the graph). A prompt that does not fit the model's
positions with `max_new_tokens` more, an empty prompt and sampling options out of
range fail the request with an InvalidArgumentError that says so.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from realformer_tf.data.lm_tokenizer import WORDPIECE_END_OF_DOCUMENT
from realformer_tf.errors import ExportError, require_tensorflow_backend
from realformer_tf.serving import decoding
from realformer_tf.serving.export import write_version, write_vocab_asset
from realformer_tf.serving.text_encoder import BertTextEncoder, read_vocab


class WordPieceCodec(tf.Module):
    """WordPiece text <-> ids in the graph (the vocab an asset)."""

    def __init__(self, vocab_path, tokens, do_lower_case, max_length):
        super().__init__(name="wordpiece")
        self.encoder = BertTextEncoder(vocab_path, do_lower_case, max_length)
        self.tokens = tf.constant(tokens)
        self.eos_id = tokens.index(WORDPIECE_END_OF_DOCUMENT)

    def encode(self, texts):
        pieces = self.encoder.tokenize(texts)
        return tf.cast(pieces.with_flat_values(self.encoder.vocab_table.lookup(pieces.flat_values)), tf.int32)

    def decode(self, ids):
        """Ragged ids -> text: WordPieces joined with spaces, "##" pieces onto the word
        before (as `lm_tokenizer.join_wordpieces`)."""
        words = tf.strings.reduce_join(tf.gather(self.tokens, ids), axis=-1, separator=" ")
        return tf.strings.regex_replace(words, " ##", "")


class SentencePieceCodec(tf.Module):
    """SentencePiece text <-> ids in the graph (the model proto a constant)."""

    def __init__(self, proto, eos_id):
        super().__init__(name="sentencepiece")
        self.tokenizer = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)
        self.eos_id = int(eos_id)

    def encode(self, texts):
        return self.tokenizer.tokenize(texts)

    def decode(self, ids):
        return self.tokenizer.detokenize(ids)


def left_padded(ragged):
    """Ragged ids [B, (T)] -> (ids, mask) int32 [B, longest], each row at the right end."""
    padded = ragged.to_tensor()
    lengths = tf.cast(ragged.row_lengths(), tf.int32)
    longest = tf.shape(padded)[1]
    source = tf.range(longest)[None, :] - (longest - lengths)[:, None]
    real = source >= 0
    ids = tf.where(real, tf.gather(padded, tf.maximum(source, 0), batch_dims=1), 0)
    return ids, tf.cast(real, tf.int32)


class CausalLMServing(tf.Module):
    """The model, its text codec and the two signatures."""

    def __init__(self, model, codec):
        super().__init__(name="causal_lm_serving")
        self.model, self.codec = model, codec
        self.max_positions = model.config.max_position_embeddings

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="prompt"), tf.TensorSpec([], tf.int32, name="max_new_tokens"),
        tf.TensorSpec([], tf.float32, name="temperature"), tf.TensorSpec([], tf.int32, name="top_k"),
        tf.TensorSpec([], tf.float32, name="top_p"), tf.TensorSpec([], tf.int32, name="seed")])
    def generate(self, prompt, max_new_tokens, temperature, top_k, top_p, seed):
        ragged = self.codec.encode(prompt)
        lengths = tf.cast(ragged.row_lengths(), tf.int32)
        checks = [
            tf.debugging.assert_positive(lengths, message="a prompt has no token"),
            tf.debugging.assert_less_equal(
                tf.reduce_max(lengths) + max_new_tokens, self.max_positions,
                message=f"a prompt and max_new_tokens exceed the model's {self.max_positions} positions"),
            tf.debugging.assert_positive(max_new_tokens, message="max_new_tokens must be 1 or more"),
            tf.debugging.assert_greater_equal(temperature, 0.0, message="temperature must be >= 0 (0: greedy)"),
            tf.debugging.assert_greater_equal(top_k, 0, message="top_k must be >= 0 (0: off)"),
            tf.debugging.assert_greater(top_p, 0.0, message="top_p must be in (0, 1]"),
            tf.debugging.assert_less_equal(top_p, 1.0, message="top_p must be in (0, 1]"),
        ]
        with tf.control_dependencies(checks):
            ids, mask = left_padded(ragged)
        out = decoding.generate(self.model, ids, mask, max_new_tokens, temperature, top_k, top_p, seed,
                                eos_id=self.codec.eos_id)
        kept = out["length"] - tf.cast(tf.reduce_any(tf.equal(out["ids"], self.codec.eos_id), axis=1), tf.int32)
        text = self.codec.decode(tf.RaggedTensor.from_tensor(out["ids"], lengths=kept))
        return {"text": text, "ids": out["ids"], "length": out["length"]}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def score(self, text):
        ragged = self.codec.encode(text)
        with tf.control_dependencies([tf.debugging.assert_less_equal(
                tf.cast(tf.reduce_max(ragged.row_lengths()), tf.int32), self.max_positions,
                message=f"a text exceeds the model's {self.max_positions} positions")]):
            ids = ragged.to_tensor()
        mask = tf.cast(tf.sequence_mask(ragged.row_lengths(), tf.shape(ids)[1]), tf.int32)
        logits = self.model({"input_ids": ids, "input_mask": mask}, training=False)["logits"][:, :-1]
        log_probs = tf.gather(tf.nn.log_softmax(logits), ids[:, 1:], batch_dims=2)
        weights = tf.cast(mask[:, 1:], tf.float32)
        return {"log_likelihood": tf.reduce_sum(log_probs * weights, axis=1),
                "num_tokens": tf.cast(tf.reduce_sum(weights, axis=1), tf.int32)}


def export_causal_lm(model, export_dir, *, tokenizer, vocab_file=None, spm_model_file=None, do_lower_case=True,
                     version=None):
    """Writes `model` (a built `CausalLMModel` with its weights) as
    `export_dir/<version>/` with the `generate` and `score` signatures; returns that
    path. `tokenizer` is the `lm_tokenizer.LmTokenizer` of `vocab_file` or
    `spm_model_file` (checked against the model's vocab_size first)."""
    require_tensorflow_backend("SavedModel export")
    config = model.config
    tokenizer.check_fits(config.vocab_size, "the model's config")
    info = {"task": "generate", "model_type": "causal_lm", "model": config.describe(),
            "causal_lm_config": config.to_dict(), "tokenizer": tokenizer.description.split(" ")[0],
            "do_lower_case": bool(do_lower_case)}

    def save(path, local):
        if vocab_file:
            tokens = read_vocab(vocab_file, config.vocab_size)
            codec = WordPieceCodec(write_vocab_asset(tokens, local), tokens, do_lower_case,
                                   config.max_position_embeddings)
        else:
            with tf.io.gfile.GFile(spm_model_file, "rb") as f:
                codec = SentencePieceCodec(f.read(), tokenizer.eos_id)
        serving = CausalLMServing(model, codec)
        functions = {"generate": serving.generate.get_concrete_function(),
                     "score": serving.score.get_concrete_function()}
        tf.saved_model.save(serving, path, signatures=functions)
        return sorted(functions)

    if bool(vocab_file) == bool(spm_model_file):
        raise ExportError("give exactly one of vocab_file (WordPiece) and spm_model_file (SentencePiece)")
    return write_version(export_dir, version, info, save)
