"""A Keras user's SavedModel serves without this package, whatever route made it.

The fused CPU kernels (`realformer_tf.kernels`) are custom ops: a graph that holds one
loads only where the package's library is loaded, so not in TensorFlow Serving. The
layers use them in training calls only. Here every model is trained with `fit` (the
kernels run: LayerNorm, dropout, the package's AdamW), then exported by a user's routes:
`model.export`, `tf.saved_model.save`, `keras.export.ExportArchive` and a `tf.Module`
with the user's own inference `tf.function`. A fresh interpreter, where `realformer_tf`
cannot be imported, loads each and serves it; its outputs must equal `predict`, and no
saved graph may name a `Realformer*` op.

The grid: `TransformerEncoder` in a Functional model in each `layer_norm_type` with
residual attention on and off; BertModel with its classifier and SQuAD heads and the
ETC classifier, in float32 and under `mixed_bfloat16`; the bare BertModel and EtcModel
(not trained: their outputs include per-layer lists, flattened in a signature).
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

import helpers_data as h
from realformer_tf import etc_modeling, kernels, modeling, optimization
from realformer_tf.layers import TransformerEncoder

B, L, VOCAB = 6, 11, 40  # lengths that are not powers of two
RNG = np.random.default_rng(61)
IDS = RNG.integers(1, VOCAB, size=(B, L)).astype(np.int32)
IDS[3:, 8:] = 0  # padding in half the rows
LABELS = RNG.integers(0, 2, size=B).astype(np.int32)
ENCODER_GRID = [(norm, residual) for norm in ("post", "pre", "normformer") for residual in (True, False)]
PACKAGE_MODELS = ("bert_classifier", "bert_squad", "etc_classifier")
POLICIES = ("float32", "mixed_bfloat16")


def _encoder_model(layer_norm_type, residual_attention):
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    x = keras.layers.Embedding(VOCAB, 24, mask_zero=True)(ids)
    out = TransformerEncoder(num_layers=2, num_heads=3, intermediate_size=37, layer_norm_type=layer_norm_type,
                             residual_attention=residual_attention, use_residual_scale=layer_norm_type == "normformer",
                             hidden_dropout=0.1, attention_dropout=0.1)(x)
    pooled = keras.layers.GlobalAveragePooling1D()(out["sequence_output"])
    model = keras.Model(ids, keras.layers.Dense(2, name="logits")(pooled))
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, IDS, LABELS


def _bert_features():
    return {"input_ids": IDS, "input_mask": (IDS != 0).astype(np.int32), "segment_ids": np.zeros_like(IDS)}


def _package_model(kind, policy):
    """One of the package's models as a user compiles it: default options but tiny sizes,
    the package's AdamW (whose fused update also runs in `fit`)."""
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if kind == "etc_classifier":
        config = etc_modeling.EtcConfig(**h.tiny_etc_config_dict(vocab_size=VOCAB))
        model = etc_modeling.EtcClassifierModel(config, num_labels=2, dtype=policy)
        features = {"long_token_ids": IDS, "global_token_ids": np.ones((B, 2), np.int32)}
        targets, losses = {"logits": LABELS}, {"logits": xent}
    else:
        config = modeling.BertConfig(**h.tiny_config_dict(vocab_size=VOCAB))
        features = _bert_features()
        if kind == "bert_classifier":
            model = modeling.BertClassifierModel(config, num_labels=2, dtype=policy)
            targets, losses = {"logits": LABELS}, {"logits": xent}
        else:
            model = modeling.BertSquadModel(config, dtype=policy)
            targets = {"start_logits": LABELS + 1, "end_logits": LABELS + 2}
            losses = {"start_logits": xent, "end_logits": xent}
    optimizer = optimization.AdamW(learning_rate=1e-3, weight_decay=0.01, epsilon=1e-6)
    model.compile(optimizer, loss=losses)
    return model, features, targets


def _bare_model(kind):
    if kind == "etc_model":
        model = etc_modeling.EtcModel(etc_modeling.EtcConfig(**h.tiny_etc_config_dict(vocab_size=VOCAB)))
        features = {"long_token_ids": IDS, "global_token_ids": np.ones((B, 2), np.int32)}
    else:
        model = modeling.BertModel(modeling.BertConfig(**h.tiny_config_dict(vocab_size=VOCAB)))
        features = _bert_features()
    model(features)
    return model, features, None


def _saved_ops(path):
    """Every op type named in a SavedModel's graph and its function library."""
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    ops = set()
    for meta in proto.meta_graphs:
        ops |= {n.op for n in meta.graph_def.node}
        ops |= {n.op for fn in meta.graph_def.library.function for n in fn.node_def}
    return ops


class _UserModule(tf.Module):
    """A user's own serving module: an inference tf.function that calls the model."""

    def __init__(self, model, spec):
        super().__init__()
        self.model = model
        self.serve = tf.function(lambda x: self.model(x, training=False), input_signature=[spec])


def _spec(features):
    if isinstance(features, dict):
        return {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in features}
    return tf.TensorSpec([None, None], tf.int32, name="ids")


def _export_all_routes(model, features, folder, extra_routes):
    """{route: path}: the model exported by `model.export`, `tf.saved_model.save` and,
    with `extra_routes`, an ExportArchive endpoint and a user's tf.Module."""
    paths = {route: os.path.join(folder, route) for route in ("export", "saved_model_save")}
    model.export(paths["export"], verbose=False)
    tf.saved_model.save(model, paths["saved_model_save"])
    if extra_routes:
        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.add_endpoint("serve", lambda x: model(x, training=False), input_signature=[_spec(features)])
        paths["export_archive"] = os.path.join(folder, "export_archive")
        archive.write_out(paths["export_archive"], verbose=False)
        paths["user_module"] = os.path.join(folder, "user_module")
        tf.saved_model.save(_UserModule(model, _spec(features)), paths["user_module"])
    return paths


