"""Private names of other libraries that realformer_tf relies on. Each test fails when a
library update changes what the package assumes, instead of the package silently
misbehaving."""

import inspect

import orbit
import tensorflow as tf


def test_orbit_controller_logs_through_a_module_function():
    # training.py replaces orbit.controller._log to keep orbit's multi-line loop output
    # in the absl log; orbit must still look the function up at call time.
    import orbit.controller as controller

    assert callable(controller._log)
    assert "_log(" in inspect.getsource(controller.Controller)


def test_checkpoint_manager_tracks_the_last_checkpoint_step(tmp_path):
    # training.py sets _last_checkpoint_step = 0 so saves land at multiples of the
    # interval (as TPUEstimator did); the manager must read that attribute.
    step = tf.Variable(0, dtype=tf.int64)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path), max_to_keep=2,
                                         step_counter=step, checkpoint_interval=4)
    assert hasattr(manager, "_last_checkpoint_step")
    manager._last_checkpoint_step = 0
    step.assign(3)
    assert manager.save(check_interval=True) is None   # 3 < 0 + 4: not yet
    step.assign(4)
    assert manager.save(check_interval=True) is not None
