"""A translation model as a SavedModel that takes raw text: one `translate` signature,
the SentencePiece model in the graph, loadable without this package (TensorFlow and
tensorflow-text only).

- `translate(source string [B], beam_size int32)` -> `translation` string [B] and
  `score` float32 [B] (the hypothesis' log-probability over GNMT's length penalty; with
  beam 1, greedy's log-probability): beam search (`translation_decoding.beam_search`)
  of one of the beam sizes it was exported with (`DEFAULT_BEAM_SIZES`: 1 greedy, 4, 8),
  with its length penalty and length limit (all recorded in the version's
  export_info.json); another beam size fails the request with an error naming them.

A source longer than the model's positions is cut to fit (with its </s>), as
`run_translation.py --do_predict` does.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from realformer_tf.errors import ExportError, require_tensorflow_backend
from realformer_tf.serving import translation_decoding
from realformer_tf.serving.export import write_version


DEFAULT_BEAM_SIZES = (1, 4, 8)  # the beam sizes a signature serves unless told others (1: greedy)


class TranslationServing(tf.Module):
    """The model, its SentencePiece model and the `translate` signature."""

    def __init__(self, model, spm_proto, alpha, max_extra_length, beam_sizes=DEFAULT_BEAM_SIZES):
        super().__init__(name="translation_serving")
        self.model, self.beam_sizes = model, tuple(sorted(set(int(k) for k in beam_sizes)))
        self.tokenizer = tf_text.SentencepieceTokenizer(model=spm_proto, out_type=tf.int32)
        self.alpha, self.max_extra_length = alpha, max_extra_length

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="source"),
                                  tf.TensorSpec([], tf.int32, name="beam_size")])
    def translate(self, source, beam_size):
        config = self.model.config
        pieces = self.tokenizer.tokenize(source)[:, :config.max_position_embeddings - 1]
        eos = tf.fill([tf.shape(source)[0], 1], config.eos_id)
        ids = tf.concat([pieces, tf.RaggedTensor.from_tensor(eos)], axis=1).to_tensor(config.pad_id)
        branch = tf.argmax(tf.cast(tf.equal(beam_size, self.beam_sizes), tf.int32), output_type=tf.int32)
        check = tf.debugging.assert_equal(tf.reduce_any(tf.equal(beam_size, self.beam_sizes)), True, message=(
            f"beam_size must be one of {', '.join(map(str, self.beam_sizes))} (the sizes this model was exported "
            "with; 1: greedy)"))
        with tf.control_dependencies([check]):
            out_ids, score = tf.switch_case(branch, [self._search(ids, k) for k in self.beam_sizes])
        found = tf.equal(out_ids, config.eos_id)
        lengths = tf.where(tf.reduce_any(found, axis=1), tf.argmax(tf.cast(found, tf.int32), axis=1, output_type=tf.int32),
                           tf.shape(out_ids)[1])
        text = self.tokenizer.detokenize(tf.RaggedTensor.from_tensor(out_ids, lengths=lengths))
        return {"translation": text, "score": score}

    def _search(self, ids, beam_size):
        """The search of one beam size, as a branch: () -> (ids, score)."""
        def branch():
            if beam_size == 1:
                out = translation_decoding.greedy(self.model, ids, max_extra_length=self.max_extra_length)
                return out["ids"], out["log_prob"]
            out = translation_decoding.beam_search(self.model, ids, beam_size=beam_size, alpha=self.alpha,
                                                   max_extra_length=self.max_extra_length)
            return out["ids"], out["score"]
        return branch


def export_translation_model(model, export_dir, *, spm_model_file, alpha=0.6, max_extra_length=50,
                             beam_sizes=DEFAULT_BEAM_SIZES, version=None):
    """Writes `model` (a built `TranslationModel` with its weights) as
    `export_dir/<version>/` with the `translate` signature serving `beam_sizes` (each
    a search traced into the graph: more sizes, a longer export); returns that path."""
    if not beam_sizes or any(int(k) < 1 for k in beam_sizes):
        raise ExportError(f"beam sizes {list(beam_sizes)}: give one or more, each 1 (greedy) or more")
    require_tensorflow_backend("SavedModel export")
    config = model.config
    with tf.io.gfile.GFile(spm_model_file, "rb") as f:
        proto = f.read()
    info = {"task": "translate", "model_type": "translation", "model": config.describe(),
            "translation_config": config.to_dict(), "beam_sizes": sorted(set(int(k) for k in beam_sizes)), "length_penalty": alpha,
            "max_extra_length": max_extra_length}

    def save(path, local):
        serving = TranslationServing(model, proto, alpha, max_extra_length, beam_sizes)
        tf.saved_model.save(serving, path, signatures={"translate": serving.translate.get_concrete_function()})
        return ["translate"]

    return write_version(export_dir, version, info, save)
