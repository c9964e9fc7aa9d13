"""Private names of other libraries that realformer_tf relies on. Each test fails when a
library update changes what the package assumes, instead of the package silently
misbehaving."""

import inspect

import orbit
import tensorflow as tf


def test_orbit_prints_its_messages_with_their_prefixes(capsys):
    # training/orbit_runner.py filters orbit's stdout by the start of each message
    # (`_OrbitStdout.DROPPED`; checkpoint messages pass): orbit must still print them so.
    import orbit.controller as controller

    source = inspect.getsource(controller)
    for prefix in ('f"train | step: {current_step: 6d} | ', 'f" eval | step: {current_step: 6d} | ',
                   'f"restoring model from', 'f"saved checkpoint to', 'f"restored from checkpoint:'):
        assert prefix in source, prefix
    controller._log("train | step:      1 | output: {}")
    assert capsys.readouterr().out == "train | step:      1 | output: {}\n"


def test_checkpoint_manager_tracks_the_last_checkpoint_step(tmp_path):
    # training/trainer.py sets _last_checkpoint_step = 0 so saves land at multiples of
    # the interval (as TPUEstimator did); the manager must read that attribute.
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


# The other private names the package uses, each checked for what the package assumes.
def test_keras_adamw_internals_the_fused_update_overrides():
    # training/optimization.py AdamW: overrides `_apply_weight_decay` (Keras decays every
    # variable before `update_step`, which the fused update does itself) and reads the
    # slots through `_get_variable_index`, `_momentums`, `_velocities`, the decay rule
    # through `_use_weight_decay`, and `_iterations` in `apply_gradients`.
    import keras

    optimizer = keras.optimizers.AdamW(1e-3)
    variable = keras.Variable(tf.ones([3]))
    optimizer.build([variable])
    index = optimizer._get_variable_index(variable)
    assert optimizer._momentums[index].shape == optimizer._velocities[index].shape == (3,)
    assert optimizer._use_weight_decay(variable) is True and optimizer._iterations is optimizer.iterations
    from keras.src.optimizers import base_optimizer

    assert "self._apply_weight_decay(trainable_variables)" in inspect.getsource(base_optimizer.BaseOptimizer)


def test_tensorflow_and_keras_state_the_package_reads():
    # kernels.ops_for: whether a trace is under XLA; kernels.use_fused_kernels: every
    # sublayer of a layer; training.distribution.run_settings: the seeds Keras and
    # TensorFlow keep; layers.embeddings: whether Keras traces symbolically;
    # layers.masking: a tensor's Keras mask.
    import keras
    from keras.src.backend import get_keras_mask, set_keras_mask
    from keras.src.backend.common import global_state
    from keras.src.backend.common.symbolic_scope import in_symbolic_scope
    from tensorflow.python.eager import context as eager_context
    from tensorflow.python.ops import control_flow_util

    from realformer_tf.training.distribution import _KERAS_SEED_STATE

    seen = {}

    @tf.function(jit_compile=True)
    def compiled():
        seen["xla"] = control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
        return tf.constant(0)

    compiled()
    assert seen["xla"] is True
    layer = keras.Sequential([keras.layers.Dense(2)])
    assert len(list(layer._flatten_layers(include_self=True, recursive=True))) == 2
    tf.random.set_seed(7)
    assert eager_context.global_seed() == 7
    keras.utils.set_random_seed(5)
    assert any(global_state.get_global_attribute(name) is not None for name in _KERAS_SEED_STATE)
    assert in_symbolic_scope() is False
    x = tf.ones([2, 3])
    set_keras_mask(x, tf.constant([True, False]))
    assert get_keras_mask(x).numpy().tolist() == [True, False]
