"""SavedModel export for serving: raw text in, predictions out (TF Serving layout).

    path = export.export_from_checkpoint(
        "exports/mrpc", bert_config=config, init_checkpoint="out/bert_model.ckpt",
        vocab_file="vocab.txt", do_lower_case=True, task="classifier",
        label_names=["0", "1"], max_seq_length=128)
    # -> exports/mrpc/1  (the next free integer version; TF Serving's layout)

The SavedModel is a plain `tf.Module` written by `tf.saved_model.save`: it needs no
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
except for characters that are new in Unicode 14/15, where Python's `unicodedata`
and TensorFlow's ICU/RE2 tables disagree.

Serving: the graph uses three tensorflow-text ops — RegexSplitWithOffsets, NormalizeUTF8
and WordpieceTokenizeWithOffsets — besides core TensorFlow ops. The TF Serving
model server links tensorflow-text's ops (`@org_tensorflow_text//tensorflow_text:ops_lib`
in tensorflow_serving/model_servers/BUILD), and these three are old ops, so a standard
`tensorflow/serving` image of a matching TF version should load the model; this was not
run against a model server here. Other runtimes (the TF C API, Triton's TF backend) need
the tensorflow-text ops library loaded.

Keras 3 also exports SavedModels (`model.export(path, format="tf_saved_model")`,
`keras.export.ExportArchive`); that route serves tensors only, so the raw-text
signatures here are built on a `tf.Module` that holds the Keras model.
"""

import datetime
import json
import os
import re
import shutil
import tempfile
import uuid

import tensorflow as tf
import tensorflow_text as tf_text

from realformer_tf import checkpoint as ckpt
from realformer_tf import modeling
from realformer_tf.cli import UsageError
from realformer_tf.config import BertConfig
from realformer_tf.data.records import InputError

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


class ExportError(UsageError):
    """An export that cannot be written as asked (a UsageError: scripts report it as one
    message)."""


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
    return tf_text.regex_split(texts, _DELIMITERS, _KEPT_DELIMITERS)


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


def _take_first(tokens, lengths):
    """Keeps the first lengths[i] items of row i of a ragged [B, (T)] tensor."""
    positions = tf.ragged.range(tokens.row_lengths())
    return tf.ragged.boolean_mask(tokens, positions < tf.expand_dims(lengths, 1))


def _filled_like(tokens, value):
    return tf.ragged.map_flat_values(lambda t: tf.fill(tf.shape(t), value), tokens)


def _column(batch_size, value, present=None):
    """A ragged [B, (0 or 1)] column of `value` (where `present`, else empty)."""
    lengths = tf.ones([batch_size], tf.int64) if present is None else tf.cast(present, tf.int64)
    return tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(lengths)], value), lengths)


