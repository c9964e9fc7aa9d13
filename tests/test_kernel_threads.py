"""The fused-kernel setting is per thread: a thread inside `fused_cpu_kernels()` and one
outside see different answers, and `with_current_setting` carries it into another
thread (what a MirroredStrategy replica thread needs)."""

import threading

import numpy as np
import tensorflow as tf

from realformer_tf import kernels


def _in_thread(fn):
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", fn()))
    thread.start()
    thread.join()
    return result["value"]


def test_two_threads_see_their_own_setting():
    inside, outside = threading.Event(), threading.Event()
    seen = {}

    def worker_inside():
        with kernels.fused_cpu_kernels():
            inside.set()
            outside.wait(10)  # the other thread looks while this one is inside
            seen["inside"] = kernels.enabled_here()

    def worker_outside():
        inside.wait(10)
        seen["outside"] = kernels.enabled_here()
        outside.set()

    threads = [threading.Thread(target=worker_inside), threading.Thread(target=worker_outside)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"inside": True, "outside": False}
    assert not kernels.enabled_here()


def test_nested_contexts_and_disabled_context():
    with kernels.fused_cpu_kernels():
        with kernels.fused_cpu_kernels():
            assert kernels.enabled_here()
        assert kernels.enabled_here()
        with kernels.fused_cpu_kernels(enabled=False):
            assert kernels.enabled_here()  # adds nothing, removes nothing
    assert not kernels.enabled_here()


def test_with_current_setting_carries_into_another_thread():
    with kernels.fused_cpu_kernels():
        carried = kernels.with_current_setting(kernels.enabled_here)
        assert _in_thread(kernels.enabled_here) is False  # a bare thread: off
        assert _in_thread(carried) is True
    assert _in_thread(carried) is True  # captured when wrapped
    assert _in_thread(kernels.with_current_setting(kernels.enabled_here)) is False


def test_ops_for_answers_per_thread():
    x = tf.constant(np.ones((2, 3), np.float32))
    with kernels.fused_cpu_kernels():
        here = kernels.ops_for(x) is not None
        there = _in_thread(lambda: kernels.ops_for(x))
    assert there is None
    assert here == (kernels.load() is not None)


def test_mirrored_replica_threads_get_the_setting_through_with_current_setting():
    """MirroredStrategy runs the replica function in a thread of its own (even on one
    device): bare, it would see the kernels off; wrapped, it sees the caller's setting,
    eagerly and while a tf.function traces."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    main = threading.get_ident()

    def replica():
        return threading.get_ident() != main, kernels.enabled_here()

    def replica_tensor():
        return tf.constant(kernels.enabled_here())

    with kernels.fused_cpu_kernels():
        assert strategy.run(replica) == (True, False)
        assert strategy.run(kernels.with_current_setting(replica)) == (True, True)
        step = tf.function(lambda: strategy.run(kernels.with_current_setting(replica_tensor)))
        assert bool(step())
