"""Jobs: flags, the job runner, output folders, the tasks (pretraining, classifier, SQuAD), conversion and the TPU smoke check."""
