"""run_squad.py: SQuAD v1.1 / v2.0 data checks, span mapping, evaluation, end to end."""

import json
import os

import pytest

import helpers_data as h

from realformer_tf.data import squad
from realformer_tf.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Unicode (accents stripped by the uncased tokenizer, CJK split per character), curly
# quotes, punctuation glued to words, tabs, newlines and double spaces.
CONTEXT_1 = ("Steve Smith's café opened in Zürich in 1998.  It serves crème brûlée, coffee and "
             "(famous) naïve art.\nThe\towner said: “Welcome!”")
# Longer than one max_seq_length=48 window: exercises doc_stride and max-context.
CONTEXT_2 = ("RealFormer is a Transformer that adds residual attention to every layer of the "
             "model. It keeps the raw attention scores of each layer and passes them on to the "
             "next layer, which adds its own scores before the softmax. The authors report "
             "better results on masked language modeling and on question answering with the "
             "same number of parameters. After the last  stage of training, the team met "
             "again. The city 東京 hosts the final workshop on forty-two models.")

ANSWERABLE = [
    # (id, context index, question, answer text)
    ("q-owner", 0, "Who owns the café?", "Steve Smith"),
    ("q-city", 0, "Where did the café open?", "Zürich"),
    ("q-dessert", 0, "What dessert does it serve?", "crème brûlée"),
    ("q-art", 0, "What kind of art is it?", "naïve art"),
    ("q-year", 0, "When did it open?", "1998"),
    ("q-famous", 0, "Is the art famous?", "famous"),
    ("q-said", 0, "What did the owner say?", "Welcome!"),
    ("q-adds", 1, "What does RealFormer add?", "residual attention"),
    ("q-tokyo", 1, "Which city hosts the workshop?", "東京"),
    ("q-number", 1, "How many models?", "forty-two"),
    ("q-stage", 1, "After which stage did the team meet?", "last  stage"),
]
IMPOSSIBLE = [
    ("q-mayor", 0, "Who is the mayor of Paris?", "Steve Smith"),
    ("q-end", 1, "When did the workshop end?", "forty-two"),
]
CONTEXTS = [CONTEXT_1, CONTEXT_2]


def squad_json(version_2):
    paragraphs = [{"context": c, "qas": []} for c in CONTEXTS]
    for qid, ci, question, text in ANSWERABLE:
        qa = {"id": qid, "question": question,
              "answers": [{"text": text, "answer_start": CONTEXTS[ci].index(text)}]}
        if version_2:
            qa["is_impossible"] = False
        paragraphs[ci]["qas"].append(qa)
    if version_2:
        for qid, ci, question, text in IMPOSSIBLE:
            paragraphs[ci]["qas"].append({
                "id": qid, "question": question, "answers": [], "is_impossible": True,
                "plausible_answers": [{"text": text, "answer_start": CONTEXTS[ci].index(text)}]})
    return {"version": "v2.0" if version_2 else "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    return str(path)


def write_files(d):
    """The vocab (every word of the texts; two words only as WordPieces), a tiny BERT
    config and the v1.1 / v2.0 JSON files under the folder `d`."""
    from official.nlp.tools import tokenization

    basic = tokenization.BasicTokenizer(do_lower_case=True)
    words = set()
    for text in CONTEXTS + [q for _, _, q, _ in ANSWERABLE + IMPOSSIBLE]:
        words.update(basic.tokenize(text))
    # Two words only as WordPieces, so answers also cross "##" pieces.
    words -= {"realformer", "workshop"}
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words) + ["real", "##former", "work", "##shop"]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = {
        "vocab_size": len(vocab), "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 32, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 64, "type_vocab_size": 2,
        "initializer_range": 0.02, "residual_attention": True,
    }
    return {
        "dir": d,
        "vocab": str(d / "vocab.txt"),
        "vocab_size": len(vocab),
        "config": write_json(d / "bert_config.json", config),
        "v1": write_json(d / "squad-v1.1.json", squad_json(False)),
        "v2": write_json(d / "squad-v2.0.json", squad_json(True)),
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("squad"))


def run_squad(args):
    """run_squad.py's main(argv) in this process: CompletedProcess (returncode, stdout, stderr)."""
    return h.run_script("run_squad.py", *args)


