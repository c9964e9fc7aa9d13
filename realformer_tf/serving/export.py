"""SavedModel export for serving: raw text in, predictions out (TF Serving layout).

    path = export.export_from_checkpoint(
        "exports/mrpc", bert_config=config, init_checkpoint="out/bert_model.ckpt",
        vocab_file="vocab.txt", do_lower_case=True, task="classifier",
        label_names=["0", "1"], max_seq_length=128)
    # -> exports/mrpc/1  (the next free integer version; TF Serving's layout)

The SavedModel is a plain `tf.Module` written by `tf.saved_model.save` (the weights as
`tf.Variable`s, the vocab asset and lookup table, the signature functions): it needs no
custom objects and loads without this package (`tf.saved_model.load(path)` after
`import tensorflow_text`, which registers the tokenizer ops). Signatures:

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

Text is tokenized in the graph exactly as run_classifier / run_squad tokenize at
training time (Model Garden's `FullTokenizer` + `convert_single_example`): the vocab
ships as a SavedModel asset (`assets/vocab.txt`), the casing is the export's
`do_lower_case`, pairs are packed as `[CLS] a [SEP] b [SEP]` and truncated
longest-first like `_truncate_seq_pair` (SQuAD: the question to `max_query_length`,
the context to the rest, i.e. the first doc_stride window). Rows are padded to the
batch's longest row, or to `max_seq_length` with `pad_to_max_seq_length=True`.

Why not tensorflow-text's `BertTokenizer` as is: its normalization differs from the
original tokenizer's (it NFKC-case-folds — "½" -> "1⁄2", "ß" -> "ss", U+00A0 stays inside
a word —, turns control/format characters into spaces instead of deleting them, splits
only on ASCII whitespace, and caps words at 100 bytes instead of 400 characters;
measured over all code points: 9407 differ in lower-casing alone). We use its building
blocks (`regex_split`, `normalize_utf8`, `WordpieceTokenizer`) and core string ops with
the original rules; over every Unicode code point the result equals `FullTokenizer`
(Python 3.11) except for 125 code points (30 cased) added in Unicode 14 or later, where
Python's `unicodedata` and TensorFlow's ICU/RE2 tables disagree.

Serving: the graph uses three tensorflow-text ops — RegexSplitWithOffsets, NormalizeUTF8
and WordpieceTokenizeWithOffsets — besides core TensorFlow ops. The TF Serving
model server links tensorflow-text's ops (`@org_tensorflow_text//tensorflow_text:ops_lib`
in tensorflow_serving/model_servers/BUILD), and these three are old ops, so a standard
`tensorflow/serving` image of a matching TF version should load the model; this was not
run against a model server here. Other runtimes (the TF C API, Triton's TF backend) need
the tensorflow-text ops library loaded.

Keras 3 exports SavedModels too (`model.export(path, format="tf_saved_model")`, or
`keras.export.ExportArchive` with `track(model)` + `add_endpoint(...)`); that is enough
for a token-id endpoint alone. The raw-text signatures need the vocab asset and lookup
table next to the model, so the export here saves a plain `tf.Module` the way
ExportArchive does (the `tf.Variable`s the functions read, not the Keras objects; see
`ServingFunctions`), with the same result for `serve_token_ids`.
"""

import datetime
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import uuid

import tensorflow as tf
import tensorflow_text as tf_text

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.errors import require_tensorflow_backend
from realformer_tf.checkpoints import variant_evidence
from realformer_tf.data.records import InputError
from realformer_tf.errors import UsageError
from realformer_tf.families import get_family
from realformer_tf.errors import ExportError  # noqa: F401  (raised here, public here)

TASKS = ("classifier", "squad", "encoder")
EXPORT_INFO_FILE = "realformer_export.json"  # under <version>/assets.extra/

