"""Input pipelines (independent of the models): pretraining TFRecords, GLUE, SQuAD."""
