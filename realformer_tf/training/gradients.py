"""Gradient arithmetic of a training step: clipping and applying replica-summed
gradients, and summing the gradients of accumulated batches (sparse ones stay sparse)."""

import tensorflow as tf

from realformer_tf.training import optimization


def clip_and_apply(optimizer, grads, variables, clip_norm):
    """One optimizer step from replica-summed (loss-scaled) gradients, clipped to global
    norm `clip_norm` (of the unscaled gradients; None: no clipping).

    One factor does the clipping and takes this replica's 1/N share (Keras' own
    cross-replica sum restores the whole); a LossScaleOptimizer gets the gradients
    still loss-scaled and unscales them itself. Our AdamW on one replica folds the
    factor into its update's single pass; otherwise it is one multiply per gradient,
    and none where it would be 1 (one replica, no clipping)."""
    context = tf.distribute.get_replica_context()
    scale = getattr(optimizer, "dynamic_scale", None)
    multiplier = 1.0 / context.num_replicas_in_sync
    if clip_norm:
        norm = tf.linalg.global_norm(grads)
        if scale is not None:
            norm = norm / tf.cast(scale, norm.dtype)
        multiplier = _clip_multiplier(norm, clip_norm) * multiplier
    if isinstance(multiplier, float) and multiplier == 1.0:
        optimizer.apply_gradients(zip(grads, variables))
    elif isinstance(optimizer, optimization.AdamW) and context.num_replicas_in_sync == 1:
        optimizer.apply_gradients(zip(grads, variables), gradient_scale=multiplier)
    else:
        optimizer.apply_gradients(zip([_times(g, multiplier) for g in grads], variables))


def _clip_multiplier(norm, clip_norm):
    """tf.clip_by_global_norm's factor: min(1, clip_norm / norm), NaN where the norm is
    not finite (so a non-finite step stays non-finite, as there)."""
    return clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm) + (norm - norm)


def _times(gradient, multiplier):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(multiplier, gradient.dtype), gradient.indices,
                                gradient.dense_shape)
    return gradient * tf.cast(multiplier, gradient.dtype)


def add_gradients(a, b):
    """a + b for a variable's gradients; embedding gradients stay sparse (concatenated
    slices, as TF sums them), an unused variable's stay None."""
    if a is None:
        return None
    if isinstance(a, tf.IndexedSlices) or isinstance(b, tf.IndexedSlices):
        a, b = (x if isinstance(x, tf.IndexedSlices) else _as_slices(x) for x in (a, b))
        return tf.IndexedSlices(tf.concat([a.values, b.values], 0), tf.concat([a.indices, b.indices], 0),
                                a.dense_shape)
    return a + b


def _as_slices(dense):
    rows = tf.shape(dense, out_type=tf.int64)[0]
    return tf.IndexedSlices(dense, tf.range(rows), tf.shape(dense, out_type=tf.int64))
