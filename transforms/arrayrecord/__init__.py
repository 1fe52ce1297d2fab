"""ArrayRecord shard files: writing one shard, reading its records (pure; no Beam)."""
