"""A translation model as a SavedModel that takes raw text: one `translate` signature,
the SentencePiece model in the graph, loadable without this package (TensorFlow and
tensorflow-text only).

- `translate(source string [B])` -> `translation` string [B] and `score` float32 [B]
  (the hypothesis' log-probability over GNMT's length penalty): beam search
  (`translation_decoding.beam_search`, beam 1: greedy) with the settings it was
  exported with, recorded in the version's export_info.json.

A source longer than the model's positions is cut to fit (with its </s>), as
`run_translation.py --do_predict` does.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from realformer_tf.errors import require_tensorflow_backend
from realformer_tf.serving import translation_decoding
from realformer_tf.serving.export import write_version


class TranslationServing(tf.Module):
    """The model, its SentencePiece model and the `translate` signature."""

    def __init__(self, model, spm_proto, beam_size, alpha, max_extra_length):
        super().__init__(name="translation_serving")
        self.model = model
        self.tokenizer = tf_text.SentencepieceTokenizer(model=spm_proto, out_type=tf.int32)
        self.beam_size, self.alpha, self.max_extra_length = beam_size, alpha, max_extra_length

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="source")])
    def translate(self, source):
        config = self.model.config
        pieces = self.tokenizer.tokenize(source)[:, :config.max_position_embeddings - 1]
        eos = tf.fill([tf.shape(source)[0], 1], config.eos_id)
        ids = tf.concat([pieces, tf.RaggedTensor.from_tensor(eos)], axis=1).to_tensor(config.pad_id)
        if self.beam_size == 1:
            out = translation_decoding.greedy(self.model, ids, max_extra_length=self.max_extra_length)
            out["score"] = out.pop("log_prob")
        else:
            out = translation_decoding.beam_search(self.model, ids, beam_size=self.beam_size, alpha=self.alpha,
                                                   max_extra_length=self.max_extra_length)
        found = tf.equal(out["ids"], config.eos_id)
        lengths = tf.where(tf.reduce_any(found, axis=1), tf.argmax(tf.cast(found, tf.int32), axis=1, output_type=tf.int32),
                           tf.shape(out["ids"])[1])
        text = self.tokenizer.detokenize(tf.RaggedTensor.from_tensor(out["ids"], lengths=lengths))
        return {"translation": text, "score": out["score"]}


def export_translation_model(model, export_dir, *, spm_model_file, beam_size=4, alpha=0.6, max_extra_length=50,
                             version=None):
    """Writes `model` (a built `TranslationModel` with its weights) as
    `export_dir/<version>/` with the `translate` signature; returns that path."""
    require_tensorflow_backend("SavedModel export")
    config = model.config
    with tf.io.gfile.GFile(spm_model_file, "rb") as f:
        proto = f.read()
    info = {"task": "translate", "model_type": "translation", "model": config.describe(),
            "translation_config": config.to_dict(), "beam_size": beam_size, "length_penalty": alpha,
            "max_extra_length": max_extra_length}

    def save(path, local):
        serving = TranslationServing(model, proto, beam_size, alpha, max_extra_length)
        tf.saved_model.save(serving, path, signatures={"translate": serving.translate.get_concrete_function()})
        return ["translate"]

    return write_version(export_dir, version, info, save)
