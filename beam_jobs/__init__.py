"""Beam jobs: build, verify, inspect and reshard TFRecord shards."""
