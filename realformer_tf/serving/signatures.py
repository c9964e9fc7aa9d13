"""The serving signatures of a task model: `ServingFunctions` traces them and gives
the object `serving.export` saves.

* `serving_default` — `text_a` string [B] and `text_b` string [B]; an empty `text_b`
  (more exactly: one without any WordPiece) makes that row a single-sentence example,
  so singles and pairs may share a batch. For `squad`, `text_a` is the question and
  `text_b` the context.
* `serve_text_a` — `text_a` only (classifier and encoder): single sentences without
  sending empty strings.
* `serve_token_ids` — `input_ids`, `input_mask`, `segment_ids` int32 [B, L] with any B
  and L <= max_seq_length, for clients that tokenize themselves.

Outputs: classifier `probabilities` [B, num_labels], `label_id` int32 [B], `label`
string [B] (the label name) and `logits`; a regression classifier (STS-B) `score` [B]
and `logits`; squad `start_logits`, `end_logits` [B, L] and, on the text signature,
`tokens`, `input_ids`, `input_mask`, `segment_ids` [B, L] so clients can map positions
back to WordPieces; encoder `pooled_output` [B, H], `sequence_output` [B, L, H] and
`input_mask`.
"""

import tensorflow as tf

from realformer_tf.families import get_family

# A family with a static input length (ETC) is traced at each of these lengths below
# max_seq_length as well, and a batch runs at the smallest one its longest row fits:
# measured at BERT-Base size, ETC at 512 serves ~120-word texts 2-3x faster this way
# (benchmarks/benchmark_serving.py, lever etc_max). Outputs are the same: padding is masked.
ETC_LENGTH_BUCKETS = (128, 256)


