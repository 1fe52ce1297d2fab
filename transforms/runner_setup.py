"""Runner plumbing shared by the jobs: option defaults and readable failure messages."""

from __future__ import annotations

import re

from apache_beam.options.pipeline_options import PipelineOptions

from transforms.errors import ShardsError

__all__ = ["prepare_options", "error_summary"]

_PROJECT_ERROR = re.compile(
    r"(?:transforms\.errors\.)?(ShardsError|UsageError|RecordError|ExampleError|ImageError|"
    r"ManifestError|PlanError|PublishError): (.+)")


_STEP_SUFFIX = re.compile(r"\s*\[while running '[^']*'\]\s*$")


def prepare_options(options: PipelineOptions) -> PipelineOptions:
    """Returns the options a job runs with (Beam's own flags are left as given)."""
    return options


def error_summary(err: BaseException) -> str:
    """Returns one line saying why a pipeline failed.

    Runners wrap errors raised in workers in their own exception types and add
    stack traces to the message; the project's own error, if any, is the line
    a user needs.
    """
    text = str(err)
    found = _PROJECT_ERROR.findall(text)
    if isinstance(err, ShardsError):
        message = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    elif found:
        message = found[-1][1]
    else:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        message = f"{type(err).__name__}: {lines[-1] if lines else ''}"
    while _PROJECT_ERROR.match(message):  # runners may repeat the type name
        message = _PROJECT_ERROR.match(message).group(2)
    return _STEP_SUFFIX.sub("", message).strip()
