"""Archives and Parquet files on gs:// and s3:// (real loopback servers): read by range, never copied."""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.archive_fixtures import files_of, make_parquet, make_shards, make_tar_of_tars, make_zip
from tests.shard_fixtures import dead_letters, examples, make_class_tree, run_build, shard_files

boto3 = pytest.importorskip("boto3", reason="needs apache-beam[aws] (pip install -e '.[test]')")
gcs = pytest.importorskip("google.cloud.storage", reason="needs apache-beam[gcp] (pip install -e '.[test]')")

BUCKET = "archives-test"


def _records(out: str) -> dict[str, tuple[bytes, int]]:
    return {hashlib.sha256(ex["image/encoded"]).hexdigest(): (ex["image/class/text"], ex["image/class/label"])
            for name in shard_files(out) for ex in examples(os.path.join(out, name))}


@pytest.fixture(scope="module")
def containers(tmp_path_factory):
    """A folder's build, and the folder as a tar of class tars, a zip, WebDataset shards, Parquet."""
    from beam_jobs import build_shards

    where = tmp_path_factory.mktemp("containers")
    root = str(where / "tree")
    make_class_tree(root, per_class=4, broken=True)
    out = str(where / "folder_out")
    assert build_shards.run(["--input", root, "--output_dir", out, "--max_bad_fraction", "0.5"]) == 0
    files = {"train.tar": make_tar_of_tars(root, str(where / "train.tar")),
             "photos.zip": make_zip(root, str(where / "photos.zip")),
             "rows.parquet": make_parquet(root, str(where / "rows.parquet"), row_group_size=4)}
    make_shards(root, str(where / "shards"))
    for name in sorted(os.listdir(where / "shards")):
        files[f"shards/{name}"] = str(where / "shards" / name)
    # A Hugging Face export: the rows in two Parquet files, and a dataset card beside them.
    rels = files_of(root)
    for part in range(2):
        name = f"train-0000{part}-of-00002.parquet"
        files[f"hf/{name}"] = make_parquet(root, str(where / name), row_group_size=4, rels=rels[part::2])
    (where / "README.md").write_text("# a dataset card\n")
    files["hf/README.md"] = str(where / "README.md")
    return _records(out), files


INPUTS = (("train.tar", []), ("photos.zip", []), ("rows.parquet", []),
          ("shards/shard-{000000..000001}.tar", ["--class_names", "daisy,rose,tulip"]),
          ("hf/*.parquet", []), ("hf", []))


@pytest.mark.slow
@pytest.mark.parametrize("name, flags", INPUTS)
def test_containers_on_s3_give_the_folders_records(s3_server, containers, name, flags, tmp_path, capsys):
    expected, files = containers
    client = boto3.client("s3", endpoint_url=s3_server.url, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    for key, path in files.items():
        with open(path, "rb") as fh:
            client.put_object(Bucket=BUCKET, Key=key, Body=fh.read())
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", f"s3://{BUCKET}/{name}", "--output_dir", out,
                               "--max_bad_fraction", "0.5", "--s3_endpoint_url", s3_server.url,
                               "--s3_access_key_id", "testing", "--s3_secret_access_key", "testing",
                               "--s3_region_name", "us-east-1", *flags)
    assert status == 0, err
    assert _records(out) == expected
    assert all(d["path"].startswith(f"s3://{BUCKET}/") and "!" in d["path"] for d in dead_letters(out))
    assert len(dead_letters(out)) == 3


@pytest.mark.slow
@pytest.mark.parametrize("name, flags", INPUTS[:2] + INPUTS[-2:])
def test_containers_on_gcs_give_the_folders_records(gcs_server, containers, name, flags, tmp_path, capsys):
    from google.auth.credentials import AnonymousCredentials

    expected, files = containers
    client = gcs.Client(project="my-project-123", credentials=AnonymousCredentials())
    bucket = client.lookup_bucket(BUCKET) or client.create_bucket(BUCKET)
    for key, path in files.items():
        bucket.blob(key).upload_from_filename(path)
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", f"gs://{BUCKET}/{name}", "--output_dir", out,
                               "--max_bad_fraction", "0.5", "--no_auth", *flags)
    assert status == 0, err
    assert _records(out) == expected
    assert len(dead_letters(out)) == 3
