"""Serving: the raw-text encoder (tensorflow-text) and SavedModel export."""
