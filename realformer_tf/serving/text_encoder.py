"""Raw text -> BERT inputs in the TensorFlow graph: the original BERT tokenizer
(Model Garden's `FullTokenizer`: BasicTokenizer + WordPiece) rebuilt from
tensorflow-text ops, and the packing of single sentences and pairs.

    encoder = BertTextEncoder("vocab.txt", do_lower_case=True, max_seq_length=128)
    encoder.tokenize(tf.constant(["Hello, world!"]))    # ragged [[b"hello", b",", b"world", b"!"]]
    encoder.encode(tf.constant(["a question"]), tf.constant(["its context"]))
    # -> {"input_ids", "input_mask", "segment_ids": int32 [B, L], "tokens": string [B, L]}

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

The serving signatures (`serving.signatures`) run this encoder in front of the model.
"""

import uuid

import tensorflow as tf
import tensorflow_text as tf_text

from realformer_tf.errors import InputError

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


class _VocabAsset(tf.saved_model.Asset):
    """The vocab file as a SavedModel asset, with a string unique to its encoder.

    TensorFlow names a file-backed lookup table after str(filename) and, within a
    process, shares tables by name. A plain Asset's string is its object address, which
    a later encoder's Asset can reuse while this encoder's table still lives: that
    encoder would then silently look up this vocab. (An anonymous table avoids the
    sharing too, but TF1 loaders such as saved_model_cli and TF Serving then never
    initialize it.)
    """

    def __init__(self, path):
        super().__init__(path)
        self._name = f"vocab asset {uuid.uuid4().hex}"

    def __repr__(self):
        return f"<{self._name}>"


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
        self.vocab_file = _VocabAsset(vocab_asset_path)
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
