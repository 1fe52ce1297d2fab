"""Beam jobs: build, verify, inspect and reshard TFRecord shards.

Importing this package imports no Beam (``beam_jobs.cli.main`` answers ``--help`` and usage errors
without it); each module that imports Beam imports ``beam_jobs.quiet_beam`` first.
"""
