"""Beam jobs: build, verify, inspect and reshard TFRecord shards."""

import logging


class _DropBigQueryClientWarning(logging.Filter):
    """Drops the warning Beam logs at import when its optional BigQuery client is absent.

    Without the ``gcp`` extra, importing Beam logs "apitools not found, and
    bigquery client libraries are not available ..." on the root logger; the
    jobs use no BigQuery, so the line only confuses their output.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("apitools not found")


logging.getLogger().addFilter(_DropBigQueryClientWarning())
