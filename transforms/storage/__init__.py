"""Storage, in one place: the only caller of Beam's ``FileSystems``, for local paths, gs:// and s3:// alike.

Every listing, read, hash, write, rename and deletion of the project goes through this package, so
each rule is written once (``docs/code-layout.md`` lists its modules). It takes Beam's file systems
and their S3 and GCS clients from ``transforms/filesystems.py``, and nothing else of Beam.
"""
