"""SQuAD v1.1 / v2.0 data for run_squad.py (independent of the models).

The example reading, WordPiece feature conversion (doc_stride windows, max-context
marking, answer-span improvement), the n-best post-processing and the evaluation are
Model Garden's (`official.nlp.data.squad_lib`, `official.nlp.tools.squad_evaluate_*`),
which reproduce the original google-research/bert run_squad.py logic. This module adds
what the original left to tracebacks: SQuAD JSON files are checked up front, and a
missing file, malformed JSON, a missing field or an answer whose offset does not point
at its text becomes one `InputError` naming the file, the question and the fix.

Files written (as the original): `train.tf_record` (unique_ids, input_ids, input_mask,
segment_ids, start_positions, end_positions, is_impossible), `eval.tf_record` (the first
four), `predictions.json`, `nbest_predictions.json` and, for v2.0, `null_odds.json`.
"""

import collections
import json
import random

import tensorflow as tf
from official.nlp.data import squad_lib
from official.nlp.tools import squad_evaluate_v1_1, squad_evaluate_v2_0, tokenization

from realformer_tf.data.records import decode_record

from realformer_tf.errors import InputError
from realformer_tf.data.vocab import check_vocab
from realformer_tf.fileio import atomic_output, commit, temporary_name

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])


class SquadFile(collections.namedtuple("SquadFile", ["path", "data", "num_questions", "num_with_gold"])):
    """A checked SQuAD JSON file: its `data` list (articles), its question count, and how
    many questions carry gold answers (v1.1: at least one; v2.0: a list, empty = no answer)."""

    @property
    def has_answers(self):
        """Every question has gold answers, so the predictions can be evaluated."""
        return self.num_questions > 0 and self.num_with_gold == self.num_questions


