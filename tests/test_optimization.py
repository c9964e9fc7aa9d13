"""BERT's optimizer recipe (realformer_tf/optimization.py) against a plain NumPy loop:
the warmup + linear-decay schedule, and AdamW (the fused TensorFlow step) with
decoupled weight decay that skips LayerNorm, biases and NormFormer's scales; the fused
step equals Keras' own AdamW, also under MirroredStrategy and XLA."""

import numpy as np
import pytest
import tensorflow as tf

from realformer_tf import kernels, optimization

BETA_1, BETA_2, EPSILON, DECAY = 0.9, 0.999, 1e-6, 0.01


def schedule_np(step, peak, total, warmup):
    if step < warmup:
        return peak * step / warmup
    return peak * (1 - min(step, total) / total)


def test_schedule_matches_plain_loop():
    schedule = optimization.WarmupPolynomialDecay(2e-3, num_train_steps=17, num_warmup_steps=5)
    for step in range(0, 25):
        assert float(schedule(step)) == pytest.approx(schedule_np(step, 2e-3, 17, 5), abs=1e-9), step


def adamw_np(weights, grads_per_step, peak, total, warmup, decayed):
    """Keras' AdamW as a loop: decay w -= w * wd * lr (decayed names only), then Adam with
    the bias-corrected step size lr * sqrt(1 - b2^t) / (1 - b1^t) and epsilon outside the root."""
    w = {k: v.astype(np.float64).copy() for k, v in weights.items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t, grads in enumerate(grads_per_step, start=1):
        lr = schedule_np(t - 1, peak, total, warmup)
        for k in w:
            if k in decayed:
                w[k] -= w[k] * DECAY * lr
            g = grads[k].astype(np.float64)
            m[k] += (g - m[k]) * (1 - BETA_1)
            v[k] += (g * g - v[k]) * (1 - BETA_2)
            alpha = lr * np.sqrt(1 - BETA_2**t) / (1 - BETA_1**t)
            w[k] -= alpha * m[k] / (np.sqrt(v[k]) + EPSILON)
    return w


def make_problem(seed=0):
    rng = np.random.default_rng(seed)
    shapes = {"kernel": (7, 5), "bias": (5,), "gamma": (5,), "beta": (5,), "head_scale": (3,)}
    weights = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    grads = [{k: rng.normal(scale=0.1 * (t + 1), size=s).astype(np.float32) for k, s in shapes.items()}
             for t in range(4)]
    return weights, grads


def run_optimizer(make_optimizer, weights, grads_per_step, strategy=None, jit_compile=False, scale=None,
                  op_types=None):
    """The weights after one `apply_gradients` per step (with `gradient_scale=scale` if
    given); `op_types`, a set, collects the op types of the traced step."""
    import keras

    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        optimizer = make_optimizer()
        variables = {k: keras.Variable(v, name=k) for k, v in weights.items()}
        optimizer.build(list(variables.values()))

    def apply(grads):
        # tf.identity: a copy on this replica's device, as a computed gradient would be.
        pairs = [(tf.identity(grads[k]), variables[k]) for k in variables]
        if scale is None:
            return optimizer.apply_gradients(pairs)
        optimizer.apply_gradients(pairs, gradient_scale=scale)

    replicas = strategy.num_replicas_in_sync
    # As the training loop does: the replica step inside one tf.function; each replica
    # holds 1/N of the gradient, so Keras' cross-replica sum restores the whole.
    step = tf.function(lambda grads: strategy.run(apply, (grads,)), jit_compile=jit_compile)
    for grads in grads_per_step:
        step({k: tf.constant(g / replicas) for k, g in grads.items()})
    if op_types is not None:
        graph = step.get_concrete_function({k: tf.constant(g) for k, g in grads_per_step[0].items()}).graph
        op_types.update(op.type for op in graph.get_operations())
    return {k: np.asarray(v.numpy()) for k, v in variables.items()}


def test_adamw_matches_plain_loop_and_skips_excluded_weights():
    weights, grads = make_problem()
    optimizer = optimization.create_optimizer("adamw", 3e-2, num_train_steps=6, num_warmup_steps=2)
    assert type(optimizer) is optimization.AdamW
    result = run_optimizer(lambda: optimizer, weights, grads)
    expected = adamw_np(weights, grads, 3e-2, 6, 2, decayed={"kernel"})
    for k in weights:
        dev = float(np.max(np.abs(result[k] - expected[k])))
        print(f"DEV {k} {dev:.2e}")
        assert dev < 2e-6, k
        assert np.max(np.abs(result[k] - weights[k])) > 1e-3, f"{k} did not move"


@pytest.mark.parametrize("scale", [None, 0.37])
def test_fused_cpu_kernel_matches_plain_loop(scale):
    """By default (fused_kernels=True) each update on CPU is one RealformerApplyAdamW:
    decay, gradient scale and Adam step in one pass, against the NumPy loop."""
    weights, grads = make_problem(seed=2)
    seen = set()
    result = run_optimizer(lambda: optimization.create_optimizer("adamw", 3e-2, 6, 2), weights, grads,
                           scale=scale, op_types=seen)
    assert "RealformerApplyAdamW" in seen and not seen & {"ResourceApplyAdam", "ResourceApplyGradientDescent"}
    scaled = [{k: g * np.float32(scale or 1.0) for k, g in step.items()} for step in grads]
    expected = adamw_np(weights, scaled, 3e-2, 6, 2, decayed={"kernel"})
    for k in weights:
        np.testing.assert_allclose(result[k], expected[k], atol=2e-6, rtol=0, err_msg=k)


def test_fused_cpu_kernel_takes_sparse_gradients_and_scales_elsewhere():
    """An embedding's IndexedSlices gradient (duplicate rows) through the kernel, and the
    gradient scale on TensorFlow's ops (fused_kernels=False), equal the dense NumPy loop."""
    import keras

    rng = np.random.default_rng(4)
    table = rng.normal(size=(9, 5)).astype(np.float32)
    rows, values = np.array([1, 4, 1, 7]), rng.normal(size=(4, 5)).astype(np.float32)
    dense = np.zeros_like(table)
    np.add.at(dense, rows, values)
    expected = adamw_np({"table": table}, [{"table": dense * np.float32(0.5)}], 3e-2, 6, 0, decayed={"table"})
    for fused in (True, False):
        optimizer = optimization.create_optimizer("adamw", 3e-2, 6, 0)
        optimizer.fused_kernels = fused
        variable = keras.Variable(table, name="table")
        optimizer.build([variable])
        slices = tf.IndexedSlices(tf.constant(values), tf.constant(rows), tf.constant(table.shape))

        @tf.function
        def step():
            optimizer.apply_gradients([(slices, variable)], gradient_scale=0.5)

        step()
        np.testing.assert_allclose(variable.numpy(), expected["table"], atol=2e-6, rtol=0, err_msg=f"fused={fused}")


def test_fused_cpu_kernel_keeps_earlier_reads_and_names_bad_inputs():
    """A value read before the update keeps its numbers (the kernel copies a shared
    buffer first, as TensorFlow's training ops do); wrong shapes name the input."""
    library = kernels.load()
    assert library is not None, "the fused kernels did not build on this machine"
    var, m, v = (tf.Variable(np.full((3, 4), value, np.float32)) for value in (1.0, 0.0, 0.0))
    hyper = dict(grad_scale=1.0, lr=0.1, beta1=0.9, beta2=0.999, epsilon=1e-6, beta1_power=0.9,
                 beta2_power=0.999, decay=0.01)
    before = var.read_value()
    library.realformer_apply_adam_w(var=var.handle, m=m.handle, v=v.handle, grad=tf.ones((3, 4)), **hyper)
    assert (before.numpy() == 1).all() and (var.numpy() < 1).all()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"var and grad must have the same shape, got \[3,4\] "
                                                             r"and \[4,3\]"):
        library.realformer_apply_adam_w(var=var.handle, m=m.handle, v=v.handle, grad=tf.ones((4, 3)), **hyper)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"lr must be a scalar, got \[2\]"):
        library.realformer_apply_adam_w(var=var.handle, m=m.handle, v=v.handle, grad=tf.ones((3, 4)),
                                        **dict(hyper, lr=[0.1, 0.1]))


