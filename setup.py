"""Packaging for the TFRecord shard toolkit; usable with Beam's ``--setup_file``."""

import setuptools

setuptools.setup(
    name="tfrecord-shards",
    version="0.1.0",
    description="Build, verify and reshard balanced TFRecord shards of image datasets on Apache Beam.",
    python_requires=">=3.10",
    packages=setuptools.find_packages(include=["transforms", "transforms.*", "beam_jobs", "beam_jobs.*"]),
    package_data={"transforms": ["proto/*.proto"]},
    install_requires=[
        "apache-beam>=2.60,<3",
        "protobuf>=3.20.3,<7",
        "crc32c>=2.3",
        "Pillow>=10.0",
        "numpy>=1.24",
    ],
    extras_require={
        "test": ["pytest>=7", "hypothesis>=6", "grpcio-tools<1.82"]  # newer grpcio-tools needs protobuf>=7; apache-beam needs <7,
        "aws": ["apache-beam[aws]"],
        "gcp": ["apache-beam[gcp]"],
    },
)
