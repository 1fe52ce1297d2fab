"""Inputs held in containers (pure, no Beam, no storage): tar and zip archives, WebDataset shards, Parquet."""