# -- data: span mapping ----------------------------------------------------------------
@pytest.mark.parametrize("version_2", [False, True])
def test_gold_spans_map_back_to_the_original_text(files, version_2):
    """Gold token positions from the feature conversion, fed through the original n-best
    post-processing as one-hot logits, give back each answer's original text (accents,
    CJK, punctuation kept; runs of whitespace inside an answer become one space, as in the
    original BERT), also across doc_stride windows."""
    path = files["v2" if version_2 else "v1"]
    squad_file = squad.load_squad_file(path, "train_file", True, version_2)
    assert squad_file.num_questions == len(ANSWERABLE) + (len(IMPOSSIBLE) if version_2 else 0)
    examples = squad.read_examples(squad_file, True, version_2)
    assert len(examples) == squad_file.num_questions  # nothing skipped
    tokenizer = squad.make_tokenizer(files["vocab"], True)
    features = squad.convert_examples(examples, tokenizer, 48, 16, 16, is_training=True)
    assert max(f.doc_span_index for f in features) >= 2  # CONTEXT_2 needs several windows

    results = []
    for feature in features:
        example = examples[feature.example_index]
        # v2 impossible questions point at [CLS]; answerable ones at the window that has the
        # answer's start token with maximal context.
        if example.is_impossible:
            target = (0, 0) if feature.doc_span_index == 0 else None
        elif feature.is_impossible or not feature.token_is_max_context.get(feature.start_position):
            target = None
        else:
            target = (feature.start_position, feature.end_position)
        if target is None:
            continue
        start, end = [-10.0] * 48, [-10.0] * 48
        start[target[0]], end[target[1]] = 10.0, 10.0
        if version_2 and not example.is_impossible:
            start[0] = end[0] = -20.0
        results.append(squad.RawResult(feature.unique_id, start, end))

    predictions, nbest, null_odds = squad.postprocess(
        examples, features, results, n_best_size=5, max_answer_length=30, do_lower_case=True,
        version_2_with_negative=version_2)
    expected = {qid: " ".join(text.split()) for qid, _, _, text in ANSWERABLE}
    if version_2:
        expected.update({qid: "" for qid, _, _, _ in IMPOSSIBLE})
        assert set(null_odds) == set(expected)
    assert predictions == expected
    for qid in ("q-city", "q-dessert", "q-art", "q-said", "q-tokyo", "q-number", "q-famous", "q-adds"):
        assert predictions[qid] == next(t for i, _, _, t in ANSWERABLE if i == qid)  # exact text
    assert predictions["q-stage"] == "last stage"
    assert all(entries[0]["probability"] > 0.99 for entries in nbest.values())


def test_training_records_have_the_original_features(files, tmp_path):
    import tensorflow as tf

    squad_file = squad.load_squad_file(files["v2"], "train_file", True, True)
    examples = squad.read_examples(squad_file, True, True)
    tokenizer = squad.make_tokenizer(files["vocab"], True)
    features = squad.convert_examples(examples, tokenizer, 48, 16, 16, is_training=True)
    path = str(tmp_path / "train.tf_record")
    assert squad.write_training_features(examples, tokenizer, 48, 16, 16, path) == len(features)
    records = [tf.train.Example.FromString(r.numpy()).features.feature for r in tf.data.TFRecordDataset(path)]
    assert len(records) == len(features)
    assert set(records[0]) == {"unique_ids", "input_ids", "input_mask", "segment_ids",
                               "start_positions", "end_positions", "is_impossible"}
    for record, feature in zip(records, features):
        assert record["unique_ids"].int64_list.value == [feature.unique_id]
        assert list(record["input_ids"].int64_list.value) == feature.input_ids
        assert record["start_positions"].int64_list.value == [feature.start_position]
        assert record["end_positions"].int64_list.value == [feature.end_position]
        assert record["is_impossible"].int64_list.value == [int(feature.is_impossible)]
    tokens = features[0].tokens
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and len(tokens) <= 48


# -- evaluation ------------------------------------------------------------------------
def test_evaluation_v1_matches_hand_computed():
    data = [{"paragraphs": [{"context": "x", "qas": [
        {"id": "a", "question": "?", "answers": [{"text": "Steve Smith"}, {"text": "Smith"}]},
        {"id": "b", "question": "?", "answers": [{"text": "the Eiffel Tower"}]},
        {"id": "c", "question": "?", "answers": [{"text": "1998"}]},
    ]}]}]
    # a: exact after normalization (case, punctuation). b: gold "eiffel tower" (article
    # dropped) vs "eiffel tower in paris": P = 2/4, R = 2/2, F1 = 2/3. c: unanswered -> 0.
    results = squad.evaluate(data, {"a": "steve smith.", "b": "Eiffel Tower in Paris"}, False)
    assert results["exact_match"] == pytest.approx(100.0 / 3)
    assert results["f1"] == pytest.approx(100.0 * (1 + 2 / 3) / 3)
    assert results["total"] == 3


