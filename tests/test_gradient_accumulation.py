"""`gradient_accumulation_steps=3` on batches of 4 trains exactly as one batch of 12:
same weights, learning rate, global step and metrics, for BERT pretraining (masked-LM
loss divided by a count that differs between the micro-batches) and the classifier
(padding examples excluded), with SGD (not invariant to the gradient's scale), AdamW
with BERT's schedule, gradient clipping, dynamic loss scaling, and MirroredStrategy; a
resumed accumulating run continues the data exactly; the flag's error message."""

import numpy as np
import pytest

import helpers_data as h

MICRO, N, STEPS, SEQ, PRED = 4, 3, 3, 12, 4


def pretraining_examples(count, seed=0):
    """Pretraining features whose masked-LM weights vary per example (1 to PRED real
    predictions), so the micro-batches' masked-LM counts differ."""
    examples = h.fixed_pretraining_batch(count, SEQ, PRED, seed=seed)
    real = np.random.default_rng(seed + 1).integers(1, PRED + 1, size=count)
    examples["masked_lm_weights"] = (np.arange(PRED)[None] < real[:, None]).astype(np.float32)
    return examples


def classifier_examples(count, seed=0):
    """Classifier features with some padding examples (is_real_example 0)."""
    examples = h.fixed_pretraining_batch(count, SEQ, PRED, seed=seed)
    rng = np.random.default_rng(seed + 2)
    return {"input_ids": examples["input_ids"], "input_mask": examples["input_mask"],
            "segment_ids": examples["segment_ids"],
            "label_ids": rng.integers(0, 3, size=count).astype(np.int32),
            "is_real_example": (rng.random(count) < 0.7).astype(np.int32)}


def make_task(name):
    from realformer_tf.jobs.tasks.classifier import ClassifierTask
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask

    config = h.tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, intermediate_size=24,
                           residual_attention=True)
    if name == "pretraining":
        return PretrainingTask(config), pretraining_examples(MICRO * N * STEPS, seed=7)
    return ClassifierTask(config, num_labels=3, is_regression=False), classifier_examples(MICRO * N * STEPS, seed=8)


def make_optimizer(name):
    import keras

    from realformer_tf import optimization

    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=0.3)
    # BERT's AdamW: warmup 1 step, then linear decay to 0 at STEPS.
    return optimization.create_optimizer("adamw", 1e-2, STEPS, 1, float16_loss_scaling=name == "adamw_loss_scale")


def train(strategy, task_name, optimizer, clip, batch_size, accumulation, model_dir, initial=None,
          jit_compile=False):
    """Trains STEPS optimizer steps on consecutive batches of `batch_size`; returns the
    trainer, its start weights and its train metrics."""
    import keras
    import tensorflow as tf

    from realformer_tf.training.trainer import Trainer

    keras.utils.set_random_seed(1)
    task, examples = make_task(task_name)
    trainer = Trainer(task, strategy, model_dir, optimizer_fn=lambda: make_optimizer(optimizer),
                      steps_per_loop=STEPS, save_checkpoints_steps=1000, clip_norm=clip,
                      global_batch_size=batch_size, gradient_accumulation_steps=accumulation,
                      jit_compile=jit_compile)
    trainer.restore_or_initialize()
    if initial is not None:
        trainer.model.set_weights(initial)
    start = [w.copy() for w in trainer.model.get_weights()]

    def dataset_fn(input_context=None, start_step=0):
        per = input_context.get_per_replica_batch_size(batch_size) if input_context else batch_size
        return tf.data.Dataset.from_tensor_slices(examples).batch(per, drop_remainder=True).repeat()

    metrics = trainer.train(dataset_fn, STEPS, log_fn=lambda _: None)
    return trainer, start, metrics