def _fit_predict_export(name, model, features, targets, folder, extra_routes=False):
    """Trains with fit (the kernels must have run), predicts, exports; the job for the
    loading process. `targets` None: no training."""
    if targets is not None:
        _fit_with_kernels(name, model, features, targets)
    predicted = model.predict(features, batch_size=B, verbose=0)
    paths = _export_all_routes(model, features, os.path.join(folder, name), extra_routes)
    return {"paths": paths, "features": {k: v.tolist() for k, v in features.items()} if isinstance(features, dict)
            else features.tolist(), "predicted": predicted}


def _fit_with_kernels(name, model, features, targets):
    used = []
    ops_for = kernels.ops_for
    kernels.ops_for = lambda x, enabled=True: used.append(ops_for(x, enabled)) or used[-1]
    try:
        history = model.fit(features, targets, batch_size=3, epochs=1, verbose=0)
    finally:
        kernels.ops_for = ops_for
    assert np.all(np.isfinite(history.history["loss"])), name
    assert any(u is not None for u in used), f"{name}: fit did not use the fused kernels"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{case: job}: every model of the grid trained, predicted and exported."""
    folder = str(tmp_path_factory.mktemp("routes"))
    jobs = {}
    for i, (norm, residual) in enumerate(ENCODER_GRID):
        keras.utils.set_random_seed(i)
        name = f"encoder_{norm}_{'realformer' if residual else 'vanilla'}"
        jobs[name] = _fit_predict_export(name, *_encoder_model(norm, residual), folder, extra_routes=i == 4)
    for kind in PACKAGE_MODELS:
        for policy in POLICIES:
            keras.utils.set_random_seed(7)
            name = f"{kind}_{policy}"
            jobs[name] = _fit_predict_export(name, *_package_model(kind, policy), folder,
                                             extra_routes=kind == "bert_squad" and policy == "float32")
    for kind in ("bert_model", "etc_model"):
        keras.utils.set_random_seed(8)
        jobs[kind] = _fit_predict_export(kind, *_bare_model(kind), folder)
    return jobs


# Runs in a fresh interpreter without PYTHONPATH, with realformer_tf unimportable.
LOADER = r'''
import importlib.abc, json, sys
import numpy as np

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "realformer_tf":
            raise ModuleNotFoundError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, Block())
import tensorflow as tf

jobs = json.load(open(sys.argv[1]))
served = {}
for case, job in jobs.items():
    feats = job["features"]
    x = {k: tf.constant(v, tf.int32) for k, v in feats.items()} if isinstance(feats, dict) else tf.constant(feats, tf.int32)
    for route, path in job["paths"].items():
        loaded = tf.saved_model.load(path)
        if route == "saved_model_save":
            fn = loaded.signatures["serving_default"]
            out = fn(**x) if isinstance(x, dict) else fn(x)
        else:
            out = loaded.serve(x)
        out = out if isinstance(out, dict) else {"output": out}
        served[f"{case}/{route}"] = {k: np.asarray(v, np.float64).tolist() for k, v in out.items()}
served["loaded_modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "realformer_tf")
json.dump(served, open(sys.argv[2], "w"))
'''


@pytest.fixture(scope="module")
def served(exported, tmp_path_factory):
    work = tmp_path_factory.mktemp("loader")
    jobs = {case: {"paths": job["paths"], "features": job["features"]} for case, job in exported.items()}
    (work / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    (work / "loader.py").write_text(LOADER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, str(work / "loader.py"), str(work / "jobs.json"), str(work / "out.json")],
                          cwd=str(work), env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((work / "out.json").read_text())


@pytest.mark.slow
def test_no_saved_graph_names_a_package_op(exported):
    routes = 0
    for case, job in exported.items():
        for route, path in job["paths"].items():
            ours = sorted(op for op in _saved_ops(path) if op.startswith("Realformer"))
            assert ours == [], f"{case} via {route}: {ours}"
            routes += 1
    assert routes == 2 * len(exported) + 4


def _as_dict(predicted):
    """predict's outputs as a signature names them: lists spread over `key_0`, `key_1`, ..."""
    if not isinstance(predicted, dict):
        return {"output": predicted}
    flat = {}
    for key, value in predicted.items():
        flat.update({f"{key}_{i}": v for i, v in enumerate(value)} if isinstance(value, list) else {key: value})
    return flat


@pytest.mark.slow
def test_every_route_serves_predict_without_the_package(exported, served):
    assert served.pop("loaded_modules") == []
    for case, job in exported.items():
        want = _as_dict(job["predicted"])
        for route in job["paths"]:
            got = served[f"{case}/{route}"]
            if set(want) == {"output"} and len(got) == 1:  # a Functional model's one output, named by Keras
                got = {"output": next(iter(got.values()))}
            assert set(got) == set(want), (case, route, sorted(got))
            for key, value in want.items():
                np.testing.assert_allclose(np.asarray(got[key]), np.asarray(value, np.float64), atol=1e-5,
                                           err_msg=f"{case} via {route}: {key}")


@pytest.mark.slow
def test_saved_model_cli_lists_no_package_op(exported):
    path = exported["encoder_normformer_realformer"]["paths"]["export"]
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    proc = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "signature_def['serve']" in proc.stdout
    assert "contains the following ops" in proc.stdout and "Realformer" not in proc.stdout
