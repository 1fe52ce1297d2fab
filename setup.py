"""Packaging for the TFRecord shard toolkit; usable with Beam's ``--setup_file``."""

import setuptools

setuptools.setup(
    name="tfrecord-shards",
    version="0.1.0",
    description="Build, verify and reshard balanced TFRecord shards of image datasets on Apache Beam.",
    python_requires=">=3.10",
    packages=setuptools.find_packages(include=["transforms", "transforms.*", "beam_jobs", "beam_jobs.*"]),
    package_data={"transforms.example": ["*.proto"]},
    entry_points={"console_scripts": ["tfrecord-shards = beam_jobs.cli.main:main"]},
    install_requires=[
        "apache-beam>=2.60,<3",
        "protobuf>=3.20.3,<7",
        "crc32c>=2.3",
        "Pillow>=10.0",
        "numpy>=1.24",
        # Parquet inputs; apache-beam depends on it too (2.77: pyarrow>=14.0.1,<26), named here
        # because transforms/archives/parquet_rows.py imports it.
        "pyarrow>=14.0.1",
        # WebDataset brace patterns, read as webdataset reads them.
        "braceexpand>=0.1.7",
        # Beam's ReadFromTFRecord (docs/reading.md) needs a CRC32C module that apache-beam does
        # not require; google-crc32c is the fast one it looks for (apache-beam[tfrecord] brings crcmod).
        "google-crc32c>=1.5",
    ],
    extras_require={
        # grpcio-tools from 1.82 needs protobuf>=7; apache-beam needs protobuf<7.
        "test": [
            "pytest>=7", "pytest-xdist>=3", "hypothesis>=6", "grpcio-tools<1.82",
            "apache-beam[aws,gcp,dask]",  # s3:// and gs:// filesystems, the Dataflow and Dask runners
            "moto[server]>=5",  # S3 API server on loopback
            "gcp-storage-emulator",  # GCS API server on loopback
            "build",  # sdist/wheel packaging test; Beam's --setup_file staging
            "scikit-image>=0.22",  # its data images are half of the messy corpus (tests/messy_corpus.py)
            # Readers of the shard folder as it is: tfds.builder_from_directory
            # (tests/e2e/test_annotated_builds.py) and the PyTorch tfrecord package with our
            # .idx files (tests/e2e/test_index_readers.py; it needs no torch to read).
            "tensorflow-datasets>=4.9.10", "tfrecord>=1.14.6",
            # ArrayRecord shards read by Grain and tfds's as_data_source (docs/reading.md).
            "grain>=0.2.18", "array_record>=0.8.6",
        ],
        # build --format array_record (ArrayRecord's writer), and Grain to read such sets (docs/reading.md).
        "arrayrecord": ["array_record>=0.8.6", "grain>=0.2.18"],
        "aws": ["apache-beam[aws]"],
        "gcp": ["apache-beam[gcp]"],
        "dask": ["apache-beam[dask]"],  # --runner DaskRunner (dask and distributed)
        # TensorFlow reads the shards (tests/e2e/test_tensorflow_interop.py). tensorflow-cpu
        # wheels exist for x86-64 only; TF 2.21 takes protobuf>=6.31.1,<8, Beam <7.
        "compat": [
            "tensorflow-cpu>=2.21,<3; platform_machine == 'x86_64' or platform_machine == 'AMD64'",
            "tensorflow>=2.21,<3; platform_machine != 'x86_64' and platform_machine != 'AMD64'",
        ],
        # benchmarks/ (python -m benchmarks.throughput cpu_per_gb, ...): TensorFlow baselines (the
        # compat extra), the photos its dataset is derived from (scikit-image and scikit-learn ship
        # them), psutil for the process tree's RSS, py-spy for the profiles in BENCHMARKS.md.
        "bench": ["tfrecord-shards[compat]", "scikit-image>=0.22", "scikit-learn>=1.3", "psutil>=5.9",
                  "py-spy>=0.3"],
    },
)