def compare(big, accumulated):
    """Differences between the two runs, as a dict of numbers."""
    (one, start, one_metrics), (acc, acc_start, acc_metrics) = big, accumulated
    end, acc_end = one.model.get_weights(), acc.model.get_weights()
    return dict(
        start_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(start, acc_start)),
        max_update=max(float(np.max(np.abs(a - b))) for a, b in zip(start, end)),
        max_weight_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(end, acc_end)),
        steps=[int(one.global_step.numpy()), int(acc.global_step.numpy())],
        learning_rates=[float(one.current_learning_rate()), float(acc.current_learning_rate())],
        metrics=[one_metrics, acc_metrics],
    )


def first_gradient_norm(trainer, task_name, weights):
    """Global norm of the first large batch's gradient at `weights`, computed directly."""
    import tensorflow as tf

    _, examples = make_task(task_name)
    features = {k: tf.constant(v[:MICRO * N]) for k, v in examples.items()}
    trainer.model.set_weights(weights)
    with tf.GradientTape() as tape:
        sums = trainer.task.metric_sums(features, trainer.model(features, training=True))
        loss = sum(sums[t][0] / sums[t][1] for t in trainer.task.loss_terms)
    return float(tf.linalg.global_norm([g for g in tape.gradient(loss, trainer.model.trainable_variables)
                                        if g is not None]))


def check(report, name):
    assert report["start_diff"] == 0.0, name
    assert report["max_update"] > 1e-3, (name, report)  # the weights did move
    assert report["max_weight_diff"] < 2e-6 + 2e-4 * report["max_update"], (name, report)
    assert report["steps"] == [STEPS, STEPS], name
    assert report["learning_rates"][0] == report["learning_rates"][1], name
    one, acc = report["metrics"]
    assert sorted(one) == sorted(acc)
    for key in one:
        assert acc[key] == pytest.approx(one[key], rel=1e-5, abs=1e-6), (name, key)


CASES = [("pretraining", "sgd", 0.05), ("classifier", "adamw", 1.0),
         pytest.param("pretraining", "adamw", 1.0, marks=pytest.mark.slow),
         pytest.param("pretraining", "adamw_loss_scale", 1.0, marks=pytest.mark.slow),
         pytest.param("classifier", "sgd", None, marks=pytest.mark.slow)]


@pytest.mark.parametrize("task_name,optimizer,clip", CASES)
def test_three_micro_batches_equal_one_batch_three_times_larger(tmp_path, task_name, optimizer, clip):
    import tensorflow as tf

    strategy = tf.distribute.get_strategy()
    big = train(strategy, task_name, optimizer, clip, MICRO * N, 1, str(tmp_path / "big"))
    accumulated = train(strategy, task_name, optimizer, clip, MICRO, N, str(tmp_path / "acc"), initial=big[1])
    report = compare(big, accumulated)
    print(f"{task_name}/{optimizer}/clip {clip}: {report}")
    check(report, f"{task_name}-{optimizer}")
    if clip == 0.05:  # clipping acted: per-micro-batch clipping would differ
        assert first_gradient_norm(big[0], task_name, big[1]) > 2 * clip
    if optimizer == "adamw_loss_scale":
        assert accumulated[0].optimizer.dynamic_scale is not None


def test_a_count_that_depends_on_the_outputs_is_refused(tmp_path):
    import tensorflow as tf

    from realformer_tf.jobs.tasks.classifier import ClassifierTask

    class OutputCounted(ClassifierTask):
        def metric_sums(self, features, outputs):
            sums = super().metric_sums(features, outputs)
            return dict(sums, loss=(sums["loss"][0], tf.reduce_sum(tf.nn.softmax(outputs["logits"])[:, 0])))

    task, examples = make_task("classifier")
    from realformer_tf.training.trainer import Trainer

    trainer = Trainer(OutputCounted(task.config, 3, False), tf.distribute.get_strategy(), str(tmp_path),
                      optimizer_fn=lambda: make_optimizer("sgd"), gradient_accumulation_steps=2)
    dataset_fn = lambda ctx=None, start_step=0: tf.data.Dataset.from_tensor_slices(examples).batch(4).repeat()  # noqa: E731
    with pytest.raises(ValueError, match="OutputCounted.metric_sums: the count of loss term 'loss' depends on"):
        trainer.train(dataset_fn, 1, log_fn=lambda _: None)


