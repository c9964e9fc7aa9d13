"""One bucket's pretraining examples, made as Model Garden's port of the original
`create_pretraining_data.py` makes them for a whole corpus (pairs, a random next segment
from another document of the same bucket, dupe_factor rounds, 80/10/10 masking).

Plain functions with no Beam in them: `beam_pretraining.TokenizeBucket` and
`CreateExamples` call them in a worker, one bucket (tokenizing) or one round of a bucket
(making instances) at a time.
"""

import contextlib
import random

from realformer_tf.fileio import gfile


def read_documents(path, name, processor_text_fn):
    """Yields `((name, index), [line, ...])` for each document of the text file `path`:
    runs of non-blank lines (after Model Garden's text processing), as its reader splits
    them. Streams the file."""
    index, lines = 0, []
    with gfile().GFile(path, "rb") as f:
        for raw in f:
            line = processor_text_fn(raw)
            if line:
                lines.append(line)
            elif lines:
                yield (name, index), lines
                index, lines = index + 1, []
    if lines:
        yield (name, index), lines


def tokenize_documents(documents, tokenizer):
    """[(id, lines)] -> the non-empty token-list documents, in order of id (the order
    documents arrive in is the runner's business, not the output's)."""
    tokenized = []
    for _, lines in sorted(documents, key=lambda d: d[0]):
        doc = [tokens for tokens in (tokenizer.tokenize(line) for line in lines) if tokens]
        if doc:
            tokenized.append(doc)
    return tokenized


def round_instances(all_documents, config, rng, vocab_words, mg):
    """One of Model Garden's `create_training_instances` rounds (it makes `dupe_factor`
    of them over the whole corpus), on one bucket's documents in their shuffled order:
    the instances of every document, each with another mask. Yields TrainingInstances."""
    for index in range(len(all_documents)):
        yield from mg.create_instances_from_document(
            all_documents, index, config.max_seq_length, config.short_seq_prob,
            config.masked_lm_prob, config.max_predictions_per_seq, vocab_words, rng,
            config.do_whole_word_mask, config.max_ngram_size)


@contextlib.contextmanager
def seeded_global_random(seed, enabled):
    """Model Garden's n-gram masking draws the n-gram size from the `random` module
    itself, not from the rng it is given: seeded per bucket here (and restored after) so
    that --max_ngram_size runs are reproducible too."""
    saved = random.getstate() if enabled else None
    if enabled:
        random.seed(seed)
    try:
        yield
    finally:
        if saved is not None:
            random.setstate(saved)


def example_bytes(instance, tokenizer, config, mg):
    """A TrainingInstance as a serialized tf.train.Example: the features Model Garden's
    `write_instance_to_example_files` writes, serialized deterministically (map keys
    sorted, so the bytes do not depend on the process)."""
    import tensorflow as tf

    length, predictions = config.max_seq_length, config.max_predictions_per_seq
    input_ids = tokenizer.convert_tokens_to_ids(instance.tokens)
    real = len(input_ids)
    pad = [0] * (length - real)
    masked_ids = tokenizer.convert_tokens_to_ids(instance.masked_lm_labels)
    masked = len(masked_ids)
    unused = [0] * (predictions - masked)
    ids_name, segments_name = (("input_word_ids", "input_type_ids") if config.use_v2_feature_names
                               else ("input_ids", "segment_ids"))
    features = {
        ids_name: mg.create_int_feature(input_ids + pad),
        segments_name: mg.create_int_feature(list(instance.segment_ids) + pad),
        "input_mask": mg.create_int_feature([1] * real + pad),
        "masked_lm_positions": mg.create_int_feature(list(instance.masked_lm_positions) + unused),
        "masked_lm_ids": mg.create_int_feature(masked_ids + unused),
        "masked_lm_weights": mg.create_float_feature([1.0] * masked + [0.0] * (predictions - masked)),
        "next_sentence_labels": mg.create_int_feature([1 if instance.is_random_next else 0]),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString(deterministic=True)
