"""What a TPU requires of the training step, proven without a TPU.

A TPU runs the per-replica step (Trainer.replica_train_step / replica_eval_step) as
one XLA program. For every model variant, ETC, and the classifier and SQuAD tasks:
- the step compiles with XLA (`jit_compile=True` must compile every op or fail);
- its HLO has no f64 (TPUs have no float64), no host transfer or custom call
  (outfeed/infeed/send/recv/custom-call), and no dynamic dimension (`<=` bounds);
- its TensorFlow graph has no op that only a host runs (Python functions, strings);
- its inputs come from the package's real input pipelines with fully static shapes;
- nothing in it depends on a Python value that changes per step: two steps over two
  different batches use one trace.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from realformer_tf import etc_modeling, optimization
from realformer_tf.training import distribution
from realformer_tf.jobs import smoke_check
from realformer_tf.data import glue, records
from realformer_tf.data import pretraining as pretraining_data
from realformer_tf.data import squad as squad_data
from realformer_tf.families import get_family
from realformer_tf.jobs.runner import RunOptions
from realformer_tf.jobs.tasks.classifier import ClassifierTask
from realformer_tf.jobs.tasks.pretraining import PretrainingTask
from realformer_tf.jobs.tasks.squad import SquadTask
from realformer_tf.training.trainer import Trainer

L, P, B = 24, 3, 3  # sequence length, masked predictions, batch: not powers of two
SIZE = smoke_check.Size(hidden_size=16, num_layers=2, num_heads=2, seq_length=L, max_predictions=P,
                        batch_size=B, vocab_size=h.vocab_size(), etc_tokens_per_global=8)
HOST_ONLY_HLO = ("outfeed", "infeed", "send", "recv", "send-done", "recv-done", "custom-call")
HOST_ONLY_TF_OPS = re.compile(r"PyFunc|Print|String|Regex|Substr|Unicode|Dataset|Iterator|Assert|Where$")


def random_records(path, spec, count, bounds, seed=0):
    """`count` tf.Examples for a FixedLenFeature `spec`, ints drawn below `bounds[name]`."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(count):
            feature = {}
            for name, f in spec.items():
                shape = f.shape or [1]
                if f.dtype == tf.float32:
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(shape).ravel()))
                else:
                    values = rng.integers(0, bounds.get(name, 2), size=shape).ravel()
                    feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return [str(path)]


def first_batches(dataset_fn, count=2):
    dataset = dataset_fn(None)
    for name, spec in dataset.element_spec.items():
        assert spec.shape.is_fully_defined(), f"{name}: {spec.shape} is not static"
        assert spec.dtype != tf.float64, name
    return list(dataset.take(count))


def pretraining_batches(tmp_path, config):
    files = random_records(tmp_path / "pretraining.tfrecord", pretraining_data.feature_spec(L, P), 2 * B,
                           dict(input_ids=SIZE.vocab_size, input_mask=2, masked_lm_positions=L,
                                masked_lm_ids=SIZE.vocab_size))
    fn = pretraining_data.make_dataset_fn(files, L, P, B, is_training=True, seed=1)
    if isinstance(config, etc_modeling.EtcConfig):
        fn = get_family("etc").adapt_dataset_fn(fn, config, RunOptions(etc_tokens_per_global=SIZE.etc_tokens_per_global))
    return first_batches(fn)


def make_trainer(task, tmp_path):
    trainer = Trainer(task, tf.distribute.get_strategy(), str(tmp_path / "model"),
                      optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-3, 10, 2))
    trainer.restore_or_initialize()
    return trainer


def one_step(trainer):
    """The per-replica optimizer step on one batch (no gradient accumulation)."""
    return lambda batch: trainer.replica_train_step((batch,))


def assert_tpu_ready(fn, batch, what):
    """XLA-compiles `fn(batch)` and checks its HLO and its TensorFlow graph."""
    hlo = fn.experimental_get_compiler_ir(batch)(stage="hlo")
    f64 = [line.strip()[:160] for line in hlo.splitlines() if re.search(r"\bf64\[", line)]
    assert not f64, f"{what}: float64 in the compiled step:\n" + "\n".join(f64[:5])
    opcodes = set(re.findall(r"\s([a-z][a-z0-9-]*)\(", hlo))
    assert not opcodes & set(HOST_ONLY_HLO), f"{what}: host-only HLO ops {opcodes & set(HOST_ONLY_HLO)}"
    dynamic = [line.strip()[:160] for line in hlo.splitlines() if re.search(r"\[[^\]]*<=", line)]
    assert not dynamic, f"{what}: dynamic shapes:\n" + "\n".join(dynamic[:5])
    assert "dot(" in hlo  # the HLO above is the model's, not an empty program
    graph = fn.get_concrete_function(batch).graph
    for op in graph.get_operations():
        dtypes = {t.dtype for t in op.outputs}
        assert not dtypes & {tf.float64, tf.string}, f"{what}: {op.type} {op.name} outputs {dtypes}"
        assert not HOST_ONLY_TF_OPS.search(op.type), f"{what}: host-only op {op.type} {op.name}"


