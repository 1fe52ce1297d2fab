"""Helpers of the tests that run jobs on Beam's portable runner with EXTERNAL workers, on s3:// (moto).

``Bucket`` reads what a job left under a prefix; ``s3_flags`` and
``external_flags`` are the flags a job gets to reach moto's server and the
worker pool (``tests.servers``); ``upload_tree`` puts a local input tree on
the bucket (the workers see no local file of the test's: their /tmp is their own).
"""

from __future__ import annotations

import json
import os

from transforms.shardset.tfds_metadata import dataset_name

BUCKET = "external-workers"


class Bucket:
    """The test bucket on moto's server, read with boto3 (not through the project's storage)."""

    def __init__(self, url: str, name: str = BUCKET) -> None:
        import boto3

        self.name = name
        self.client = boto3.client("s3", endpoint_url=url, aws_access_key_id="testing",
                                   aws_secret_access_key="testing", region_name="us-east-1")

    def keys(self, prefix: str) -> list[str]:
        """Every key below ``prefix`` (a folder), sorted."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix + "/")
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def objects(self, prefix: str) -> dict[str, bytes]:
        """Key below ``prefix`` -> bytes, of every object there (``dataset_info.json`` without the
        dataset's name, which is the folder's)."""
        found = {key[len(prefix) + 1:]: self.client.get_object(Bucket=self.name, Key=key)["Body"].read()
                 for key in self.keys(prefix)}
        if "dataset_info.json" in found:
            info = json.loads(found["dataset_info.json"])
            assert info.pop("name") == dataset_name(prefix), info
            found["dataset_info.json"] = json.dumps(info, sort_keys=True).encode()
        return found

    def copy(self, source: str, target: str) -> None:
        """Copies every object below the prefix ``source`` to the same key below ``target``."""
        for key in self.keys(source):
            self.client.copy_object(Bucket=self.name, Key=target + key[len(source):],
                                    CopySource={"Bucket": self.name, "Key": key})

    def upload_tree(self, root: str, prefix: str) -> None:
        """Uploads every file below the local folder ``root`` to ``prefix``/<its relative path>."""
        for where, _, names in os.walk(root):
            for name in names:
                path = os.path.join(where, name)
                self.client.upload_file(path, self.name, prefix + "/" + os.path.relpath(path, root))

    def url(self, prefix: str) -> str:
        return f"s3://{self.name}/{prefix}"


def s3_flags(url: str) -> list[str]:
    """The flags that point a job's S3 file system at moto's server."""
    return ["--s3_endpoint_url", url, "--s3_access_key_id", "testing", "--s3_secret_access_key", "testing",
            "--s3_region_name", "us-east-1"]


def external_flags(pool) -> list[str]:
    """The flags that run a job on Beam's portable runner (job service in the launcher) and ``pool``'s workers."""
    return ["--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type", "EXTERNAL",
            "--environment_config", pool.address]