# The original tokenizer's rules (Model Garden official/nlp/tools/tokenization.py).
# _clean_text: drop NUL, U+FFFD and Cc/Cf except tab/newline/return; whitespace -> " ".
_REMOVED_CHARS = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\x{FFFD}]|\p{Cf}"
_WHITESPACE_CHARS = r"[\t\n\r\p{Zs}]"
# _tokenize_chinese_chars: these blocks become one token per character.
_CJK = "|".join([
    r"[\x{4E00}-\x{9FFF}]", r"[\x{3400}-\x{4DBF}]", r"[\x{20000}-\x{2A6DF}]",
    r"[\x{2A700}-\x{2B73F}]", r"[\x{2B740}-\x{2B81F}]", r"[\x{2B820}-\x{2CEAF}]",
    r"[\x{F900}-\x{FAFF}]", r"[\x{2F800}-\x{2FA1F}]",
])
# _is_punctuation: the four ASCII symbol ranges and every Unicode "P*" character.
_PUNCTUATION = r"[!-/]|[:-@]|[\[-`]|[{-~]|\p{P}"
_KEPT_DELIMITERS = _PUNCTUATION + "|" + _CJK
# whitespace_tokenize is str.split(): after _clean_text, that is Zs, U+2028 and U+2029.
_DELIMITERS = r"[\p{Zs}\x{2028}\x{2029}]+|" + _KEPT_DELIMITERS
# WordpieceTokenizer(max_input_chars_per_word=400): a longer word is one [UNK].
MAX_CHARS_PER_WORD = 400

CLS, SEP, UNK = "[CLS]", "[SEP]", "[UNK]"
# A family with a static input length (ETC) is traced at each of these lengths below
# max_seq_length as well, and a batch runs at the smallest one its longest row fits:
# measured at BERT-Base size, ETC at 512 serves ~120-word texts 2-3x faster this way
# (benchmarks/benchmark_serving.py, lever etc_max). Outputs are the same: padding is masked.
ETC_LENGTH_BUCKETS = (128, 256)


# -- in-graph tokenization ---------------------------------------------------------------
def basic_tokenize(texts, do_lower_case):
    """Model Garden's `BasicTokenizer.tokenize` on a string tensor [B] -> ragged [B, (W)]."""
    # convert_to_unicode: bytes.decode("utf-8", "ignore") drops invalid bytes.
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="ignore")
    texts = tf.strings.regex_replace(texts, _REMOVED_CHARS, "")
    texts = tf.strings.regex_replace(texts, _WHITESPACE_CHARS, " ")
    if do_lower_case:
        # str.lower() (full Unicode lower-casing, final sigma included), then
        # _run_strip_accents: NFD and drop "Mn" characters.
        texts = tf.strings.lower(texts, encoding="utf-8")
        texts = tf_text.normalize_utf8(texts, "NFD")
        texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
    return _regex_split(texts, _DELIMITERS, _KEPT_DELIMITERS)


def _regex_split(texts, delimiters, kept_delimiters):
    """tf_text.regex_split of a string [B] -> ragged [B, (W)].

    Calls the op (RegexSplitWithOffsets) directly where the package exposes it: the
    public wrapper validates three ragged results with assert ops, which makes tracing
    (and so export) several times slower for the same computation.
    """
    try:
        from tensorflow_text.python.ops.regex_split_ops import gen_regex_split_ops as op
    except ImportError:  # pragma: no cover (another tensorflow-text layout)
        op = None
    if op is None:
        return tf_text.regex_split(texts, delimiters, kept_delimiters)
    words, _, _, row_splits = op.regex_split_with_offsets(
        input=texts, delim_regex_pattern=f"({delimiters})".encode(),
        keep_delim_regex_pattern=f"({kept_delimiters})".encode())
    return tf.RaggedTensor.from_row_splits(words, row_splits, validate=False)