def fused_minus_keras(where, strategy=None):
    """Largest |fused AdamW - Keras AdamW| over the weights after four steps (under
    `strategy` if given)."""
    import keras

    weights, grads = make_problem(seed=1)

    def make(cls):
        optimizer = cls(learning_rate=optimization.WarmupPolynomialDecay(1e-2, 6, 1), weight_decay=DECAY,
                        beta_1=BETA_1, beta_2=BETA_2, epsilon=EPSILON)
        optimizer.exclude_from_weight_decay(var_names=optimization.NO_WEIGHT_DECAY)
        if where == "tf_ops":  # TensorFlow's ResourceApplyAdam instead of the fused kernel
            optimizer.fused_kernels = False
        return optimizer

    fused = run_optimizer(lambda: make(optimization.AdamW), weights, grads, strategy, where == "xla")
    plain = run_optimizer(lambda: make(keras.optimizers.AdamW), weights, grads, strategy, where == "xla")
    moved = min(float(np.max(np.abs(fused[k] - weights[k]))) for k in weights)
    return max(float(np.max(np.abs(fused[k] - plain[k]))) for k in weights), moved


def test_weight_decay_skips_layer_norm_bias_and_scales_of_a_real_model():
    """Names as the TensorFlow backend hands them to the optimizer ("layer_norm/gamma:0")
    and as Keras shows them ("gamma")."""
    import helpers_data as h
    from realformer_tf import modeling

    model = modeling.BertModel(h.tiny_config(layer_norm_type="normformer", normformer_residual_scale=True))
    model({"input_ids": np.ones((1, 4), np.int32)})
    optimizer = optimization.create_optimizer("adamw", 1e-3, 10, 1)
    for variable in model.trainable_variables:
        for form in (variable, variable.value):
            optimizer._exclude_from_weight_decay_cache = {}
            decayed = optimizer._use_weight_decay(form)
            last = variable.path.split("/")[-1]
            should = last not in ("gamma", "beta", "head_scale", "residual_scale") and "bias" not in last
            assert decayed == should, f"{form.name}: decayed={decayed}"


