"""Attention analysis of BERT checkpoints, as in the RealFormer paper (§4.1.3, Figures
4-6): per-token attention entropy and adjacent-layer Jensen-Shannon divergence
(`attention_stats`), their violin plots (`attention_plots`), and the analysis of
checkpoints on held-out inputs that analyze_attention.py runs (`analyze`)."""
