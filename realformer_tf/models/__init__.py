"""Model definitions: the config base, the named variants, and one subpackage per family (BERT, ETC). Pure Keras; no checkpoint formats."""
