"""The seeded study and the pretraining comparison: the grid of runs (`grid`), training
and evaluating them (`reproduction`), the run archive (`run_archive`), the report
(`study_report`, `study_stats`, `study_figures`, `study_files`), and the independent
PyTorch peers that compare_pretraining.py trains beside the package (`peer_bert`,
`peer_xtransformers`, `compare_pretraining`). The attention statistics the report uses
are the package's (`realformer_tf.analysis`)."""