@pytest.mark.parametrize("where", ["default", "tf_ops", "xla"])
def test_fused_step_equals_keras_adamw(where):
    diff, moved = fused_minus_keras(where)
    print(f"DEV fused-keras {diff:.2e}")
    assert diff <= (2e-6 if where == "default" else 5e-7) and moved > 1e-3


def test_fused_step_equals_keras_adamw_under_mirrored_strategy(two_replicas):
    """Two replicas on the two logical CPUs of tests/conftest.py."""
    diff, moved = fused_minus_keras("mirrored", two_replicas)
    print(f"DEV fused-keras mirrored {diff:.2e}")
    assert diff <= 5e-7 and moved > 1e-3


@pytest.mark.parametrize("clip", [0.05, 1e6])
def test_trainer_step_clips_to_the_global_norm(tmp_path, clip):
    """One SGD step of the training loop equals w - lr * g * min(1, clip / |g|), with g
    and its norm computed here in NumPy from the tape (the embedding gradient's norm over
    its slices, duplicates included, as tf.clip_by_global_norm and original BERT take it)."""
    import keras

    import test_gradient_accumulation as ga
    from realformer_tf.training.trainer import Trainer

    keras.utils.set_random_seed(1)
    task, examples = ga.make_task("classifier")
    batch = {k: v[:6] for k, v in examples.items()}
    trainer = Trainer(task, tf.distribute.get_strategy(), str(tmp_path), optimizer_fn=lambda: keras.optimizers.SGD(0.5),
                      steps_per_loop=1, save_checkpoints_steps=1000, clip_norm=clip, global_batch_size=6,
                      jit_compile=False)
    trainer.restore_or_initialize()
    model = trainer.model
    start = [v.numpy().copy() for v in model.trainable_variables]
    features = {k: tf.constant(v) for k, v in batch.items()}
    with tf.GradientTape() as tape:
        sums = task.metric_sums(features, model(features, training=True))
        loss = sum(sums[t][0] / sums[t][1] for t in task.loss_terms)
    grads = tape.gradient(loss, model.trainable_variables)
    dense, squares = [], 0.0
    for g, w in zip(grads, start):
        if g is None:
            dense.append(None)
        elif isinstance(g, tf.IndexedSlices):
            values = g.values.numpy().astype(np.float64)
            squares += float(np.sum(values ** 2))
            full = np.zeros(w.shape)
            np.add.at(full, g.indices.numpy(), values)
            dense.append(full)
        else:
            dense.append(g.numpy().astype(np.float64))
            squares += float(np.sum(dense[-1] ** 2))
    factor = min(1.0, clip / np.sqrt(squares))
    trainer.train(lambda input_context=None, start_step=0: tf.data.Dataset.from_tensor_slices(batch).batch(6).repeat(),
                  1, log_fn=lambda _: None)
    assert (factor < 0.5) == (clip < 1)  # the small clip acts, the large one does not
    for v, w, g in zip(model.trainable_variables, start, dense):
        expected = w if g is None else w - 0.5 * factor * g
        np.testing.assert_allclose(v.numpy(), expected, atol=3e-6, err_msg=v.path)


def test_clip_multiplier_matches_tf_clip_by_global_norm():
    """Also where the norm is not finite: NaN, so that the step stays non-finite."""
    from realformer_tf.training.gradients import _clip_multiplier

    for norm in (0.3, 1.0, 7.0, np.inf, np.nan):
        use_norm = tf.constant(norm, tf.float32)
        expected = float(tf.clip_by_global_norm([tf.constant([1.0])], 1.0, use_norm=use_norm)[0][0][0])
        got = float(_clip_multiplier(use_norm, 1.0))
        assert (np.isnan(got) and np.isnan(expected)) or got == pytest.approx(expected), norm


def test_gradient_scale_is_an_argument_of_one_call():
    """`gradient_scale=s` on g equals g * s unscaled, and the next call without it is
    unscaled again (nothing is left set on the optimizer)."""
    import keras

    rng = np.random.default_rng(7)
    table, grad = (rng.normal(size=(3, 4)).astype(np.float32) for _ in range(2))
    results = []
    for scaled in (True, False):
        optimizer = optimization.create_optimizer("adamw", 3e-2, 6, 0)
        variable = keras.Variable(table, name="w")
        if scaled:
            optimizer.apply_gradients([(tf.constant(grad), variable)], gradient_scale=0.5)
        else:
            optimizer.apply_gradients([(tf.constant(grad * np.float32(0.5)), variable)])
        optimizer.apply([tf.constant(grad)], [variable])
        results.append(variable.numpy())
    np.testing.assert_allclose(results[0], results[1], atol=1e-7, rtol=0)
    expected = adamw_np({"w": table}, [{"w": grad * np.float32(0.5)}, {"w": grad}], 3e-2, 6, 0, decayed={"w"})
    np.testing.assert_allclose(results[0], expected["w"], atol=2e-6, rtol=0)
