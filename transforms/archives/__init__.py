"""Inputs held in containers (pure, no Beam, no storage): tar and zip archives, WebDataset shards, Parquet.

- ``members``: what a member is (``MemberRef``), how it is named (``archive!member``), the
  kind of a container input, and how a member's path gives its split and class;
- ``tar_index``: the members of a tar (and of the tars inside it) with their byte offsets;
- ``zip_index``: the members of a zip from its central directory, and a member's bytes;
- ``webdataset``: brace ranges of shard names, members grouped into samples, their labels;
- ``parquet_rows``: Parquet files of images (Hugging Face exports): columns, class names, rows.
"""
