"""Storage, in one place: the only caller of Beam's ``FileSystems``, for local paths, gs:// and s3:// alike.

Every listing, read, hash, write, rename and deletion of the project goes
through this package, so each rule is written once: a path that came out of a
match is never matched again (names may hold ``[``, ``*``, ``?``), a deletion
never follows a link, a full disk is one line naming the folder, S3's errors
name the object. It imports Beam's file systems and, in ``clients``, the S3
and GCS clients they are built on, and nothing else of Beam.

- ``clients``: Beam's S3 and GCS clients and written files (every reach into their internals);
- ``paths``: what a path names before anything is read;
- ``files``: opening and reading files, sizes, sha256 and CRC32C, byte ranges;
- ``listing``: paths matched once, a folder's files, local trees, store prefixes by level;
- ``writing``: files written whole, atomically or exclusively; a full disk in one line;
- ``folders``: renames in parallel, deletions that never follow a link, folders made;
- ``runs``: run files, a bundle's records written once and copied into shards;
- ``lock``, ``output_folder``: the output folder of a publishing run;
- ``shard_files``, ``publish``: a run's shards and shard list, staged, then published at once.
"""
