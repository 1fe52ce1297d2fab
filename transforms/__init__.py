"""Reusable Beam transforms for TFRecord shards, and the pure code beneath them."""
