"""Numerical safety, determinism, exact resume, damaged inputs and start-up refusals
of the shared training loop."""

import os
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from realformer_tf import modeling, optimization
from realformer_tf.training import distribution
from realformer_tf.jobs import runner
from realformer_tf.errors import UsageError
from realformer_tf.families import get_family
from realformer_tf.data import pretraining as pretraining_data
from realformer_tf.data import integrity
from realformer_tf.data import records as records_lib
from realformer_tf.errors import NonFiniteLossError
from realformer_tf.jobs.tasks.pretraining import PretrainingTask
from realformer_tf.models import variants
from realformer_tf.training.trainer import Trainer

SEQ, PRED = 16, 4


def _fixed_batches_fn(seed=0, poison=False):
    batch = h.fixed_pretraining_batch(8, SEQ, PRED, seed=seed)
    if poison:  # a NaN in the data makes the loss NaN
        batch["masked_lm_weights"] = np.full_like(batch["masked_lm_weights"], np.nan)

    def dataset_fn(input_context=None, start_step=0):
        return tf.data.Dataset.from_tensors(batch).repeat()

    return dataset_fn


def _trainer(tmp_path, learning_rate, **config):
    task = PretrainingTask(h.tiny_config(**config))
    return Trainer(
        task, tf.distribute.get_strategy(), str(tmp_path),
        optimizer_fn=lambda: optimization.create_optimizer("adamw", learning_rate, 100, 0),
        steps_per_loop=2, save_checkpoints_steps=2, global_batch_size=8,
    )


def _seeded_trainer(model_dir):
    keras.utils.set_random_seed(11)  # the same initial weights and dropout seeds each time
    return _trainer(model_dir, 1e-3)  # dropout 0.1 is on


def _weights(trainer):
    return [w.numpy() for w in trainer.model.weights]


def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    """Stop at step 4 (a new Trainer = a new process's state), resume to 8: the data
    order (replayed from the seed) and the dropout seeds continue as if never stopped.
    40 records at batch 8 also cross an epoch boundary."""
    path = h.write_pretraining_records(tmp_path / "train.tfrecord", 40, SEQ, PRED)
    data_fn = pretraining_data.make_dataset_fn([path], SEQ, PRED, 8, is_training=True, seed=5)

    uninterrupted = _seeded_trainer(tmp_path / "full")
    uninterrupted.restore_or_initialize()
    uninterrupted.train(data_fn, 8, log_fn=lambda _: None)

    first = _seeded_trainer(tmp_path / "parts")
    first.restore_or_initialize()
    first.train(data_fn, 4, log_fn=lambda _: None)
    resumed = _seeded_trainer(tmp_path / "parts")
    assert resumed.restore_or_initialize().endswith("ckpt-4")
    resumed.train(data_fn, 8, log_fn=lambda _: None)
    assert int(resumed.global_step.numpy()) == 8
    for got, want in zip(_weights(resumed), _weights(uninterrupted)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)

    # The control: restarting the data instead of replaying it gives other weights,
    # so the comparison above can tell.
    restarted = _seeded_trainer(tmp_path / "restarted")
    restarted.restore_or_initialize()
    restarted.train(data_fn, 4, log_fn=lambda _: None)
    restarted = _seeded_trainer(tmp_path / "restarted")
    restarted.restore_or_initialize()
    restarted.train(lambda ctx, start_step: data_fn(ctx), 8, log_fn=lambda _: None)
    assert max(np.abs(a - b).max() for a, b in zip(_weights(restarted), _weights(uninterrupted))) > 1e-4


def _corrupt(path, keep_bytes=None, flip_at=None):
    raw = bytearray(open(path, "rb").read())
    if flip_at is not None:
        raw[flip_at] ^= 0xFF
    open(path, "wb").write(bytes(raw[:keep_bytes] if keep_bytes else raw))