class ServingFunctions:
    """The serving functions of a Keras task model and a `BertTextEncoder`.

    `concrete_functions()` traces them; `saveable()` is the root object to save: the
    text encoder (vocab asset and lookup table) and the raw `tf.Variable`s the traced
    functions read — not the Keras model, as keras.export.ExportArchive does too. (Saving
    a `tf.Module` that holds the Keras 3 model, or its Keras variables, gives a SavedModel
    that TF2's `tf.saved_model.load` runs but the TF1 / C++ loader — the one TF Serving
    and `saved_model_cli run` use — does not: "Could not find variable ..." at the first
    call; seen with TF 2.20 / Keras 3.15.)
    """

    def __init__(self, model, task, text_encoder, label_names=None, is_regression=False,
                 family=None, input_options=None, length_buckets=ETC_LENGTH_BUCKETS, compile_model=False):
        self.model = model
        # A static-length family's model is traced at each of these lengths (and
        # max_seq_length); () pads every batch to max_seq_length.
        self._length_buckets = tuple(length_buckets)
        # The model part compiled with XLA (the tokenizer ops cannot be): for inputs of a
        # few fixed lengths (pad_to_max_seq_length), since XLA compiles once per shape.
        self._compiled_model = (tf.function(self._call_model, jit_compile=True, autograph=False)
                                if compile_model else None)
        # The family turns the BERT-layout features into its model's inputs (ETC: global
        # tokens, masks, relative ids), in the graph.
        self.family = family or get_family("bert")
        self.input_options = input_options
        self.text_encoder = text_encoder
        self.task = task
        self.is_regression = bool(is_regression)
        self.max_seq_length = text_encoder.max_seq_length
        self._label_names = None if label_names is None else [str(n) for n in label_names]
        config = model.config
        self._vocab_size = int(config.vocab_size)
        self._type_vocab_field = "type_vocab_size" if hasattr(config, "type_vocab_size") else "segment_vocab_size"
        self._type_vocab_size = int(getattr(config, self._type_vocab_field))

        # autograph off: no Python control flow depends on tensors here.
        self.serve_text = tf.function(self._serve_text, autograph=False, input_signature=[
            tf.TensorSpec([None], tf.string, name="text_a"),
            tf.TensorSpec([None], tf.string, name="text_b")])
        self.serve_text_a = tf.function(self._serve_text_a, autograph=False, input_signature=[
            tf.TensorSpec([None], tf.string, name="text_a")])
        self.serve_token_ids = tf.function(self._serve_token_ids, autograph=False, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="input_ids"),
            tf.TensorSpec([None, None], tf.int32, name="input_mask"),
            tf.TensorSpec([None, None], tf.int32, name="segment_ids")])

    def concrete_functions(self):
        """{signature name: concrete function}."""
        functions = {"serving_default": self.serve_text, "serve_token_ids": self.serve_token_ids}
        if self.task != "squad":
            functions["serve_text_a"] = self.serve_text_a
        return {name: f.get_concrete_function() for name, f in functions.items()}

    def saveable(self, concrete_functions):
        root = tf.Module(name="bert_serving")
        root.text_encoder = self.text_encoder
        seen, variables = set(), []
        for function in concrete_functions.values():
            for v in function.variables:
                if id(v) not in seen:
                    seen.add(id(v))
                    variables.append(v)
        root.model_variables = variables
        return root

    def _call_model(self, features):
        return self.model(self.family.adapt_features(features, self.model.config, self.input_options),
                          training=False)

    def _model_outputs(self, features):
        features = {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}
        if not self.family.static_length:
            return (self._compiled_model or self._call_model)(features)
        # A fixed length: pad to the smallest bucket the batch fits (the last one is
        # max_seq_length), run the model traced at that length, cut per-token outputs back.
        length = tf.shape(features["input_ids"])[1]
        buckets = self.length_buckets()

        def at(bucket):
            def branch():
                padded = {k: tf.pad(v, [[0, 0], [0, bucket - length]]) for k, v in features.items()}
                for v in padded.values():
                    v.set_shape([None, bucket])
                inputs = self.family.adapt_features(padded, self.model.config, self.input_options)
                outputs = dict(self.model(inputs, training=False))
                for key in ("start_logits", "end_logits"):
                    if key in outputs:
                        outputs[key] = outputs[key][:, :length]
                return outputs
            return branch

        if len(buckets) == 1:
            return at(buckets[0])()
        index = tf.reduce_sum(tf.cast(length > tf.constant(buckets[:-1]), tf.int32))
        return tf.switch_case(index, [at(b) for b in buckets])

    def length_buckets(self):
        """The input lengths a static-length family's model is traced at."""
        return [b for b in self._length_buckets if b < self.max_seq_length] + [self.max_seq_length]

    def _run(self, features):
        outputs = self._model_outputs(features)
        if self.task == "classifier":
            logits = tf.cast(outputs["logits"], tf.float32)
            if self.is_regression:
                return {"score": logits[:, 0], "logits": logits}
            label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
            return {
                "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_id": label_id,
                "label": tf.gather(tf.constant(self._label_names), label_id),
                "logits": logits,
            }
        if self.task == "squad":
            return {"start_logits": tf.cast(outputs["start_logits"], tf.float32),
                    "end_logits": tf.cast(outputs["end_logits"], tf.float32)}
        return {"pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
                "sequence_output": tf.cast(outputs["sequence_output"], tf.float32)}

    def _with_inputs(self, outputs, features):
        if self.task == "squad":
            outputs.update({k: features[k] for k in ("tokens", "input_ids", "input_mask", "segment_ids")})
        elif self.task == "encoder":
            outputs["input_mask"] = features["input_mask"]
        return outputs

    def _serve_text(self, text_a, text_b):
        features = self.text_encoder.encode(text_a, text_b)
        return self._with_inputs(self._run(features), features)

    def _serve_text_a(self, text_a):
        features = self.text_encoder.encode(text_a)
        return self._with_inputs(self._run(features), features)

    def _serve_token_ids(self, input_ids, input_mask, segment_ids):
        checks = [
            tf.debugging.assert_less_equal(
                tf.shape(input_ids)[1], self.max_seq_length,
                message=f"sequence length exceeds max_seq_length={self.max_seq_length}"),
            tf.debugging.assert_equal(tf.shape(input_mask), tf.shape(input_ids),
                                      message="input_mask must have the shape of input_ids"),
            tf.debugging.assert_equal(tf.shape(segment_ids), tf.shape(input_ids),
                                      message="segment_ids must have the shape of input_ids"),
            tf.debugging.assert_greater_equal(
                tf.shape(input_ids)[1], 1, message="input_ids must have at least one position ([CLS])"),
            # Out-of-range ids would be clamped or wrapped by the embedding lookups, i.e.
            # silently give another token's output; values are checked, not trusted.
            tf.debugging.assert_equal(
                tf.reduce_all((input_ids >= 0) & (input_ids < self._vocab_size)), True,
                message=f"input_ids must be in [0, vocab_size={self._vocab_size})"),
            tf.debugging.assert_equal(
                tf.reduce_all((segment_ids >= 0) & (segment_ids < self._type_vocab_size)), True,
                message=f"segment_ids must be in [0, {self._type_vocab_field}={self._type_vocab_size})"),
            tf.debugging.assert_equal(
                tf.reduce_all((input_mask == 0) | (input_mask == 1)), True,
                message="input_mask values must be 0 or 1"),
        ]
        with tf.control_dependencies(checks):  # every input waits for the checks
            features = {"input_ids": tf.identity(input_ids), "input_mask": tf.identity(input_mask),
                        "segment_ids": tf.identity(segment_ids)}
        outputs = self._run(features)
        if self.task == "encoder":
            outputs["input_mask"] = input_mask
        return outputs
