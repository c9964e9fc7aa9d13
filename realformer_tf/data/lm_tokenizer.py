"""The text <-> token ids of a causal LM's programs: a WordPiece vocab (BERT's
FullTokenizer, as the data was made with `--vocab_file`) or a SentencePiece model
(`--spm_model_file`). Exactly one of the two.

    tokenizer = LmTokenizer.from_files(vocab_file="vocab.txt")
    ids = tokenizer.encode("In the beginning")
    tokenizer.decode(ids)   # "in the beginning"
"""

from realformer_tf.data.vocab import check_vocab
from realformer_tf.errors import InputError, UsageError

# The token that ends a document in a WordPiece stream (BERT vocabs have no <eos>).
WORDPIECE_END_OF_DOCUMENT = "[SEP]"


class LmTokenizer:
    """encode / decode, the vocab size and the end-of-document id of one tokenizer."""

    def __init__(self, encode, decode, vocab_size, eos_id, description):
        self.encode, self.decode = encode, decode
        self.vocab_size, self.eos_id, self.description = vocab_size, eos_id, description

    @classmethod
    def from_files(cls, vocab_file=None, spm_model_file=None, do_lower_case=True):
        """The tokenizer of exactly one of `vocab_file` (WordPiece) and `spm_model_file`.

        Raises:
            UsageError: both or neither given.
            InputError: a file that cannot be read as one.
        """
        if bool(vocab_file) == bool(spm_model_file):
            raise UsageError("give exactly one of --vocab_file (WordPiece) and --spm_model_file (SentencePiece)")
        if vocab_file:
            return cls._wordpiece(vocab_file, do_lower_case)
        return cls._sentencepiece(spm_model_file)

    @classmethod
    def _wordpiece(cls, vocab_file, do_lower_case):
        from official.nlp.tools import tokenization

        tokens = check_vocab(vocab_file, required=("[UNK]", WORDPIECE_END_OF_DOCUMENT))
        full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)

        def encode(text):
            return full.convert_tokens_to_ids(full.tokenize(text))

        def decode(ids):
            return join_wordpieces(full.convert_ids_to_tokens([int(i) for i in ids]))

        return cls(encode, decode, len(tokens), full.vocab[WORDPIECE_END_OF_DOCUMENT], f"WordPiece {vocab_file}")

    @classmethod
    def _sentencepiece(cls, spm_model_file):
        import sentencepiece
        import tensorflow as tf

        if not tf.io.gfile.exists(spm_model_file):
            raise InputError(f"--spm_model_file {spm_model_file} does not exist")
        with tf.io.gfile.GFile(spm_model_file, "rb") as f:
            proto = f.read()
        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(proto)
        except RuntimeError as e:
            raise InputError(f"--spm_model_file {spm_model_file} is not a SentencePiece model "
                             f"({str(e).splitlines()[0]})") from None
        if processor.eos_id() < 0:
            raise InputError(f"--spm_model_file {spm_model_file} has no end-of-sentence token (</s>), which ends "
                             "each document of a causal LM's stream; train it with one (make_vocab.py does)")
        return cls(lambda text: processor.EncodeAsIds(text), lambda ids: processor.DecodeIds([int(i) for i in ids]),
                   processor.GetPieceSize(), processor.eos_id(), f"SentencePiece {spm_model_file}")

    def check_fits(self, vocab_size, source):
        """Raises InputError when the model's `vocab_size` is not this tokenizer's."""
        if vocab_size != self.vocab_size:
            raise InputError(f"{self.description} has {self.vocab_size} tokens but {source} has vocab_size="
                             f"{vocab_size}: give the vocab the model was trained with")


def join_wordpieces(tokens):
    """WordPiece tokens -> text: "##" pieces joined to the word before them."""
    words = []
    for token in tokens:
        if token.startswith("##") and words:
            words[-1] += token[2:]
        else:
            words.append(token)
    return " ".join(words)
