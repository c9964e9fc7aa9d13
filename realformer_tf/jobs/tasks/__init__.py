"""Tasks = model + data + loss + metrics, run by `realformer_tf.training.trainer.Trainer`."""
