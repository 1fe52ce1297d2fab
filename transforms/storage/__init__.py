"""Storage, in one place: the only caller of Beam's ``FileSystems``, for local paths, gs:// and s3:// alike.

Each rule is written once (``docs/code-layout.md`` lists the modules); Beam's file systems and their
S3 and GCS clients come from ``transforms/filesystems.py``.
"""
