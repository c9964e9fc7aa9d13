"""Checks folders written by realformer_tf (`save_hf_folder` / convert_checkpoint.py
--output_format=hf) against stock transformers: loads each with transformers and
compares its outputs with the ones realformer_tf recorded beside it (outputs.npz, same
layout as tools/make_hf_fixture.py writes). Needs torch + transformers; not a test.

  python tools/check_hf_export.py /tmp/exports/*
"""

import os
import sys

import numpy as np
import torch
import transformers

# outputs.npz key -> attribute of the transformers output
OUTPUTS = {"last_hidden_state": "last_hidden_state", "pooler_output": "pooler_output",
           "prediction_logits": "prediction_logits", "seq_relationship_logits": "seq_relationship_logits",
           "logits": "logits", "start_logits": "start_logits", "end_logits": "end_logits"}


def check(folder):
    config = transformers.AutoConfig.from_pretrained(folder)
    model_class = getattr(transformers, config.architectures[0])
    model, info = model_class.from_pretrained(folder, output_loading_info=True, attn_implementation="eager")
    model.eval()
    data = np.load(os.path.join(folder, "outputs.npz"))
    inputs = {k: torch.tensor(data[k]) for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True)
    diffs = {}
    for key, attribute in OUTPUTS.items():
        if key not in data.files:
            continue
        value = out.hidden_states[-1] if key == "last_hidden_state" else getattr(out, attribute)
        diffs[key] = float(np.max(np.abs(value.numpy() - data[key])))
    missing = {k: v for k, v in info.items() if v}
    print(f"{folder}: {config.architectures[0]}, hidden_act {config.hidden_act}, loading issues "
          f"{missing or 'none'}, max |diff| {diffs}")
    return max(diffs.values())


if __name__ == "__main__":
    worst = max(check(folder) for folder in sys.argv[1:])
    print(f"worst max |diff|: {worst:.3g}")
