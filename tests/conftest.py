"""Shared pytest set-up: keep Beam and cloud clients from probing the network."""

from __future__ import annotations

import os

os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
os.environ.setdefault("NO_GCE_CHECK", "true")

from tests.servers import gcs_server, job_server, s3_server, worker_pool  # noqa: E402,F401  session-wide servers

pytest_plugins = ["tests.cpu_budget", "tests.trees"]  # CPU budget of the fast tier; shared trees and builds