# -- reading and checking --------------------------------------------------------------
def load_squad_file(path, flag_name, is_training, version_2_with_negative):
    """Reads and checks a SQuAD JSON file; returns a `SquadFile`.

    Checks the structure the readers rely on (data / paragraphs / context / qas / id /
    question) and, for training files, the answers: exactly one per answerable question
    (the original's rule), `is_impossible` present for v2.0, and each `answer_start`
    pointing at the answer's text inside the context.
    """
    if not path:
        raise InputError(f"--{flag_name} is required")
    if not tf.io.gfile.exists(path):
        raise InputError(f"--{flag_name} {path} does not exist; give a SQuAD JSON file "
                         "(e.g. train-v1.1.json, dev-v2.0.json)")
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        top = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(f"--{flag_name} {path} is not UTF-8 text ({e}); SQuAD files are "
                         "UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise InputError(f"--{flag_name} {path} is not valid JSON ({e.msg} at line {e.lineno} "
                         f"column {e.colno}); fix the file or point --{flag_name} at a SQuAD "
                         "JSON file") from None
    if not isinstance(top, dict) or not isinstance(top.get("data"), list):
        raise InputError(f"--{flag_name} {path} is JSON but not SQuAD: expected an object with a "
                         "'data' list of articles, as in train-v1.1.json / dev-v2.0.json")
    checker = _Checker(path, flag_name, is_training, version_2_with_negative)
    checker.check(top["data"])
    return SquadFile(path, top["data"], checker.num_questions, checker.num_with_gold)


class _Checker:
    def __init__(self, path, flag_name, is_training, version_2):
        self.path, self.flag, self.is_training, self.version_2 = path, flag_name, is_training, version_2
        self.num_questions = 0
        self.num_with_gold = 0
        self.bad_answers = []
        self.seen_ids = set()

    def fail(self, where, problem, fix):
        raise InputError(f"--{self.flag} {self.path}: {where} {problem}; {fix}")

    def field(self, obj, key, kind, where):
        value = obj.get(key) if isinstance(obj, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            got = "is missing" if not isinstance(obj, dict) or key not in obj else \
                f"is a {type(value).__name__}"
            self.fail(where, f"field {key!r} {got}, expected a {kind.__name__}",
                      "use the SQuAD JSON layout (data[].paragraphs[].context/qas[].id/question/answers)")
        return value

    def check(self, data):
        for i, article in enumerate(data):
            for j, paragraph in enumerate(self.field(article, "paragraphs", list, f"data[{i}]")):
                where = f"data[{i}].paragraphs[{j}]"
                context = self.field(paragraph, "context", str, where)
                for k, qa in enumerate(self.field(paragraph, "qas", list, where)):
                    self.check_question(qa, context, f"{where}.qas[{k}]")
        if self.bad_answers:
            first = self.bad_answers[0]
            more = len(self.bad_answers) - 1
            raise InputError(
                f"--{self.flag} {self.path}: {first}"
                + (f" ({more} more answer(s) have offset problems)" if more else "")
                + "; fix answer_start (a character offset into the paragraph's context) or the "
                "answer text so that context[answer_start:answer_start+len(text)] == text"
            )
        if self.num_questions == 0:
            raise InputError(f"--{self.flag} {self.path} holds no questions (no data[].paragraphs[].qas[])")

    def check_question(self, qa, context, where):
        if not isinstance(qa, dict) or "id" not in qa:
            self.fail(where, "has no 'id'", "every question needs a unique id")
        qid = qa["id"]
        if not isinstance(qid, (str, int)):
            self.fail(where, f"has an id of type {type(qid).__name__}", "question ids are strings")
        if qid in self.seen_ids:
            self.fail(f"{where}", f"repeats the question id {qid!r}", "question ids must be unique")
        self.seen_ids.add(qid)
        where = f"question {qid!r} ({where})"
        self.field(qa, "question", str, where)
        self.num_questions += 1
        answers = qa.get("answers")
        if isinstance(answers, list) and (answers or self.version_2) and all(
                isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
            self.num_with_gold += 1
        if not self.is_training:
            return
        if self.version_2:
            if not isinstance(qa.get("is_impossible"), bool):
                self.fail(where, "has no boolean 'is_impossible'",
                          "SQuAD v2.0 training data marks every question; for v1.1 data use "
                          "--version_2_with_negative=False")
            if qa["is_impossible"]:
                return
        answers = self.field(qa, "answers", list, where)
        if len(answers) != 1:
            hint = ("it looks like SQuAD v2.0 data: use --version_2_with_negative=True"
                    if not answers and not self.version_2 else
                    "for training each answerable question needs exactly one answer (as in train-v1.1.json)")
            self.fail(where, f"has {len(answers)} answers", hint)
        answer = answers[0]
        text = self.field(answer, "text", str, f"{where} answer")
        start = self.field(answer, "answer_start", int, f"{where} answer")
        problem = None
        if not text.strip():
            problem = "has an empty answer text"
        elif start < 0 or start + len(text) > len(context):
            problem = (f"has answer_start {start} with a {len(text)}-character answer {text!r}, "
                       f"beyond its {len(context)}-character context")
        elif " ".join(context[start:start + len(text)].split()) != " ".join(text.split()):
            problem = (f"has answer_start {start} pointing at {context[start:start + len(text)]!r}, "
                       f"not at the answer text {text!r}")
        if problem:
            self.bad_answers.append(f"{where} {problem}")


def read_examples(squad_file, is_training, version_2_with_negative):
    """`SquadFile` -> Model Garden `SquadExample`s (training: as the original, answers
    whose text cannot be recovered from the whitespace-split context are skipped)."""
    return squad_lib.read_squad_examples(squad_file.path, is_training, version_2_with_negative)


def make_tokenizer(vocab_file, do_lower_case, vocab_size=None):
    """Checks the vocab (and that its ids fit the model) and returns a FullTokenizer."""
    tokens = check_vocab(vocab_file)
    if vocab_size is not None and len(tokens) > vocab_size:
        raise InputError(
            f"--vocab_file {vocab_file} has {len(tokens)} tokens but the model's vocab_size is "
            f"{vocab_size}; use the vocab the checkpoint was trained with")
    return tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)


# -- features --------------------------------------------------------------------------
def _convert(examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training, sink):
    def output_fn(feature, is_padding=False):
        if is_padding:  # squad_lib's own padding; batches are padded in the input pipeline
            return
        feature.paragraph_mask = None  # XLNet-only extras, not written (original layout)
        feature.class_index = None
        sink(feature)

    squad_lib.convert_examples_to_features(
        examples=examples, tokenizer=tokenizer, max_seq_length=max_seq_length,
        doc_stride=doc_stride, max_query_length=max_query_length, is_training=is_training,
        output_fn=output_fn, batch_size=1,
    )


def convert_examples(examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training):
    """Examples -> list of Model Garden `InputFeatures` (one per doc_stride window),
    the original BERT layout: [CLS] query [SEP] context [SEP]."""
    features = []
    _convert(examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training,
             features.append)
    return features


def write_training_features(examples, tokenizer, max_seq_length, doc_stride, max_query_length, path):
    """Converts and streams training features to `path` (train.tf_record) without keeping
    them in memory, as the original; returns the feature count."""
    temporary = temporary_name(path)
    writer = squad_lib.FeatureWriter(filename=temporary, is_training=True)
    _convert(examples, tokenizer, max_seq_length, doc_stride, max_query_length, True,
             writer.process_feature)
    writer.close()
    commit(temporary, path)
    return writer.num_features


def write_features(features, path, is_training):
    temporary = temporary_name(path)
    writer = squad_lib.FeatureWriter(filename=temporary, is_training=is_training)
    for feature in features:
        writer.process_feature(feature)
    writer.close()
    commit(temporary, path)
    return writer.num_features


def shuffle_examples(examples, seed=12345):
    """The original shuffles the training examples with random.Random(12345)."""
    examples = list(examples)
    random.Random(seed).shuffle(examples)
    return examples


def feature_spec(max_seq_length, is_training):
    seq = tf.io.FixedLenFeature([max_seq_length], tf.int64)
    spec = {"unique_ids": tf.io.FixedLenFeature([], tf.int64),
            "input_ids": seq, "input_mask": seq, "segment_ids": seq}
    if is_training:
        for name in ("start_positions", "end_positions", "is_impossible"):
            spec[name] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def make_predict_dataset_fn(path, max_seq_length, num_features, global_batch_size):
    """`dataset_fn(input_context)` over eval.tf_record, in order, once, with every
    feature kept: the stream is padded with all-zero rows (unique_ids 0) to a multiple
    of the global batch, so batches stay fixed-size (TPUs) and each input pipeline gets
    the same number of them; callers drop rows with unique_ids 0."""
    spec = feature_spec(max_seq_length, is_training=False)
    padding = (-num_features) % global_batch_size

    def dataset_fn(input_context=None):
        batch_size, pipelines, pipeline_id = global_batch_size, 1, 0
        if input_context is not None:
            batch_size = input_context.get_per_replica_batch_size(global_batch_size)
            pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        d = tf.data.TFRecordDataset(path).map(lambda r: decode_record(r, spec))
        if padding:
            zeros = {name: tf.zeros(s.shape, tf.int32) for name, s in spec.items()}
            d = d.concatenate(tf.data.Dataset.from_tensors(zeros).repeat(padding))
        if pipelines > 1:
            d = d.shard(pipelines, pipeline_id)
        return d.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    return dataset_fn


# -- predictions -----------------------------------------------------------------------
def collect_results(features, unique_ids, start_logits, end_logits):
    """Model outputs (padding rows included, any order) -> one RawResult per feature."""
    wanted = {f.unique_id for f in features}
    results = [
        RawResult(int(uid), start.tolist(), end.tolist())
        for uid, start, end in zip(unique_ids.reshape([-1]), start_logits, end_logits)
        if int(uid) in wanted
    ]
    if len(results) != len(wanted):
        raise RuntimeError(f"prediction returned {len(results)} results for {len(wanted)} features")
    return results


def postprocess(examples, features, results, n_best_size, max_answer_length, do_lower_case,
                version_2_with_negative=False, null_score_diff_threshold=0.0, verbose=False):
    """-> (predictions {qas_id: text}, nbest {qas_id: [...]}, null_odds {qas_id: score}),
    the original write_predictions logic (Model Garden's postprocess_output)."""
    return squad_lib.postprocess_output(
        examples, features, results, n_best_size, max_answer_length, do_lower_case,
        version_2_with_negative=version_2_with_negative,
        null_score_diff_threshold=null_score_diff_threshold, verbose=verbose,
    )


def write_json(records, path):
    """json.dumps(indent=4) + newline, the original files' format."""
    with atomic_output(path) as f:
        f.write(json.dumps(records, indent=4) + "\n")


# -- evaluation ------------------------------------------------------------------------
def evaluate(data, predictions, version_2_with_negative, null_odds=None):
    """The official SQuAD evaluation (Model Garden's copies of evaluate-v1.1.py and
    evaluate-v2.0.py), on a 0-100 scale like the official scripts.

    v1.1: exact_match, f1, total. v2.0 (null_odds as the official --na-prob-file):
    exact_match, f1, total, HasAns_* / NoAns_*, and best_exact / best_f1 with the
    null-score threshold that reaches them (a value for --null_score_diff_threshold).
    """
    if not version_2_with_negative:
        result = squad_evaluate_v1_1.evaluate(data, predictions)
        total = sum(len(p["qas"]) for a in data for p in a["paragraphs"])
        return {"exact_match": 100.0 * result["exact_match"], "f1": 100.0 * result["final_f1"],
                "total": total}
    result = squad_evaluate_v2_0.evaluate(data, predictions, null_odds)
    out = {}
    for key, value in result.items():
        if key.startswith("pr_"):
            continue
        key = {"exact": "exact_match"}.get(key, key.replace("final_", "best_"))
        out[key] = value
    return out