def test_evaluation_v2_matches_hand_computed():
    qas = [
        {"id": "a", "question": "?", "answers": [{"text": "Zürich", "answer_start": 0}]},
        {"id": "b", "question": "?", "answers": []},
        {"id": "c", "question": "?", "answers": []},
        {"id": "d", "question": "?", "answers": [{"text": "crème brûlée", "answer_start": 0}]},
    ]
    data = [{"paragraphs": [{"context": "x", "qas": qas}]}]
    predictions = {"a": "zürich", "b": "", "c": "something", "d": ""}
    null_odds = {"a": -2.0, "b": 3.0, "c": 0.5, "d": 1.5}
    results = squad.evaluate(data, predictions, True, null_odds)
    # Right: a (case only), b (no answer). Wrong: c (answered an impossible one), d.
    assert results["exact_match"] == pytest.approx(50.0)
    assert results["f1"] == pytest.approx(50.0)
    assert results["total"] == 4
    assert results["HasAns_exact"] == pytest.approx(50.0) and results["HasAns_total"] == 2
    assert results["NoAns_exact"] == pytest.approx(50.0) and results["NoAns_total"] == 2
    # Thresholds in null-odds order a(-2) c(.5) d(1.5) b(3): answering only a (threshold -2)
    # scores a, b and c right -> 75.
    assert results["best_exact"] == pytest.approx(75.0)
    assert results["best_exact_thresh"] == pytest.approx(-2.0)
    assert results["best_f1"] == pytest.approx(75.0)
    assert results["best_f1_thresh"] == pytest.approx(-2.0)
    assert not any(k.startswith(("pr_", "final_")) for k in results)


