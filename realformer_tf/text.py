"""In-graph text clean-up that makes tensorflow-text's BertTokenizer agree with the
original BERT tokenizer (Model Garden's `tokenization.FullTokenizer`).

The original `BasicTokenizer._clean_text` drops NUL, U+FFFD and every "C*" category
character (control, format, private use, surrogate) except tab/newline/return, and maps
all "Zs" spaces (e.g. U+00A0) and tab/newline/return to " ". tensorflow-text's
BertTokenizer does neither (measured: "and\\u00a0nbsp" and "control\\u0000chars" split
differently), so the serving graph applies this first.
"""

import tensorflow as tf

_WHITESPACE = r"[\t\n\r\p{Zs}]"
_REMOVED = r"[\x{0}\x{fffd}\p{Cc}\p{Cf}\p{Co}\p{Cs}]"


def clean_text(texts):
    """The original BERT `_clean_text` on a string tensor (any shape)."""
    texts = tf.strings.regex_replace(texts, _WHITESPACE, " ")
    return tf.strings.regex_replace(texts, _REMOVED, "")
