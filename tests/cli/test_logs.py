"""What a command's logging is set up from: ``--verbose`` and ``--log_level``, in either spelling."""

from __future__ import annotations

import pytest

from beam_jobs.cli.logs import LogSettings, log_settings


@pytest.mark.parametrize("argv, settings", [
    (["--log_level", "DEBUG"], LogSettings(False, "DEBUG")),
    (["--log-level", "debug", "--input", "x"], LogSettings(False, "DEBUG")),  # python -m beam_jobs.build_shards
    (["--log-level=WARNING", "--verbose"], LogSettings(True, "WARNING")),
    ([], LogSettings(False, "INFO")),
])
def test_log_settings_read_either_spelling(argv, settings) -> None:
    assert log_settings(argv) == settings
