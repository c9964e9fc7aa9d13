"""The data modules print nothing themselves: their lines go to the `log` the caller
passes (the jobs pass their logger, which prints), absl's logging.info by default."""

import helpers_data as h

from realformer_tf.data import pretraining, records

SEQ, PRED = 16, 4


def test_check_files_and_resume_lines_go_to_the_given_log(tmp_path, capsys):
    path = str(tmp_path / "train.tfrecord")
    h.write_pretraining_records(path, 12, SEQ, PRED)
    lines = []
    files = pretraining.check_files(path, SEQ, PRED, log=lines.append)
    assert files == [path] and lines == ["Input: 1 file(s), 12 records, all readable"]

    for seed, expected in ((3, "Input: resumed after 2 batches: skipping the 8 records read before "
                                "(the order is fixed by --seed)"),
                           (None, "Input: resumed after 2 batches without --seed: reading a fresh shuffle")):
        lines.clear()
        dataset_fn = pretraining.make_dataset_fn(files, SEQ, PRED, 4, is_training=True, seed=seed,
                                                 log=lines.append)
        next(iter(dataset_fn(None, start_step=2)))
        assert lines == [expected]
    assert capsys.readouterr().out == ""  # nothing printed behind the caller's back


def test_default_log_is_absl_info():
    import inspect

    from absl import logging

    for fn in (pretraining.check_files, pretraining.make_dataset_fn, records.make_dataset_fn):
        assert inspect.signature(fn).parameters["log"].default is logging.info, fn.__name__
