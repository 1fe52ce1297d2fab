"""Imports Apache Beam without the warning it logs when its optional BigQuery client is absent.

Beam logs "apitools not found, and bigquery client libraries are not available ..." at import
time; the jobs use no BigQuery. Every module of ``beam_jobs`` that imports Beam imports this
module first; the filter is on the root logger only while Beam is imported.
"""

import logging
import sys

__all__ = ["apache_beam", "PipelineOptions", "all_options"]


def _not_bigquery_client_warning(record: logging.LogRecord) -> bool:
    """A root logger filter: False for Beam's import-time warning about its absent BigQuery client."""
    return not str(record.msg).startswith("apitools not found")


try:
    logging.getLogger().addFilter(_not_bigquery_client_warning)
    try:
        import apache_beam  # imported here so its import-time warning is dropped
        from apache_beam.options.pipeline_options import PipelineOptions
    finally:
        logging.getLogger().removeFilter(_not_bigquery_client_warning)
except KeyboardInterrupt:  # Ctrl-C in a command's first seconds, while Beam loads: one line, as later
    sys.stderr.write("tfrecord-shards: interrupted: nothing was published\n")
    raise SystemExit(130) from None


def all_options(options: "PipelineOptions", **kwargs) -> dict:
    """``options.get_all_options(**kwargs)`` without Beam's warning about arguments no options class
    defines (a job refuses them itself)."""
    log = logging.getLogger("apache_beam.options.pipeline_options")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return options.get_all_options(**kwargs)
    finally:
        log.setLevel(level)