@pytest.mark.slow
@pytest.mark.parametrize("task_name,optimizer,clip,jit", [("pretraining", "sgd", 0.05, False),
                                                         ("classifier", "adamw", 1.0, True)])
def test_accumulation_under_mirrored_strategy_equals_one_large_batch_on_one_device(
        tmp_path, two_replicas, task_name, optimizer, clip, jit):
    """Two replicas (tests/conftest.py) x 3 micro-batches of 2 examples each, vs one
    device with 12: the masked-LM counts are summed over micro-batches and replicas
    before dividing."""
    import tensorflow as tf

    big = train(tf.distribute.get_strategy(), task_name, optimizer, clip, MICRO * N, 1, str(tmp_path / "big"))
    acc = train(two_replicas, task_name, optimizer, clip, MICRO, N, str(tmp_path / "acc"), initial=big[1],
                jit_compile=jit)
    report = compare(big, acc)
    print(f"mirrored accumulation vs one device, {task_name}-{optimizer}-jit{jit}: {report}")
    check(report, task_name)


@pytest.mark.slow
def test_a_resumed_accumulating_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    """Checkpoints fall between optimizer steps, and a resumed run skips the
    global_step x N batches consumed before: stop at step 2 of 4 (N=2, dropout on),
    resume, and end where an uninterrupted run ends."""
    import keras
    import tensorflow as tf

    from realformer_tf import optimization
    from realformer_tf.data import pretraining as pretraining_data
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask
    from realformer_tf.training.trainer import Trainer

    path = h.write_pretraining_records(tmp_path / "train.tfrecord", 40, SEQ, PRED)
    data_fn = pretraining_data.make_dataset_fn([path], SEQ, PRED, MICRO, is_training=True, seed=5)

    def run(model_dir, steps, dataset_fn=data_fn):
        keras.utils.set_random_seed(11)
        trainer = Trainer(PretrainingTask(h.tiny_config(intermediate_size=24)), tf.distribute.get_strategy(),
                          str(model_dir), optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-3, 4, 0),
                          steps_per_loop=2, save_checkpoints_steps=2, gradient_accumulation_steps=2)
        trainer.restore_or_initialize()
        trainer.train(dataset_fn, steps, log_fn=lambda _: None)
        return trainer, [w.numpy() for w in trainer.model.weights]

    _, uninterrupted = run(tmp_path / "full", 4)
    run(tmp_path / "parts", 2)
    resumed, weights = run(tmp_path / "parts", 4)
    assert int(resumed.global_step.numpy()) == 4
    assert max(float(np.abs(a - b).max()) for a, b in zip(weights, uninterrupted)) <= 1e-6
    # The control: skipping global_step batches instead of global_step x N ends elsewhere.
    run(tmp_path / "wrong", 2)
    _, wrong = run(tmp_path / "wrong", 4, lambda ctx, start_step: data_fn(ctx, start_step=start_step // 2))
    assert max(float(np.abs(a - b).max()) for a, b in zip(wrong, uninterrupted)) > 1e-4


def test_the_flag_is_checked_with_one_clear_error(tmp_path):
    records = h.write_pretraining_records(tmp_path / "r.tfrecord", 8, SEQ, PRED)
    args = h.flags(input_file=records, output_dir=tmp_path / "out", do_train=True,
                   bert_config_file=h.write_config(tmp_path / "c.json"), train_batch_size=4, max_seq_length=SEQ,
                   max_predictions_per_seq=PRED, num_train_steps=1, gradient_accumulation_steps=0)
    proc = h.run_script("run_pretraining.py", *args)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "error: --gradient_accumulation_steps=0; use 1 or more"
