"""Builds the tiny Hugging Face BERT folders under tests/fixtures/ and records what
`transformers` computes on them, so tests can check our loader without torch.

Run once, with transformers + torch installed (not needed by the package or its tests):

  python tools/make_hf_fixture.py --output_dir tests/fixtures

Each folder holds config.json + model.safetensors as `save_pretrained` writes them, and
outputs.npz with the inputs (input_ids, attention_mask, token_type_ids) and the
float32 outputs of the torch model in eval mode.
"""

import argparse
import os

import numpy as np
import torch
import transformers

SEED = 1234
BATCH, SEQ = 2, 13
SIZES = dict(vocab_size=50, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
             intermediate_size=40, max_position_embeddings=20, type_vocab_size=2)

# name: (model class, hidden_act, extra config, outputs to record)
FIXTURES = {
    # bert.-prefixed names, exact erf GELU, both pretraining heads.
    "hf_bert_pretraining_gelu": ("BertForPreTraining", "gelu", {}),
    # Bare BertModel names (no prefix), tanh GELU.
    "hf_bert_model_gelu_new": ("BertModel", "gelu_new", {}),
    # Sequence classification (classifier.*), tanh GELU under its other name.
    "hf_bert_classifier_tanh": ("BertForSequenceClassification", "gelu_pytorch_tanh",
                                {"num_labels": 3}),
    # Question answering (qa_outputs.*; this class has no pooler), erf GELU.
    "hf_bert_qa_gelu": ("BertForQuestionAnswering", "gelu", {}),
}


def randomize(model, generator):
    """Non-trivial values everywhere (LayerNorm scales and every bias too), large
    enough that the two GELU forms differ visibly in the outputs."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("LayerNorm.weight"):
                param.copy_(1.0 + 0.2 * noise)
            else:
                param.copy_(0.3 * noise)


def make_inputs(rng):
    input_ids = rng.integers(1, SIZES["vocab_size"], size=(BATCH, SEQ))
    attention_mask = np.ones((BATCH, SEQ), np.int64)
    attention_mask[1, 9:] = 0  # right padding in the second example
    input_ids[1, 9:] = 0
    token_type_ids = np.zeros((BATCH, SEQ), np.int64)
    token_type_ids[:, 6:] = 1
    token_type_ids[1, 9:] = 0
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


def record(model, inputs):
    """{name: float32 array} of the model's outputs (and the encoder's)."""
    tensors = {k: torch.tensor(v) for k, v in inputs.items()}
    with torch.no_grad():
        out = model(**tensors, output_hidden_states=True)
    arrays = {"last_hidden_state": out.hidden_states[-1]}
    for key in ("pooler_output", "prediction_logits", "seq_relationship_logits", "logits",
                "start_logits", "end_logits"):
        if getattr(out, key, None) is not None:
            arrays[key] = getattr(out, key)
    return {k: v.numpy().astype(np.float32) for k, v in arrays.items()}


def build(name, output_dir, rng, generator):
    class_name, hidden_act, extra = FIXTURES[name]
    config = transformers.BertConfig(hidden_act=hidden_act,
                                     attn_implementation="eager",
                                     **SIZES, **extra)
    model = getattr(transformers, class_name)(config).eval()
    randomize(model, generator)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    inputs = make_inputs(rng)
    folder = os.path.join(output_dir, name)
    model.save_pretrained(folder, safe_serialization=True)
    np.savez(os.path.join(folder, "outputs.npz"), **inputs, **record(model, inputs))
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="tests/fixtures")
    args = parser.parse_args()
    torch.manual_seed(SEED)
    generator = torch.Generator().manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for name in FIXTURES:
        print("wrote", build(name, args.output_dir, rng, generator))


if __name__ == "__main__":
    main()
