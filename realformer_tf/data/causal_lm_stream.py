"""Raw text -> the causal-LM token stream -> blocks of `max_seq_length` tokens, as
`create_pretraining_data.py --objective=causal_lm` makes them in one process and as its
Beam pipeline (`beam_causal_lm.py`) makes them on workers: the same functions in both,
so the two give the same blocks.

- Documents: runs of non-blank lines, read as the masked-LM path reads them (Model
  Garden's text processing); a new file starts a new document. Files in the order given.
- The stream: each document's lines tokenized and joined, then one end-of-document token
  (WordPiece: `[SEP]`; SentencePiece: the model's `</s>`). A document with no token adds
  nothing, not even the end token.
- Blocks: the stream cut every `max_seq_length` tokens, block b holding tokens
  [b * L, (b + 1) * L); the last incomplete block is dropped (fairseq's
  `--sample-break-mode none`).
- Order: blocks are written in order of `block_key(seed, b)`, a seeded shuffle that each
  block's key gives on its own (no worker needs the others' to know where a block goes).
"""

import array
import dataclasses

from realformer_tf.data.beam_pretraining import stable_int
from realformer_tf.data.lm_tokenizer import LmTokenizer


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """Which tokenizer makes the stream: exactly one of `vocab_file` (WordPiece, Model
    Garden's FullTokenizer with `do_lower_case`) and `spm_model_file` (SentencePiece,
    which folds case by its own rules). Plain and picklable: Beam workers build the
    tokenizer from it."""

    vocab_file: str = None
    spm_model_file: str = None
    do_lower_case: bool = True


class DocumentTokenizer:
    """A document's lines -> its ids followed by the end-of-document id."""

    def __init__(self, line_ids, end_id, size, description):
        self._line_ids, self.end_id, self.size, self.description = line_ids, end_id, size, description

    def document_ids(self, lines):
        """The ids of `lines`, then the end id; [] for a document without a token."""
        ids = [i for line in lines for i in self._line_ids(line)]
        return ids + [self.end_id] if ids else []


def build_tokenizer(spec):
    """The DocumentTokenizer of `spec`, its files checked (one InputError line each): the
    causal-LM programs' own tokenizer (`lm_tokenizer.LmTokenizer`), so that the data and
    the prompts of a trained model are tokenized alike."""
    tokenizer = LmTokenizer.from_files(vocab_file=spec.vocab_file, spm_model_file=spec.spm_model_file,
                                       do_lower_case=spec.do_lower_case)
    return DocumentTokenizer(tokenizer.encode, tokenizer.eos_id, tokenizer.vocab_size, tokenizer.description)


def read_documents(files):
    """Yields each document's lines, files in order (`bucket_examples.read_documents`,
    the masked-LM Beam path's reader: Model Garden's text processing, a new file a new
    document)."""
    from official.nlp.data import create_pretraining_data as mg

    from realformer_tf.data.bucket_examples import read_documents as read_file

    processor_text_fn = mg.get_processor_text_fn(False, True)  # (lower-casing is the tokenizer's)
    for position, path in enumerate(files):
        for _, lines in read_file(path, position, processor_text_fn):
            yield lines


@dataclasses.dataclass
class Stream:
    """The token stream of a corpus: `ids` (int32), `documents` with at least one token."""

    ids: array.array
    documents: int


def token_stream(documents, tokenizer, on_document=None):
    """The Stream of `documents` (each a list of lines); `on_document(lines)` is called
    after each (a progress display)."""
    ids, count = array.array("i"), 0
    for lines in documents:
        document = tokenizer.document_ids(lines)
        ids.extend(document)
        count += bool(document)
        if on_document is not None:
            on_document(lines)
    return Stream(ids, count)


def block_key(seed, index):
    """Where block `index` goes in the output: blocks are written in order of this key
    (and, with shards, to shard key % N)."""
    return stable_int(seed, "causal_lm_block", index)


def block_order(num_blocks, seed):
    """The block indices in output order."""
    return sorted(range(num_blocks), key=lambda b: (block_key(seed, b), b))


def blocks_touched(start, length, total, max_seq_length):
    """For the stream span [start, start + length) of a stream of `total` tokens: yields
    (block, lo, hi) for each complete block b of the stream that the span overlaps, with
    [lo, hi) the overlap (stream positions). Blocks past the last complete one (the
    dropped tail) are not yielded."""
    full = total // max_seq_length
    first, last = start // max_seq_length, (start + length - 1) // max_seq_length
    for block in range(first, min(last + 1, full)):
        lo, hi = max(block * max_seq_length, start), min((block + 1) * max_seq_length, start + length)
        yield block, lo, hi


def not_enough_text(tokens, max_seq_length):
    """Why a corpus of `tokens` tokens gives no block (after its --input_file)."""
    if not tokens:
        return "yielded no tokens to build blocks from"
    return (f"yielded {tokens} tokens, fewer than one block of --max_seq_length={max_seq_length}; give more text "
            "or a smaller --max_seq_length")