class BertTextEncoder(tf.Module):
    """Raw text -> BERT inputs, as the training scripts build them, in the graph.

    `tokenize(texts)` gives the WordPieces of each string (ragged); `encode(a, b)` the
    padded `input_ids` / `input_mask` / `segment_ids` int32 [B, L] and `tokens` [B, L].
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
        # original is applied on characters before WordPiece (see tokenize).
        self._wordpiece = tf_text.WordpieceTokenizer(
            self.vocab_table, suffix_indicator="##", max_bytes_per_word=4 * MAX_CHARS_PER_WORD,
            token_out_type=tf.string, unknown_token=UNK)

    def tokenize(self, texts):
        """string [B] -> ragged string [B, (T)]: FullTokenizer.tokenize per string."""
        words = basic_tokenize(texts, self.do_lower_case)
        # A word of more than 400 characters is one [UNK]; [UNK] is in the vocab, so
        # WordPiece maps the word "[UNK]" to itself (no real word contains brackets:
        # they are punctuation and split off).
        words = tf.ragged.map_flat_values(
            lambda w: tf.where(tf.strings.length(w, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD, UNK, w),
            words)
        pieces = self._wordpiece.tokenize(words)  # [B, (W), (P)]
        return pieces.merge_dims(1, 2)

    def _truncate(self, tokens_a, tokens_b):
        len_a, len_b = tokens_a.row_lengths(), tokens_b.row_lengths()
        if self.pair_truncation == "squad":
            # squad_lib: query[:max_query_length]; the doc gets max_seq_length - len - 3.
            keep_a = tf.minimum(len_a, self.max_query_length)
            keep_b = tf.minimum(len_b, self.max_seq_length - 3 - keep_a)
            has_b = tf.ones_like(len_b, tf.bool)
        else:
            # convert_single_example: a pair iff text_b has WordPieces; budget max-3 for
            # pairs (_truncate_seq_pair), max-2 for singles; a pair whose b is truncated
            # away ends after the first [SEP], as there.
            budget = tf.where(len_b > 0, self.max_seq_length - 3, self.max_seq_length - 2)
            keep_a, keep_b = longest_first_lengths(len_a, len_b, budget)
            has_b = keep_b > 0
        return _take_first(tokens_a, keep_a), _take_first(tokens_b, keep_b), has_b

    def encode(self, text_a, text_b=None):
        tokens_a = self.tokenize(text_a)
        batch_size = tf.shape(text_a, out_type=tf.int64)[0]
        if text_b is None:
            text_b = tf.fill(tf.shape(text_a), "")
        tokens_b = self.tokenize(text_b)
        tokens_a, tokens_b, has_b = self._truncate(tokens_a, tokens_b)
        first = tf.concat([_column(batch_size, CLS), tokens_a, _column(batch_size, SEP)], axis=1)
        second = tf.concat([tokens_b, _column(batch_size, SEP, has_b)], axis=1)
        tokens = tf.concat([first, second], axis=1)
        segments = tf.concat([_filled_like(first, 0), _filled_like(second, 1)], axis=1)
        ids = tf.ragged.map_flat_values(self.vocab_table.lookup, tokens)
        length = self.max_seq_length if self.pad_to_max_seq_length else None
        shape = [None, length]
        return {
            "input_ids": tf.cast(ids.to_tensor(0, shape=shape), tf.int32),
            "input_mask": tf.cast(_filled_like(tokens, 1).to_tensor(0, shape=shape), tf.int32),
            "segment_ids": tf.cast(segments.to_tensor(0, shape=shape), tf.int32),
            "tokens": tokens.to_tensor("", shape=shape),
        }


# -- the serving module ------------------------------------------------------------------
_TEXT = tf.TensorSpec([None], tf.string)
_IDS = tf.TensorSpec([None, None], tf.int32)


class BertServingModule(tf.Module):
    """What the SavedModel holds: the Keras model, the text encoder (with the vocab
    asset) and the serving functions. Only TF objects: it loads without this package."""

    def __init__(self, model, task, text_encoder, label_names=None, is_regression=False):
        super().__init__(name="bert_serving")
        self.model = model
        self.text_encoder = text_encoder
        self.task = task
        self.is_regression = bool(is_regression)
        self.max_seq_length = text_encoder.max_seq_length
        self._label_names = None if label_names is None else [str(n) for n in label_names]

        self.serve_text = tf.function(self._serve_text, input_signature=[
            tf.TensorSpec([None], tf.string, name="text_a"),
            tf.TensorSpec([None], tf.string, name="text_b")])
        self.serve_text_a = tf.function(self._serve_text_a, input_signature=[
            tf.TensorSpec([None], tf.string, name="text_a")])
        self.serve_token_ids = tf.function(self._serve_token_ids, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="input_ids"),
            tf.TensorSpec([None, None], tf.int32, name="input_mask"),
            tf.TensorSpec([None, None], tf.int32, name="segment_ids")])

    def signatures(self):
        sigs = {
            "serving_default": self.serve_text.get_concrete_function(),
            "serve_token_ids": self.serve_token_ids.get_concrete_function(),
        }
        if self.task != "squad":
            sigs["serve_text_a"] = self.serve_text_a.get_concrete_function()
        return sigs

    def _run(self, features):
        outputs = self.model(
            {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=False)
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
        ]
        with tf.control_dependencies(checks):
            features = {"input_ids": tf.identity(input_ids), "input_mask": input_mask,
                        "segment_ids": segment_ids}
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


def infer_task(init_checkpoint):
    """classifier / squad / encoder from the heads an original-named checkpoint holds."""
    names = ckpt.original_names(ckpt.list_checkpoint(ckpt.resolve_checkpoint(init_checkpoint))) or {}
    if "output_weights" in names:
        return "classifier"
    if any(n.startswith("cls/squad/") for n in names):
        return "squad"
    return "encoder"


def checkpoint_num_labels(init_checkpoint):
    """num_labels of the classifier head in a checkpoint (None without one)."""
    prefix = ckpt.resolve_checkpoint(init_checkpoint)
    raw = ckpt.list_checkpoint(prefix)
    names = ckpt.original_names(raw) or {}
    if "output_weights" not in names:
        return None
    return int(raw[names["output_weights"]][0])


def build_model(config, task, num_labels=None):
    """The float32 Keras model of a task (the serving graph runs in float32 whatever the
    training policy was)."""
    if task == "classifier":
        return modeling.BertClassifierModel(config, num_labels=num_labels, dtype="float32")
    if task == "squad":
        return modeling.BertSquadModel(config, dtype="float32")
    if task == "encoder":
        return modeling.BertModel(config, dtype="float32")
    raise ExportError(f"task {task!r} is not one of {', '.join(TASKS)}")


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


def export_model(model, export_dir, *, task, vocab_file, do_lower_case, max_seq_length,
                 label_names=None, is_regression=False, version=None, max_query_length=64,
                 pad_to_max_seq_length=False, extra_info=None):
    """Writes `model` (a built BertClassifierModel / BertSquadModel / BertModel with its
    weights) as `export_dir/<version>/`; returns that path.

    `version` defaults to the next free integer. The SavedModel is written under a
    temporary name and renamed into place, so a model server watching export_dir never
    sees a half-written version.
    """
    if task not in TASKS:
        raise ExportError(f"task {task!r} is not one of {', '.join(TASKS)}")
    config = model.config
    if max_seq_length < 3:
        raise ExportError(f"max_seq_length={max_seq_length} leaves no room for [CLS] text [SEP]")
    if max_seq_length > config.max_position_embeddings:
        raise ExportError(f"max_seq_length={max_seq_length} exceeds max_position_embeddings="
                          f"{config.max_position_embeddings} of the bert_config")
    if task == "squad" and not 0 < max_query_length < max_seq_length - 3:
        raise ExportError(f"max_query_length={max_query_length} must be in [1, max_seq_length - 3)")
    if task == "classifier":
        if is_regression:
            if model.num_labels != 1:
                raise ExportError(f"a regression model has one output, this one {model.num_labels}")
        elif label_names is None or len(label_names) != model.num_labels:
            raise ExportError(f"the classifier has {model.num_labels} outputs; give as many label names")
    tokens = read_vocab(vocab_file, config.vocab_size)

    version = next_version(export_dir) if version is None else int(version)
    if version < 0:
        raise ExportError(f"version must be a non-negative integer, got {version}")
    final = os.path.join(export_dir, str(version))
    if tf.io.gfile.exists(final):
        raise ExportError(f"{final} already exists; give another --version or a new --export_dir")
    tf.io.gfile.makedirs(export_dir)
    temp = os.path.join(export_dir, f"temp-{version}-{uuid.uuid4().hex[:8]}")

    local = tempfile.mkdtemp(prefix="realformer_export_")
    try:
        vocab_path = os.path.join(local, "vocab.txt")
        with open(vocab_path, "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in tokens))
        encoder = BertTextEncoder(
            vocab_path, do_lower_case, max_seq_length,
            pair_truncation="squad" if task == "squad" else "longest_first",
            max_query_length=max_query_length if task == "squad" else None,
            pad_to_max_seq_length=pad_to_max_seq_length)
        module = BertServingModule(model, task, encoder, label_names, is_regression)
        tf.saved_model.save(module, temp, signatures=module.signatures())
    finally:
        shutil.rmtree(local, ignore_errors=True)

    info = {
        "task": task,
        "model": config.describe(),
        "bert_config": config.to_dict(),
        "do_lower_case": bool(do_lower_case),
        "max_seq_length": int(max_seq_length),
        "pad_to_max_seq_length": bool(pad_to_max_seq_length),
        "label_names": label_names,
        "is_regression": bool(is_regression),
        "signatures": sorted(module.signatures()),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if task == "squad":
        info["max_query_length"] = int(max_query_length)
    info.update(extra_info or {})
    tf.io.gfile.makedirs(os.path.join(temp, "assets.extra"))
    with tf.io.gfile.GFile(os.path.join(temp, "assets.extra", EXPORT_INFO_FILE), "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    tf.io.gfile.rename(temp, final)
    return final


def export_from_checkpoint(export_dir, *, bert_config, init_checkpoint, vocab_file, do_lower_case,
                           task=None, num_labels=None, label_names=None, is_regression=False,
                           max_seq_length=128, version=None, max_query_length=64,
                           pad_to_max_seq_length=False):
    """Builds the task's model from `bert_config` (a BertConfig or a json path), loads an
    original-named checkpoint (or one of ours), and exports it; returns the version path.

    `task=None` takes it from the checkpoint's heads; a classifier's label count, when
    neither `label_names` nor `num_labels` is given, from its `output_weights`.
    """
    config = bert_config if isinstance(bert_config, BertConfig) else BertConfig.from_json_file(bert_config)
    prefix = ckpt.resolve_checkpoint(init_checkpoint)
    task = task or infer_task(prefix)
    if task not in TASKS:
        raise ExportError(f"task {task!r} is not one of {', '.join(TASKS)}")
    if task == "classifier" and not label_names and not num_labels and not is_regression:
        num_labels = checkpoint_num_labels(prefix)
        if num_labels is None:
            raise ExportError(f"{prefix} has no classifier head (output_weights); export it as "
                              "task encoder, or give the fine-tuned checkpoint")
    num_labels, label_names = _resolve_labels(task, num_labels, label_names, is_regression)
    read_vocab(vocab_file, config.vocab_size)  # fail before building the model
    model = build_model(config, task, num_labels)
    model.load_bert_checkpoint(prefix)
    return export_model(
        model, export_dir, task=task, vocab_file=vocab_file, do_lower_case=do_lower_case,
        max_seq_length=max_seq_length, label_names=label_names, is_regression=is_regression,
        version=version, max_query_length=max_query_length,
        pad_to_max_seq_length=pad_to_max_seq_length,
        extra_info={"init_checkpoint": prefix})


def saved_model_cli_command(path, task="classifier", text_a="the cat sees the river",
                            text_b="a dog likes the book"):
    """A ready-to-copy `saved_model_cli run` line for the text signature."""
    def expr(name, value):
        return f"{name}=[{json.dumps(value, ensure_ascii=False)}]"

    if task == "squad":
        text_a, text_b = "What does the cat see?", "The cat sees the river."
    exprs = ";".join([expr("text_a", text_a), expr("text_b", text_b)])
    return (f"saved_model_cli run --dir {path} --tag_set serve --signature_def serving_default "
            f"--input_exprs '{exprs}'")
