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


def test_saved_model_asks_a_model_for_its_default_signature(tmp_path):
    # models/shared.py (ConfigModel) overrides `_default_save_signature`, the attribute
    # through which tf.saved_model.save asks an object without `signatures=` for its
    # serving_default; and reads the first call's input shapes through Keras' public
    # Layer.get_build_config as {"input_shape": {name: shape}}.
    import keras
    from tensorflow.python.saved_model import signature_serialization

    assert signature_serialization.DEFAULT_SIGNATURE_ATTR == "_default_save_signature"

    class Probe(tf.Module):
        @property
        def _default_save_signature(self):
            return tf.function(lambda x: {"y": x + 1}, input_signature=[tf.TensorSpec([None], tf.int32, name="x")])

    tf.saved_model.save(Probe(), str(tmp_path / "probe"))
    assert list(tf.saved_model.load(str(tmp_path / "probe")).signatures) == ["serving_default"]

    class DictModel(keras.Model):
        def call(self, inputs):
            return inputs["a"]

    model = DictModel()
    model({"a": tf.zeros((3, 5))})
    assert keras.Model.get_build_config(model) == {"input_shape": {"a": (3, 5)}}
