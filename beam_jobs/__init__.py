"""Beam jobs: build, verify, inspect and reshard TFRecord shards.

Importing this package imports Apache Beam once, with the one warning Beam
logs at import time when its optional BigQuery client is absent dropped
("apitools not found, and bigquery client libraries are not available ...");
the jobs use no BigQuery, so the line only confuses their output. The filter
is on the root logger only while Beam is imported.
"""

import contextlib
import logging
import sys
from typing import Iterator


class _DropBigQueryClientWarning(logging.Filter):
    """Drops Beam's import-time warning about its absent BigQuery client."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("apitools not found")


@contextlib.contextmanager
def _without_bigquery_client_warning() -> Iterator[None]:
    """Drops Beam's BigQuery client warning from the root logger inside the block."""
    drop = _DropBigQueryClientWarning()
    root = logging.getLogger()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


try:
    with _without_bigquery_client_warning():
        import apache_beam  # noqa: F401  (imported here so its import-time warning is dropped)
except KeyboardInterrupt:  # Ctrl-C in a command's first seconds, while Beam loads: one line, as later
    sys.stderr.write("tfrecord-shards: interrupted: nothing was published\n")
    raise SystemExit(130) from None
