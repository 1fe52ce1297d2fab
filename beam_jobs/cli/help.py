"""``--help_beam``: Beam's own options. A job's own ``--help`` needs no Beam: it comes from its flags'
declarations (``declared.format_job_help``), so it cannot miss a flag.
"""

from __future__ import annotations

import argparse

__all__ = ["format_beam_help"]


def format_beam_help(prog: str) -> str:
    """Returns the help of Beam's own pipeline options (every options class Beam defines)."""
    from beam_jobs.quiet_beam import PipelineOptions, all_options  # here: a job's own help needs no Beam

    parsers: list[argparse.ArgumentParser] = []
    all_options(PipelineOptions([]), add_extra_args_fn=parsers.append)
    parser = parsers[0]
    from transforms.beam_compat import WORKERS_RULE

    for action in parser._actions:  # Beam's own help line, with how the jobs choose when it is left out
        if action.dest == "direct_num_workers":
            action.help = f"{action.help} {WORKERS_RULE}"
    parser.prog = prog
    parser.description = ("Apache Beam's pipeline options; the job's own flags are in --help. "
                          "Beam's documentation: https://beam.apache.org/documentation/runners/")
    return parser.format_help()