@pytest.fixture()
def precision(request):
    distribution.set_mixed_precision(request.param)
    yield request.param
    distribution.set_mixed_precision("none")


def test_the_check_finds_float64_and_host_ops():
    """The checks can fail: a float64 sum and a string op are reported by name."""
    batch = {"x": tf.ones([2, 3])}
    double = tf.function(lambda f: tf.reduce_sum(tf.cast(tf.matmul(f["x"], f["x"], transpose_b=True), tf.float64)),
                         jit_compile=True)
    with pytest.raises(AssertionError, match="float64 in the compiled step"):
        assert_tpu_ready(double, batch, "double")
    text = tf.function(lambda f: tf.strings.length(tf.strings.as_string(tf.matmul(f["x"], f["x"], transpose_b=True))),
                       jit_compile=True)
    with pytest.raises(Exception, match="string|String|AsString"):
        assert_tpu_ready(text, batch, "text")


# bfloat16 (the TPU's mixed precision) for every variant; float32 (the scripts'
# default) for one BERT variant and ETC.
CASES = [(v, "bfloat16") for v in smoke_check.VARIANTS] + [("realformer", "none"), ("etc", "none")]


@pytest.mark.parametrize("variant, precision", CASES, indirect=["precision"],
                         ids=[f"{v}-{p}" for v, p in CASES])
def test_pretraining_steps_compile_for_tpu(variant, precision, tmp_path):
    config = smoke_check.variant_config(variant, SIZE)
    task = PretrainingTask(config, family=get_family("etc" if variant == "etc" else "bert"))
    trainer = make_trainer(task, tmp_path)
    batch, _ = pretraining_batches(tmp_path, config)
    what = f"{variant}/{precision}"
    assert_tpu_ready(tf.function(one_step(trainer), jit_compile=True), batch, what + "/train")
    assert_tpu_ready(tf.function(trainer.replica_eval_step, jit_compile=True), batch, what + "/eval")


def test_classifier_and_squad_steps_compile_for_tpu(tmp_path):
    config = smoke_check.variant_config("realformer_normformer", SIZE)
    spec = glue.feature_spec(L, is_regression=False)
    files = random_records(tmp_path / "glue.tfrecord", spec, 2 * B, dict(input_ids=SIZE.vocab_size, label_ids=3))
    for is_training in (True, False):  # training, and eval/predict batches padded to full size
        batch = first_batches(records.make_dataset_fn(files, spec, B, is_training, pad_to_full_batches=not is_training))[0]
        trainer = make_trainer(ClassifierTask(config, 3, is_regression=False), tmp_path / f"glue{is_training}")
        step = one_step(trainer) if is_training else trainer.replica_eval_step
        assert_tpu_ready(tf.function(step, jit_compile=True), batch, f"classifier/{is_training}")

    spec = squad_data.feature_spec(L, is_training=True)
    files = random_records(tmp_path / "squad.tfrecord", spec, 2 * B,
                           dict(input_ids=SIZE.vocab_size, start_positions=L, end_positions=L, unique_ids=1000))
    batch = first_batches(records.make_dataset_fn(files, spec, B, True))[0]
    trainer = make_trainer(SquadTask(config), tmp_path / "squad")
    assert_tpu_ready(tf.function(one_step(trainer), jit_compile=True), batch, "squad/train")
    predict = squad_data.make_predict_dataset_fn(files[0], L, 2 * B, B)
    first_batches(predict)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["etc"])  # the variant with the most Python-side set-up
def test_steps_trace_once(variant, tmp_path):
    """Two XLA steps over two different batches: one trace, the step counter and the
    learning rate (a function of the optimizer's step variable) move on."""
    config = smoke_check.variant_config(variant, SIZE)
    task = PretrainingTask(config, family=get_family("etc" if variant == "etc" else "bert"))
    trainer = make_trainer(task, tmp_path)
    first, second = pretraining_batches(tmp_path, config)
    assert not all(np.array_equal(first[k], second[k]) for k in first)
    step = tf.function(one_step(trainer), jit_compile=True)
    learning_rates = []
    for batch in (first, second):
        sums = step(batch)
        learning_rates.append(float(trainer.current_learning_rate()))
        assert np.isfinite(float(sums["masked_lm_loss"][0]))
    assert step.experimental_get_tracing_count() == 1
    assert int(trainer.global_step.numpy()) == 2
    assert learning_rates[0] != learning_rates[1]
