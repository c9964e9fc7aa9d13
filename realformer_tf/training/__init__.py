"""The training runtime: the Trainer (orbit loop), the task protocol, AdamW, distribution strategies and TPU set-up."""
