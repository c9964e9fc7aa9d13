"""Hugging Face BERT tensor names <-> the original BERT variable names.

PyTorch stores a Linear weight [out, in]; TF's kernels are [in, out], so the names that
map to a kernel come with `transpose=True`.

    hf.to_original_name("bert.encoder.layer.0.attention.self.query.weight")
    # ("bert/encoder/layer_0/attention/self/query/kernel", True)
"""

# Head tensors: Hugging Face name -> original BERT name. Their weights are stored
# [outputs, hidden] on both sides (no transpose).
HEAD_NAMES = {
    "cls.predictions.bias": "cls/predictions/output_bias",
    "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
    "cls.seq_relationship.bias": "cls/seq_relationship/output_bias",
    "classifier.weight": "output_weights",
    "classifier.bias": "output_bias",
    "qa_outputs.weight": "cls/squad/output_weights",
    "qa_outputs.bias": "cls/squad/output_bias",
}
HEAD_NAMES_BACK = {original: hf for hf, original in HEAD_NAMES.items()}
# Tensors that duplicate others: the decoder is tied to the word embeddings and its
# bias to cls.predictions.bias; position_ids is a constant buffer of older versions.
TIED_DECODER = "cls.predictions.decoder.weight"
_DUPLICATES = ("cls.predictions.decoder.bias", "embeddings.position_ids")
_ENCODER_PARTS = ("embeddings", "encoder", "pooler")


def to_original_name(hf_name):
    """Hugging Face tensor name -> (original BERT name, transpose?); None for tensors
    that duplicate others (tied decoder, position_ids buffer)."""
    if hf_name in HEAD_NAMES:
        return HEAD_NAMES[hf_name], False
    if hf_name == TIED_DECODER or hf_name.endswith(_DUPLICATES):
        return None
    parts = hf_name.split(".")
    if len(parts) < 2:
        return hf_name, False  # not a BERT tensor; reported as foreign
    if parts[0] in _ENCODER_PARTS:  # a bare BertModel's names
        parts = ["bert"] + parts
    if len(parts) > 3 and parts[2] == "layer":
        parts[2:4] = [f"layer_{parts[3]}"]
    *path, last = parts
    if path[-1].endswith("LayerNorm"):
        last = {"weight": "gamma", "bias": "beta"}.get(last, last)
    elif path[-1].endswith("_embeddings") and last == "weight":
        return "/".join(path), False
    elif last == "weight":
        return "/".join(path + ["kernel"]), True
    return "/".join(path + [last]), False


def to_hf_name(original, prefixed=True):
    """Original BERT name -> (Hugging Face name, transpose?)."""
    if original in HEAD_NAMES_BACK:
        return HEAD_NAMES_BACK[original], False
    parts = original.split("/")
    if not prefixed and parts[0] == "bert":
        parts = parts[1:]
    parts = [p.replace("layer_", "layer.") if p.startswith("layer_") else p for p in parts]
    last = parts[-1]
    if last.endswith("_embeddings"):
        return ".".join(parts + ["weight"]), False
    if last == "kernel":
        return ".".join(parts[:-1] + ["weight"]), True
    parts[-1] = {"gamma": "weight", "beta": "bias"}.get(last, last)
    return ".".join(parts), False