@pytest.mark.parametrize("damage", ["truncated", "bit flip"])
def test_a_damaged_record_in_the_middle_of_a_file_is_named_up_front(tmp_path, damage):
    path = h.write_pretraining_records(tmp_path / "train.tfrecord", 20, SEQ, PRED)
    size = (tmp_path / "train.tfrecord").stat().st_size
    if damage == "truncated":
        _corrupt(path, keep_bytes=size // 2 + 7)
    else:
        _corrupt(path, flip_at=size // 2)
    with pytest.raises(records_lib.InputError,
                       match=r"train.tfrecord is corrupt or truncated: record (9|10) cannot be read"):
        pretraining_data.check_files(path, SEQ, PRED)


def test_inputs_too_large_to_read_up_front_still_have_their_file_ends_checked(tmp_path, monkeypatch):
    """Above the read-through limit only each file's end is read: it must end right
    after a record (whose length CRC matches: our CRC-32C agrees with TF's)."""
    monkeypatch.setattr(integrity, "_TAIL_BYTES", 64)  # smaller than one record
    path = h.write_pretraining_records(tmp_path / "big.tfrecord", 12, SEQ, PRED)
    size = (tmp_path / "big.tfrecord").stat().st_size
    assert integrity.check_records_readable([path], max_bytes=1) is None
    record = size // 12 + 1  # records differ by a few bytes: not an exact boundary
    for cut in (5, record // 2, record - 3):
        with open(path, "r+b") as f:
            f.truncate(size - cut)
        with pytest.raises(records_lib.InputError, match=r"big.tfrecord is corrupt or truncated: the last record"):
            integrity.check_records_readable([path], max_bytes=1)
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert integrity.check_records_readable([str(empty)], max_bytes=-1) is None


def test_a_damaged_record_met_during_training_is_named_and_checkpoints_kept(tmp_path):
    """Inputs too large to read up front are checked as they are read."""
    good = h.write_pretraining_records(tmp_path / "a.tfrecord", 16, SEQ, PRED)
    bad = h.write_pretraining_records(tmp_path / "b.tfrecord", 16, SEQ, PRED)
    _corrupt(bad, flip_at=(tmp_path / "b.tfrecord").stat().st_size // 2)
    assert integrity.check_records_readable([good, bad], max_bytes=1) is None  # "too large"
    trainer = _trainer(tmp_path / "out", 1e-3)
    trainer.restore_or_initialize()
    data_fn = pretraining_data.make_dataset_fn([good, bad], SEQ, PRED, 8, is_training=True, seed=1)
    with pytest.raises(records_lib.InputError, match=r"b.tfrecord is corrupt or truncated: record \d+ .*checkpoints are kept"):
        with integrity.unreadable_records_named([good, bad]):
            trainer.train(data_fn, 40, log_fn=lambda _: None)
    saved = tf.train.latest_checkpoint(str(tmp_path / "out"))
    assert saved is None or trainer.checkpoint.read(saved)  # what was saved still loads


def test_nan_loss_stops_with_step_and_last_good_checkpoint(tmp_path):
    trainer = _trainer(tmp_path, 1e-3)
    trainer.restore_or_initialize()
    trainer.train(_fixed_batches_fn(), 2)  # a good checkpoint at step 2
    with pytest.raises(NonFiniteLossError, match=r"global step 4.*Last good checkpoint: .*ckpt-2"):
        trainer.train(_fixed_batches_fn(poison=True), 6)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")  # the NaN state was not saved


def test_same_seed_same_loss_curve(tmp_path):
    curves = []
    for run in range(2):
        keras.utils.set_random_seed(7)
        trainer = _trainer(tmp_path / f"run{run}", 1e-3)
        trainer.restore_or_initialize()
        losses = []
        trainer.train(_fixed_batches_fn(), 6, log_fn=losses.append)
        curves.append([line.split("| loss ")[1].split(" ")[0] for line in losses])
    assert len(curves[0]) == 3 and curves[0] == curves[1]


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_48_layer_running_sums_stay_finite_in_half_precision(policy):
    keras.mixed_precision.set_global_policy(policy)
    try:
        config = h.tiny_config(num_hidden_layers=48, hidden_size=8, num_attention_heads=2,
                               intermediate_size=8, residual_attention=True)
        model = modeling.BertModel(config)
        batch = h.fixed_pretraining_batch(2, SEQ, PRED)
        batch["input_mask"][1, :] = 0  # a fully padded row too
        with tf.GradientTape() as tape:
            out = model({k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=True)
            loss = tf.reduce_mean(tf.cast(out["sequence_output"], tf.float32) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        last = out["attention_scores"][-1]
        assert last.dtype == tf.as_dtype(policy.split("_")[1])
        assert np.isfinite(last.numpy().astype(np.float32)).all()
        assert np.isfinite(out["sequence_output"].numpy().astype(np.float32)).all()
        assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in grads if g is not None)
    finally:
        keras.mixed_precision.set_global_policy("float32")


# The variant table's names (NormFormer's optional residual scale: the smoke check's cases).
VARIANTS = [name for name in variants.VARIANTS if name != "normformer_residual_scale"]


@pytest.mark.slow  # ~10 s per case, nearly all of it tracing the training loop
@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_half_precision_training_of_every_variant_stays_finite(tmp_path, variant, precision):
    """A few optimizer steps at a high learning rate through the shared loop (float16:
    dynamic loss scaling), 2 layers (depth: the 48-layer test), padded examples."""
    float16 = distribution.set_mixed_precision(precision)
    try:
        keras.utils.set_random_seed(0)
        task = PretrainingTask(h.tiny_config(**variants.get_variant(variant).settings))
        trainer = Trainer(
            task, tf.distribute.get_strategy(), str(tmp_path),
            optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-2, 6, 1, float16_loss_scaling=float16),
            steps_per_loop=3, save_checkpoints_steps=3, global_batch_size=8,
        )
        trainer.restore_or_initialize()
        metrics = trainer.train(_fixed_batches_fn(), 6, log_fn=lambda _: None)
        assert np.isfinite(metrics["loss"]), metrics
        assert all(np.isfinite(w.numpy().astype(np.float32)).all() for w in trainer.model.weights)
        assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer) == float16
    finally:
        distribution.set_mixed_precision("none")


def test_batch_not_divisible_by_replicas_is_refused():
    fake = types.SimpleNamespace(num_replicas_in_sync=8)
    with pytest.raises(UsageError, match=r"--train_batch_size=12 is not divisible by the 8 replicas"):
        distribution.per_replica_batch_size(12, fake, "--train_batch_size")
    assert distribution.per_replica_batch_size(16, fake, "--train_batch_size") == 2


def test_output_dir_of_another_model_is_refused(tmp_path):
    config = h.tiny_config()
    runner.claim_output_dir(str(tmp_path), config, {"task": "pretraining"})
    runner.claim_output_dir(str(tmp_path), config, {"task": "pretraining"})  # the same run: fine
    other = h.tiny_config(num_hidden_layers=3, layer_norm_type="normformer")
    with pytest.raises(UsageError, match=r"holds checkpoints of another model .*layer_norm_type, num_hidden_layers"):
        runner.claim_output_dir(str(tmp_path), other, {"task": "pretraining"})
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n')
    (foreign / "model.ckpt-5.index").write_bytes(b"")
    with pytest.raises(UsageError, match="not written by this tool"):
        runner.claim_output_dir(str(foreign), config, {"task": "pretraining"})


def test_non_utf8_text_is_named_by_line_even_across_read_chunks(tmp_path, monkeypatch):
    from realformer_tf.data import text_files

    monkeypatch.setattr(text_files, "_CHUNK_BYTES", 3)  # characters cut between reads
    good = tmp_path / "good.txt"
    good.write_text("na\u00efve caf\u00e9\n\n\u65e5\u672c\u8a9e\n", encoding="utf-8")
    text_files.check_utf8([str(good)])
    bad = tmp_path / "bad.txt"
    bad.write_bytes("d\u00e9j\u00e0\nvu\n".encode("utf-8") + b"caf\xe9\n")
    with pytest.raises(records_lib.InputError, match=r"bad.txt is not UTF-8 text: line 3 \(byte 13\) holds b'\\xe9'"):
        text_files.check_utf8([str(good), str(bad)])


def test_output_files_are_complete_or_absent(tmp_path):
    from realformer_tf.fileio import atomic_output

    path = tmp_path / "eval_results.txt"
    with pytest.raises(RuntimeError):
        with atomic_output(str(path)) as f:
            f.write("loss = 1.0\n")
            raise RuntimeError("killed mid-write")
    assert not path.exists() and not list(tmp_path.iterdir())
    with atomic_output(str(path)) as f:
        f.write("loss = 1.0\n")
    assert path.read_text() == "loss = 1.0\n" and list(tmp_path.iterdir()) == [path]


def test_every_text_reader_refuses_non_utf8(tmp_path):
    """GLUE TSV, SQuAD JSON and vocab files in Latin-1 (a common export mistake)."""
    from realformer_tf.data import glue, squad, vocab

    latin1 = "caf\u00e9".encode("latin-1")
    mrpc = h.write_glue_mrpc(str(tmp_path / "mrpc"))
    with open(os.path.join(mrpc, "dev.tsv"), "ab") as f:
        f.write(b"1\t7\t8\t" + latin1 + b"\tok\n")
    with pytest.raises(records_lib.InputError, match=r"dev.tsv is not UTF-8"):
        glue.read_examples("mrpc", mrpc, "dev")
    squad_file = tmp_path / "dev.json"
    squad_file.write_bytes(b'{"data": [], "version": "' + latin1 + b'"}')
    with pytest.raises(records_lib.InputError, match=r"--predict_file .*dev.json is not UTF-8"):
        squad.load_squad_file(str(squad_file), "predict_file", False, False)
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_bytes(b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" + latin1 + b"\n")
    with pytest.raises(records_lib.InputError, match=r"--vocab_file .*vocab.txt is not UTF-8"):
        vocab.check_vocab(str(vocab_file))
    with pytest.raises(records_lib.InputError, match=r"--vocab_file .*absent.txt does not exist"):
        vocab.check_vocab(str(tmp_path / "absent.txt"))