# -- data: clear errors ----------------------------------------------------------------
def _expect_input_error(tmp_path, obj_or_text, *fragments, is_training=True, version_2=False):
    path = tmp_path / "data.json"
    if isinstance(obj_or_text, str):
        path.write_text(obj_or_text, encoding="utf-8")
    else:
        write_json(path, obj_or_text)
    with pytest.raises(InputError) as info:
        squad.load_squad_file(str(path), "train_file", is_training, version_2)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_bad_squad_files_give_one_clear_message(tmp_path):
    good = squad_json(False)
    _expect_input_error(tmp_path, '{"data": [{"paragraphs": ', "not valid JSON", "line 1")
    _expect_input_error(tmp_path, '[1, 2]', "expected an object with a 'data' list")
    _expect_input_error(tmp_path, {"data": [{"paragraphs": [{"qas": []}]}]}, "'context'", "data[0].paragraphs[0]")

    beyond = json.loads(json.dumps(good))
    beyond["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] = 5000
    _expect_input_error(tmp_path, beyond, "q-city", "answer_start 5000", "beyond")

    shifted = json.loads(json.dumps(good))
    shifted["data"][0]["paragraphs"][0]["qas"][2]["answers"][0]["answer_start"] += 3
    shifted["data"][0]["paragraphs"][0]["qas"][3]["answers"][0]["answer_start"] += 1
    _expect_input_error(tmp_path, shifted, "q-dessert", "crème brûlée", "1 more")

    _expect_input_error(tmp_path, squad_json(True), "q-mayor", "--version_2_with_negative=True")
    no_flag = json.loads(json.dumps(squad_json(True)))
    del no_flag["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"]
    _expect_input_error(tmp_path, no_flag, "q-owner", "is_impossible", version_2=True)

    with pytest.raises(InputError, match="does not exist"):
        squad.load_squad_file(str(tmp_path / "absent.json"), "predict_file", False, False)
    with pytest.raises(InputError, match="vocab_file .* does not exist"):
        squad.make_tokenizer(str(tmp_path / "absent_vocab.txt"), True)


def test_predict_files_need_no_answers(tmp_path):
    data = squad_json(False)
    for paragraph in data["data"][0]["paragraphs"]:
        for qa in paragraph["qas"]:
            del qa["answers"]
    path = write_json(tmp_path / "test.json", data)
    squad_file = squad.load_squad_file(path, "predict_file", False, False)
    assert squad_file.num_questions == len(ANSWERABLE) and not squad_file.has_answers
    assert squad_file.num_with_gold == 0
    # v2.0 dev files: empty answer lists are gold "no answer"; read as v1.1 they are not.
    dev2 = write_json(tmp_path / "dev2.json", squad_json(True))
    assert squad.load_squad_file(dev2, "predict_file", False, True).has_answers
    as_v1 = squad.load_squad_file(dev2, "predict_file", False, False)
    assert not as_v1.has_answers and as_v1.num_with_gold == len(ANSWERABLE)


def _long_squad_input(tmp_path):
    """Two copies of the v2.0 file's article (4 paragraphs; the copies' ids end in "-2"),
    q-city with a second answer (as dev files have)."""
    paragraphs = []
    for copy in ("", "-2"):
        for paragraph in json.loads(json.dumps(squad_json(True)))["data"][0]["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["id"] += copy
                if qa["id"].startswith("q-city"):
                    qa["answers"].append({"text": "in Zürich", "answer_start": CONTEXT_1.index("in Zürich")})
            paragraphs.append(paragraph)
    return write_json(tmp_path / "dev.json", {"version": "v2.0", "data": [{"title": "a", "paragraphs": paragraphs}]})


def test_make_long_squad_joins_paragraphs_and_moves_every_answer(tmp_path):
    """experiments/make_long_squad.py: 4 paragraphs -> 2 documents of 2, the second held
    out; every answer still at its answer_start; training keeps the first answer only."""
    source = _long_squad_input(tmp_path)
    train, held_out = tmp_path / "long" / "train.json", tmp_path / "long" / "dev.json"
    proc = h.run_script("experiments/make_long_squad.py", *h.flags(
        input_file=source, paragraphs=2, held_out_every=2, train_file=train, predict_file=held_out))
    assert proc.returncode == 0, proc.stderr
    assert f"{train}: 1 documents, {len(ANSWERABLE) + len(IMPOSSIBLE)} questions" in proc.stdout
    documents = {name: json.load(open(path, encoding="utf-8"))["data"] for name, path in
                 (("train", train), ("held_out", held_out))}
    joined = CONTEXT_1 + "\n\n" + CONTEXT_2
    for name, docs in documents.items():
        assert len(docs) == 1 and len(docs[0]["paragraphs"]) == 1
        paragraph = docs[0]["paragraphs"][0]
        assert paragraph["context"] == joined
        for qa in paragraph["qas"]:
            for answer in qa["answers"] + qa.get("plausible_answers", []):
                start = answer["answer_start"]
                assert joined[start:start + len(answer["text"])] == answer["text"], (name, qa["id"])
    city = {name: next(qa for qa in docs[0]["paragraphs"][0]["qas"] if qa["id"].startswith("q-city"))
            for name, docs in documents.items()}
    assert len(city["train"]["answers"]) == 1 and len(city["held_out"]["answers"]) == 2
    assert {qa["id"] for qa in documents["held_out"][0]["paragraphs"][0]["qas"]} == \
        {qid + "-2" for qid, *_ in ANSWERABLE + IMPOSSIBLE}
    # run_squad.py's reader takes both files.
    assert squad.load_squad_file(str(train), "train_file", True, True).num_questions == 13
    assert squad.load_squad_file(str(held_out), "predict_file", False, True).has_answers


def test_make_long_squad_refuses_bad_input_with_one_line(tmp_path):
    source = _long_squad_input(tmp_path)
    outputs = dict(train_file=tmp_path / "t.json", predict_file=tmp_path / "p.json")
    one_document = h.run_script("experiments/make_long_squad.py", *h.flags(input_file=source, paragraphs=8,
                                                                           **outputs))
    h.one_error_line(one_document, "1 document(s)", "none held out", "--paragraphs")
    data = json.load(open(source, encoding="utf-8"))
    data["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] += 2
    shifted = write_json(tmp_path / "shifted.json", data)
    bad_offset = h.run_script("experiments/make_long_squad.py", *h.flags(input_file=shifted, paragraphs=2, **outputs))
    h.one_error_line(bad_offset, "'q-adds'", "'residual attention'", "answer_start")
    not_squad = h.run_script("experiments/make_long_squad.py", *h.flags(
        input_file=write_json(tmp_path / "list.json", [1, 2]), **outputs))
    h.one_error_line(not_squad, "list.json", "not SQuAD JSON")
    missing = h.run_script("experiments/make_long_squad.py", *h.flags(input_file=tmp_path / "no.json", **outputs))
    h.one_error_line(missing, "--input_file", "no.json")
    assert not (tmp_path / "t.json").exists()


def test_script_errors_exit_1_with_one_message(files, tmp_path):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"data": [{"paragraphs": [{"context": "abc", "qas": [', encoding="utf-8")
    offsets = squad_json(False)
    offsets["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] = 999
    bad_offsets = write_json(tmp_path / "offsets.json", offsets)
    common = [f"--bert_config_file={files['config']}", f"--vocab_file={files['vocab']}",
              "--max_seq_length=48", "--max_query_length=16"]
    procs = {
        "json": run_squad(common + [f"--output_dir={tmp_path / 'out1'}", "--do_predict=true",
                                    f"--predict_file={bad_json}"]),
        "offset": run_squad(common + [f"--output_dir={tmp_path / 'out2'}", "--do_train=true",
                                      f"--train_file={bad_offsets}"]),
    }
    outputs = {name: (p.stdout, p.stderr, p.returncode) for name, p in procs.items()}
    for name, fragments in (("json", [str(bad_json), "not valid JSON", "line 1"]),
                            ("offset", [bad_offsets, "q-adds", "answer_start 999", "beyond"])):
        stdout, stderr, code = outputs[name]
        assert code == 1, (stdout, stderr)
        assert "Traceback" not in stderr, stderr
        lines = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1, stderr
        for fragment in fragments:
            assert fragment in lines[0], lines[0]
    assert not os.path.exists(tmp_path / "out2" / "train.tf_record")  # nothing written


# -- end to end ------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("version_2", [False, True])
def test_run_squad_train_and_predict(files, tmp_path, version_2):
    data_file = files["v2" if version_2 else "v1"]
    out = tmp_path / "out"
    proc = run_squad([
        f"--bert_config_file={files['config']}", f"--vocab_file={files['vocab']}",
        f"--train_file={data_file}", f"--predict_file={data_file}", f"--output_dir={out}",
        "--do_train=true", "--do_predict=true", f"--version_2_with_negative={version_2}",
        "--max_seq_length=48", "--doc_stride=16", "--max_query_length=16",
        "--train_batch_size=4", "--predict_batch_size=5", "--num_train_epochs=2",
        "--learning_rate=1e-3", "--iterations_per_loop=3", "--save_checkpoints_steps=3",
        "--n_best_size=5", "--seed=1",
    ])
    stdout, stderr = proc.stdout, proc.stderr
    assert proc.returncode == 0, stdout + stderr
    assert "RealFormer" in stdout.splitlines()[0]  # the variant is stated first

    qids = {qid for qid, *_ in ANSWERABLE + (IMPOSSIBLE if version_2 else [])}
    text = (out / "predictions.json").read_text(encoding="utf-8")
    assert text.startswith('{\n    "')  # indent=4, as the original
    predictions = json.loads(text)
    assert set(predictions) == qids and all(isinstance(v, str) for v in predictions.values())
    nbest = json.loads((out / "nbest_predictions.json").read_text(encoding="utf-8"))
    assert set(nbest) == qids
    for entries in nbest.values():
        assert 1 <= len(entries) <= 5 + version_2
        assert set(entries[0]) == {"text", "probability", "start_logit", "end_logit"}
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0, abs=1e-5)
    if version_2:
        null_odds = json.loads((out / "null_odds.json").read_text(encoding="utf-8"))
        assert set(null_odds) == qids
    else:
        assert not (out / "null_odds.json").exists()

    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
    assert list(results) == sorted(results)
    assert {"exact_match", "f1", "total", "global_step"} <= set(results)
    assert int(results["global_step"]) == int(len(qids) / 4 * 2)
    assert int(results["total"]) == len(qids)
    assert 0.0 <= float(results["f1"]) <= 100.0
    if version_2:
        assert {"HasAns_exact", "NoAns_f1", "best_f1", "best_f1_thresh"} <= set(results)
    for name in ("train.tf_record", "eval.tf_record", "bert_model.ckpt.index", "bert_config.json"):
        assert (out / name).exists(), name