def longest_first_lengths(len_a, len_b, budget):
    """Lengths that `_truncate_seq_pair` (pop from the longer, from `b` on ties) leaves.

    Closed form of the loop: if the shorter side fits in half the budget it is kept
    and the longer one gets the rest; otherwise a gets ceil(budget/2), b floor(budget/2).
    (tensorflow-text's ShrinkLongestTrimmer breaks ties the other way; it agrees when
    given the segments as [b, a].)
    """
    len_a, len_b, budget = (tf.cast(x, tf.int64) for x in (len_a, len_b, budget))
    fits = len_a + len_b <= budget
    shorter = tf.minimum(len_a, len_b)
    keep_shorter = 2 * shorter <= budget
    a = tf.where(keep_shorter, tf.where(len_a <= len_b, len_a, budget - len_b), (budget + 1) // 2)
    b = tf.where(keep_shorter, tf.where(len_a <= len_b, budget - len_a, len_b), budget // 2)
    return tf.where(fits, len_a, a), tf.where(fits, len_b, b)


class BertTextEncoder(tf.Module):
    """Raw text -> BERT inputs, as the training scripts build them, in the graph.

    `tokenize(texts)` gives the WordPieces of each string (ragged [B, (T)]);
    `encode(text_a, text_b)` the padded `input_ids`, `input_mask`, `segment_ids` int32
    [B, L] and the `tokens` string [B, L]. Built from flat tensors and index arithmetic
    rather than ragged concatenation: the same result with a fraction of the ops, which
    keeps tracing and export fast.
    """

    def __init__(self, vocab_asset_path, do_lower_case, max_seq_length, pair_truncation="longest_first",
                 max_query_length=None, pad_to_max_seq_length=False, name="text_encoder"):
        super().__init__(name=name)
        if pair_truncation not in ("longest_first", "squad"):
            raise ValueError(f"pair_truncation {pair_truncation!r}")
        self.do_lower_case = bool(do_lower_case)
        self.max_seq_length = int(max_seq_length)
        self.pair_truncation = pair_truncation
        self.max_query_length = max_query_length
        self.pad_to_max_seq_length = bool(pad_to_max_seq_length)
        self.vocab_file = tf.saved_model.Asset(vocab_asset_path)
        initializer = tf.lookup.TextFileInitializer(
            self.vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER)
        # The table type tensorflow-text builds from a vocab path (one OOV bucket, never
        # hit: every WordPiece is in the vocab or is [UNK]).
        self.vocab_table = tf.lookup.StaticVocabularyTable(initializer, num_oov_buckets=1)
        # max_bytes_per_word large enough never to apply: the 400-character rule of the
        # original is applied on characters before WordPiece (see _pieces).
        self._wordpiece = tf_text.WordpieceTokenizer(
            self.vocab_table, suffix_indicator="##", max_bytes_per_word=4 * MAX_CHARS_PER_WORD,
            token_out_type=tf.string, unknown_token=UNK)

    def _pieces(self, texts):
        """string [B] -> (WordPieces, flat [N], row_splits [B+1])."""
        words = basic_tokenize(texts, self.do_lower_case)
        flat_words = words.flat_values
        # A word of more than 400 characters is one [UNK]. [UNK] is in the vocab, so
        # WordPiece maps the word "[UNK]" to itself (no real word contains brackets:
        # they are punctuation and split off).
        flat_words = tf.where(
            tf.strings.length(flat_words, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD, UNK, flat_words)
        pieces = self._wordpiece.tokenize(flat_words)  # [N words, (P)]
        return pieces.flat_values, tf.gather(pieces.row_splits, words.row_splits)

    def tokenize(self, texts):
        """string [B] -> ragged string [B, (T)]: FullTokenizer.tokenize of each string."""
        values, splits = self._pieces(texts)
        return tf.RaggedTensor.from_row_splits(values, splits, validate=False)

    def _kept_lengths(self, len_a, len_b):
        if self.pair_truncation == "squad":
            # squad_lib: query[:max_query_length]; the doc gets max_seq_length - len - 3.
            keep_a = tf.minimum(len_a, self.max_query_length)
            keep_b = tf.minimum(len_b, self.max_seq_length - 3 - keep_a)
            return keep_a, keep_b, tf.ones_like(keep_b)
        # convert_single_example: a pair iff text_b has WordPieces; budget max-3 for pairs
        # (_truncate_seq_pair), max-2 for singles; a pair whose b is truncated away ends
        # after the first [SEP], as there.
        budget = tf.where(len_b > 0, self.max_seq_length - 3, self.max_seq_length - 2)
        keep_a, keep_b = longest_first_lengths(len_a, len_b, budget)
        return keep_a, keep_b, tf.cast(keep_b > 0, tf.int64)

    def encode(self, text_a, text_b=None):
        if text_b is None:
            text_b = tf.fill(tf.shape(text_a), "")
        else:
            # Row i pairs text_a[i] with text_b[i]; a shorter text_b would broadcast.
            check = tf.debugging.assert_equal(
                tf.size(text_a), tf.size(text_b),
                message="text_a and text_b must have the same number of rows (one text_b per "
                        "text_a; an empty text_b for a single sentence)")
            with tf.control_dependencies([check]):
                text_a = tf.identity(text_a)
        values_a, splits_a = self._pieces(text_a)
        values_b, splits_b = self._pieces(text_b)
        keep_a, keep_b, sep_b = self._kept_lengths(splits_a[1:] - splits_a[:-1], splits_b[1:] - splits_b[:-1])
        # Row i: [CLS] a[:keep_a] [SEP] b[:keep_b] ([SEP] if sep_b), then padding.
        lengths = 2 + keep_a + keep_b + sep_b
        # Every row has [CLS] and [SEP], so at least 2: the floor only gives an empty
        # batch the width [0, 2] that the model runs on (it reads position 0).
        width = self.max_seq_length if self.pad_to_max_seq_length else tf.reduce_max(
            tf.concat([lengths, [2]], 0))
        j = tf.range(width, dtype=tf.int64)[tf.newaxis, :]  # [1, L]
        start_b = (keep_a + 2)[:, tf.newaxis]
        end_b = start_b + keep_b[:, tf.newaxis]
        in_a = (j >= 1) & (j <= keep_a[:, tf.newaxis])
        in_b = (j >= start_b) & (j < end_b)
        is_sep = (j == keep_a[:, tf.newaxis] + 1) | ((j == end_b) & (sep_b[:, tf.newaxis] > 0))
        real = j < lengths[:, tf.newaxis]
        # One flat table of every piece plus the three specials; gather by index.
        table = tf.concat([values_a, values_b, [CLS, SEP, ""]], 0)
        n_a, n_b = tf.size(values_a, tf.int64), tf.size(values_b, tf.int64)
        index = tf.fill(tf.shape(in_a), n_a + n_b + 2)  # padding: ""
        index = tf.where(in_a, splits_a[:-1, tf.newaxis] + j - 1, index)
        index = tf.where(in_b, n_a + splits_b[:-1, tf.newaxis] + j - start_b, index)
        index = tf.where(is_sep, n_a + n_b + 1, index)
        index = tf.where(j == 0, n_a + n_b, index)
        tokens = tf.gather(table, index)
        ids = tf.where(real, self.vocab_table.lookup(tokens), 0)
        return {
            "input_ids": tf.cast(ids, tf.int32),
            "input_mask": tf.cast(real, tf.int32),
            "segment_ids": tf.cast((j >= start_b) & real, tf.int32),
            "tokens": tokens,
        }


# -- the serving module ------------------------------------------------------------------
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
                 family=None, input_options=None):
        self.model = model
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

    def _model_outputs(self, features):
        features = {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}
        if not self.family.static_length:
            return self.model(self.family.adapt_features(features, self.model.config, self.input_options),
                              training=False)
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
        return [b for b in ETC_LENGTH_BUCKETS if b < self.max_seq_length] + [self.max_seq_length]

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


# -- building and writing ----------------------------------------------------------------
def read_vocab(vocab_file, vocab_size=None):
    """The vocab as the training tokenizer reads it (Model Garden `load_vocab`: one token
    per line, stripped) -> list of tokens in id order, with checks."""
    if not vocab_file:
        raise InputError("--vocab_file is required")
    if not tf.io.gfile.exists(vocab_file):
        raise InputError(f"--vocab_file {vocab_file} does not exist")
    tokens = []
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        for line in iter(f.readline, b""):
            tokens.append(line.decode("utf-8", "ignore").strip())
    seen, duplicates = set(), []
    for token in tokens:
        if token in seen:
            duplicates.append(token)
        seen.add(token)
    if duplicates:
        raise InputError(
            f"--vocab_file {vocab_file} lists {len(duplicates)} token(s) twice (e.g. "
            f"{duplicates[0]!r}); the serving vocab lookup needs unique tokens")
    missing = [t for t in (UNK, CLS, SEP) if t not in seen]
    if missing:
        raise InputError(f"--vocab_file {vocab_file} lacks {', '.join(missing)}; use a BERT WordPiece vocab")
    if vocab_size is not None and len(tokens) > vocab_size:
        raise InputError(
            f"--vocab_file {vocab_file} has {len(tokens)} tokens but the model's vocab_size is "
            f"{vocab_size}; use the vocab the checkpoint was trained with")
    return tokens


def next_version(export_dir):
    """1 + the largest integer version directory under export_dir (1 if none)."""
    if not tf.io.gfile.isdir(export_dir):
        return 1
    versions = [int(n.rstrip("/")) for n in tf.io.gfile.listdir(export_dir) if re.fullmatch(r"\d+/?", n)]
    return max(versions, default=0) + 1


def infer_task(init_checkpoint, family=None):
    """classifier / squad / encoder from the heads a checkpoint holds."""
    family = family or get_family("bert")
    prefix = ckpt.resolve_checkpoint(init_checkpoint)
    for task in ("classifier", "squad"):
        if family.checkpoint_heads(prefix, task):
            return task
    return "encoder"


def checkpoint_num_labels(init_checkpoint, family=None):
    """num_labels of the classifier head in a checkpoint (None without one)."""
    family = family or get_family("bert")
    prefix = ckpt.resolve_checkpoint(init_checkpoint)
    raw = ckpt.list_checkpoint(prefix)
    names = ckpt.original_names(raw) or {}
    weights = family.classifier_weights_name
    return int(raw[names[weights]][0]) if weights in names else None


def _resolve_labels(task, num_labels, label_names, is_regression):
    if task != "classifier":
        if label_names or num_labels or is_regression:
            raise ExportError(f"labels are for task classifier, not {task}")
        return None, None
    if is_regression:
        if label_names:
            raise ExportError("a regression classifier (e.g. STS-B) has no label names")
        if num_labels not in (None, 1):
            raise ExportError(f"a regression classifier has one output, not num_labels={num_labels}")
        return 1, None
    if label_names:
        label_names = [str(n) for n in label_names]
        if len(set(label_names)) != len(label_names):
            raise ExportError(f"label names must be unique, got {', '.join(label_names)}")
        if num_labels is not None and num_labels != len(label_names):
            raise ExportError(f"num_labels={num_labels} but {len(label_names)} label names were given")
        return len(label_names), label_names
    if not num_labels or num_labels < 1:
        raise ExportError("a classifier export needs its labels: label names or num_labels")
    return num_labels, [str(i) for i in range(num_labels)]


def _check_lengths(family, config, task, max_seq_length, max_query_length):
    if max_seq_length < 3:
        raise ExportError(f"max_seq_length={max_seq_length} leaves no room for [CLS] text [SEP]")
    limit = family.max_length(config)
    if limit and max_seq_length > limit:
        raise ExportError(f"max_seq_length={max_seq_length} exceeds {family.max_length_field}={limit} of the config")
    if task == "squad" and not 0 < max_query_length < max_seq_length - 3:
        raise ExportError(f"max_query_length={max_query_length} must be in [1, max_seq_length - 3), "
                          "as in run_squad.py")


def _check_outputs(model, task, label_names, is_regression):
    if task != "classifier":
        return
    if is_regression:
        if model.num_labels != 1:
            raise ExportError(f"a regression model has one output, this one {model.num_labels}")
    elif label_names is None or len(label_names) != model.num_labels:
        raise ExportError(f"the classifier has {model.num_labels} outputs; give as many label names")


def _new_version_path(export_dir, version):
    version = next_version(export_dir) if version is None else int(version)
    if version < 0:
        raise ExportError(f"version must be a non-negative integer, got {version}")
    final = os.path.join(export_dir, str(version))
    if tf.io.gfile.exists(final):
        raise ExportError(f"{final} already exists; give another --version or a new --export_dir")
    return final


def export_model(model, export_dir, *, task, vocab_file, do_lower_case, max_seq_length,
                 label_names=None, is_regression=False, version=None, max_query_length=64,
                 pad_to_max_seq_length=False, extra_info=None, family=None, input_options=None):
    """Writes `model` (a built task model of `family`, default BERT, with its weights) as
    `export_dir/<version>/`; returns that path.

    Args:
        task: "classifier", "squad" or "encoder" (BERT only).
        input_options: for ETC, the options its inputs are built with
            (`etc_tokens_per_global`); rows are then padded to the smallest of
            `ETC_LENGTH_BUCKETS` + [max_seq_length] that the batch's longest row fits.
        version: defaults to the next free integer. The SavedModel is written under a
            temporary name and renamed into place, so a model server watching
            export_dir never sees a half-written version.
    """
    require_tensorflow_backend("SavedModel export")
    family = family or get_family("bert")
    if task not in TASKS:
        raise ExportError(f"task {task!r} is not one of {', '.join(TASKS)}")
    config = model.config
    _check_lengths(family, config, task, max_seq_length, max_query_length)
    _check_outputs(model, task, label_names, is_regression)
    tokens = read_vocab(vocab_file, config.vocab_size)
    final = _new_version_path(export_dir, version)
    tf.io.gfile.makedirs(export_dir)
    temp = os.path.join(export_dir, f"temp-{os.path.basename(final)}-{uuid.uuid4().hex[:8]}")
    info = {
        "task": task, "model_type": family.name, "model": config.describe(),
        f"{family.name}_config": config.to_dict(), "do_lower_case": bool(do_lower_case),
        "max_seq_length": int(max_seq_length), "label_names": label_names,
        # A static-length family pads in the model part (to a length bucket) instead.
        "pad_to_max_seq_length": bool(pad_to_max_seq_length),
        "is_regression": bool(is_regression),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **(family.run_identity(input_options) if input_options is not None else {}),
    }
    if task == "squad":
        info["max_query_length"] = int(max_query_length)
    info.update(extra_info or {})
    local = tempfile.mkdtemp(prefix="realformer_export_")
    try:
        vocab_path = os.path.join(local, "vocab.txt")  # the asset keeps this basename
        with open(vocab_path, "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in tokens))
        encoder = BertTextEncoder(
            vocab_path, do_lower_case, max_seq_length,
            pair_truncation="squad" if task == "squad" else "longest_first",
            max_query_length=max_query_length if task == "squad" else None,
            pad_to_max_seq_length=info["pad_to_max_seq_length"])
        serving = ServingFunctions(model, task, encoder, label_names, is_regression, family, input_options)
        _save(serving, temp, info)
        tf.io.gfile.rename(temp, final)
    except BaseException:
        if tf.io.gfile.exists(temp):
            tf.io.gfile.rmtree(temp)
        raise
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return final


def _save(serving, path, info):
    signatures = serving.concrete_functions()
    tf.saved_model.save(serving.saveable(signatures), path, signatures=signatures)
    info["signatures"] = sorted(signatures)
    tf.io.gfile.makedirs(os.path.join(path, "assets.extra"))
    with tf.io.gfile.GFile(os.path.join(path, "assets.extra", EXPORT_INFO_FILE), "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)


def export_from_checkpoint(export_dir, *, init_checkpoint, vocab_file, do_lower_case, bert_config=None,
                           family=None, config=None, task=None, num_labels=None, label_names=None,
                           is_regression=False, max_seq_length=128, version=None, max_query_length=64,
                           pad_to_max_seq_length=False, input_options=None):
    """Builds the task's model, loads a checkpoint of its family (original-named or one
    of our training checkpoints) and exports it; returns the version path.

    Args:
        bert_config: the model's config, a file path or a config object.
        config: the same (the name the runner uses); give one of the two.
        family: a `realformer_tf.families` family (default BERT).
        task: None takes it from the checkpoint's heads; a classifier's label count,
            when neither `label_names` nor `num_labels` is given, from its weights.
    """
    family = family or get_family("bert")
    if config is None:
        config = bert_config if isinstance(bert_config, family.config_class) else family.load_config(bert_config)
    prefix = ckpt.resolve_checkpoint(init_checkpoint)
    # A config file without residual_attention: the weights decide (one line) or an error.
    config = variant_evidence.resolve(family, config, prefix, source=f"--bert_config_file={bert_config}" if isinstance(bert_config, str) else "the config",
                                      log=lambda line: print(line, flush=True))
    task = task or infer_task(prefix, family)
    if task not in TASKS:
        raise ExportError(f"task {task!r} is not one of {', '.join(TASKS)}")
    if task not in family.export_tasks:
        raise ExportError(f"task {task!r} cannot be exported for model type {family.name}; use one of "
                          f"{', '.join(family.export_tasks)}")
    if task == "classifier" and not label_names and not num_labels and not is_regression:
        num_labels = checkpoint_num_labels(prefix, family)
        if num_labels is None:
            raise ExportError(f"{prefix} has no classifier head ({family.classifier_weights_name}); export "
                              "it as task encoder, or give the fine-tuned checkpoint")
    num_labels, label_names = _resolve_labels(task, num_labels, label_names, is_regression)
    _check_lengths(family, config, task, max_seq_length, max_query_length)  # fail before building
    read_vocab(vocab_file, config.vocab_size)
    # The family's one builder; float32: the serving graph runs in float32 whatever the
    # training policy was.
    model = family.build_model(config, task, num_labels=num_labels, dtype="float32")
    family.load_checkpoint(model, prefix)
    return export_model(
        model, export_dir, task=task, vocab_file=vocab_file, do_lower_case=do_lower_case,
        max_seq_length=max_seq_length, label_names=label_names, is_regression=is_regression,
        version=version, max_query_length=max_query_length, pad_to_max_seq_length=pad_to_max_seq_length,
        extra_info={"init_checkpoint": prefix}, family=family, input_options=input_options)


def read_export_info(path):
    """The export's description (task, labels, config, ...) from assets.extra."""
    with tf.io.gfile.GFile(os.path.join(path, "assets.extra", EXPORT_INFO_FILE)) as f:
        return json.load(f)


# `saved_model_cli run` loads the graph without importing tensorflow_text, so its ops are
# unregistered ("Op type not registered 'NormalizeUTF8'"); this runs the same CLI with
# them registered. (`saved_model_cli show` works as is.)
SAVED_MODEL_CLI_WITH_TEXT_OPS = (
    "import sys, tensorflow_text; from tensorflow.python.tools import saved_model_cli as c; "
    'sys.argv[0] = "saved_model_cli"; c.main()')


def saved_model_cli_command(path, task="classifier", python=None, signature="serving_default",
                            text_a=None, text_b=None):
    """A ready-to-copy `saved_model_cli run` line (with the tensorflow-text ops loaded)
    for a text signature of the export at `path`."""
    if text_a is None:
        text_a, text_b = (("What does the cat see?", "The cat sees the river.") if task == "squad"
                          else ("The cat sees the river.", "A dog likes the book."))
    exprs = f"text_a={json.dumps([text_a], ensure_ascii=False)}"
    if signature == "serving_default":
        exprs += f";text_b={json.dumps([text_b or ''], ensure_ascii=False)}"
    python = python or sys.executable or "python"
    return " ".join([
        shlex.quote(python), "-c", shlex.quote(SAVED_MODEL_CLI_WITH_TEXT_OPS), "run",
        "--dir", shlex.quote(str(path)), "--tag_set", "serve", "--signature_def", signature,
        "--input_exprs", shlex.quote(exprs),
    ])
