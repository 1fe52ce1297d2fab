"""Every command's flags, declared once (see ``beam_jobs/cli/declared.py``); no Beam, Pillow or numpy.

To add a flag to a job, add one ``Flag(...)`` to its ``FlagSet`` below (``recorded=True`` if the
manifest records it): the options class, the config's field, ``--help``, usage errors and manifest
options follow; the job reads it as ``cfg.NAME``.
"""

from __future__ import annotations

from beam_jobs.cli import values as v
from beam_jobs.cli.declared import Flag, FlagSet, Job
from transforms.example.features import FEATURE_TYPES
from transforms.images.choices import (COCO_IDS, DEFAULT_MAX_IMAGE_BYTES, DEFAULT_NEAR_DUPLICATE_DISTANCE,
                                       DEFAULT_NEAR_DUPLICATES, EXIF_ORIENTATION_MODES, IMAGE_MODES, LAYOUTS,
                                       MAX_NEAR_DUPLICATE_DISTANCE, NEAR_DUPLICATE_MODES, RESIZE_MODES,
                                       VALIDATE_LEVELS)
from transforms.images.objects import BBOX_FORMATS, BOX_POLICIES
from transforms.shardset.naming import FILE_FORMATS
from transforms.shardset.planning import MIB
from transforms.tfrecord.compression import COMPRESSIONS, READ_COMPRESSIONS
from transforms.tfrecord.framing import DEFAULT_MAX_RECORD_BYTES
from transforms.verify.decoders import DECODERS

__all__ = ["SHARED", "RUN", "RECORD_READING", "SHARD_FORMAT", "BUILD_FLAGS", "PLAN_FLAGS", "RESHARD_FLAGS",
           "VERIFY_FLAGS", "PUBLISHING", "BUILD", "PLAN", "RESHARD", "VERIFY", "INSPECT", "SAMPLE", "JOBS",
           "PARQUET_COLUMNS", "SAMPLE_CLASSES"]

# Parquet inputs' default columns (transforms.archives.parquet_rows; a test keeps them equal).
PARQUET_COLUMNS = ("image", "label")
# The sample's styled class names (transforms.images.samples.CLASS_STYLES; a test keeps them equal).
SAMPLE_CLASSES = ("daisy", "rose", "tulip", "sunflower", "dandelion")

# Beam parses every options class with one parser, so two jobs cannot each define --input: the
# flags several jobs share are here, once; each job says which it takes (Job.shared).
SHARED = FlagSet("ShardingOptions", (
    Flag("input", action="append", type=v.input_path, group="inputs", recorded=True, required=True,
         help="build: folder of class (or split) folders, a .csv/.jsonl input manifest, a .tar/.tar.gz/.tgz/.zip "
              "archive, WebDataset shards ('shard-{000..099}.tar'), .parquet files ('hf/*.parquet', or a folder of "
              "them); reshard: TFRecord files or a pattern. Local, gs:// or s3://. Repeatable."),
    Flag("output_dir", type=v.folder_path, group="output", required=True,
         help="Folder of the shard set (no *, ? or [ in its path)."),
    Flag("split", group="labels and splits", recorded=True,
         help="build: split of unsplit inputs (default train); reshard: put every record in this split (default: "
              "keep each file's split, from its shard name)."),
    Flag("shard_size_mb", type=v.shard_size_mb, default=150.0, group="sharding", recorded=True,
         help="Target shard size in MiB; shards land within [2/3, 4/3] of it."),
    Flag("num_shards", type=v.positive_int, group="sharding", recorded=True,
         help="Fixed number of shards per split (overrides --shard_size_mb)."),
    Flag("compression", default="none", choices=COMPRESSIONS, group="output", recorded=True,
         help="Compression of the shards written."),
    Flag("seed", type=v.seed, default=0, group="sharding", recorded=True, help="Shuffle seed (signed 64-bit)."),
    Flag("shard_sha256", action="store_true", default=False, group="output", recorded=True,
         help="build, reshard: also list each shard's sha256 in shards.jsonl (about 2.6 CPU s more per GB on a "
              "core without SHA extensions, 0.6 with them). Each shard's CRC32C is always listed, as GCS's crc32c "
              "metadata and gsutil ls -L give it, and verify checks it."),
    # How to publish, not what: not recorded.
    Flag("overwrite_unlisted_shards", action="store_true", default=False, group="output",
         help="build, reshard: delete shard-named files in --output_dir that no "
              "manifest.json of this tool lists (else the run refuses to start)."),
    Flag("drop_other_splits", action="store_true", default=False, group="output",
         help="build, reshard: remove the listed shards of splits this run does "
              "not write (else they are kept and listed again)."),
    Flag("replace", action="store_true", default=False, group="output",
         help="build, reshard: rebuild a split --output_dir holds from these inputs although other --input values "
              "built it (else the run refuses)."),
    Flag("name", type=v.tfds_name, group="output", recorded=True,
         help="build, reshard: the dataset's name for tensorflow-datasets "
              "(default: the output folder's name, as tfds spells names)."),
    Flag("max_bad_fraction", type=v.fraction, default=v.DEFAULT_MAX_BAD_FRACTION, group="failures",
         recorded=True,
         help="build, reshard: fail (publishing nothing) if more inputs than this fraction are rejected (reshard: "
              "damaged stretches, with --skip_corrupt, against records read)."),
))

RUN = FlagSet("RunOptions", (
    Flag("verbose", action="store_true", default=False, group="messages",
         help="Show Beam's INFO logs and the full traceback of a failure."),
    Flag("log_level", default="INFO", type=str.upper, choices=v.LOG_LEVELS, group="messages",
         help="Level of the job's own log lines; DEBUG also shows Beam's logs and tracebacks."),
    Flag("progress_interval", type=v.positive_float, default=5.0, group="messages",
         help="Seconds between progress reports on the local runners (at least 1; a "
              "terminal's bar is redrawn once a second)."),
))

_MAX_RECORD_MB = Flag(
    "max_record_mb", type=v.record_size_mb, default=DEFAULT_MAX_RECORD_BYTES >> 20, group="inputs",
    help="Largest record read, in MiB; a record declaring more is reported as damaged (bad_length) before its "
         "bytes are read, so a damaged length in a small compressed file cannot exhaust memory.")
RECORD_READING = FlagSet("RecordReadingOptions", (_MAX_RECORD_MB,))

# The build's and the reshard's (one FlagSet: Beam holds each option once).
SHARD_FORMAT = FlagSet("ShardFormatOptions", (
    Flag("format", default="tfrecord", choices=FILE_FORMATS, group="output", recorded=True,
         help="File format of the shards: tfrecord, or array_record (the same records in ArrayRecord files, "
              "group_size:1 and uncompressed, for random access with Grain or tfds's as_data_source; needs the "
              "array_record package; not with --append or --compression)."),
))

BUILD_FLAGS = FlagSet("BuildOptions", (
    Flag("layout", default="auto", choices=LAYOUTS, group="inputs", recorded=True,
         help="Folder layout: class folders, split folders, or auto-detect."),
    # How fast, not what: not recorded.
    Flag("list_key_ranges", type=v.non_negative_int, default=0, group="inputs",
         help="Cut each gs:// or s3:// class folder of more than 1,000 objects into this many key ranges, listed "
              "by several workers (one fused stage more). 0: one worker lists each class folder."),
    Flag("label_regex", group="labels and splits", recorded=True,
         help="Take the class from the first group of this regex in the file name."),
    # Beam reserves --labels for Dataflow job labels, hence --class_names.
    Flag("class_names", group="labels and splits", recorded=True,
         help="Comma-separated class names in index order. An integer label (in any input) "
              "is a class index and names the class at that place; without this flag the "
              "classes are 0 to the largest index, and a mix of integer and text labels is refused."),
    Flag("labels_file", group="labels and splits", recorded=True, help="File with one class name per line."),
    Flag("split_fractions", group="labels and splits", recorded=True,
         help="Split unsplit inputs by content (the image's sha256), so identical "
              "bytes share a split, e.g. train=0.9,validation=0.1."),
    Flag("image_mode", default="tf", choices=IMAGE_MODES, group="images", recorded=True,
         help="tf: JPEG and PNG that TensorFlow decodes as they are, other "
              "images as PNG; passthrough: every source byte unchanged."),
    Flag("exif_orientation", default="apply", choices=EXIF_ORIENTATION_MODES, group="images", recorded=True,
         help="apply: --image_mode tf stores images with an EXIF orientation upright; keep: tf and passthrough "
              "keep the pixels as the file holds them and write image/orientation (int64, 1-8)."),
    Flag("validate", default="structure", choices=VALIDATE_LEVELS, group="images", recorded=True,
         help="How images are checked (docs/images.md: Validation levels):\n"
              "header: the header only (format, size, bombs)\n"
              "structure: JPEG/PNG markers, CRCs, end; others: decode\n"
              "decode: decodes the pixels (JPEG at 1/8 scale)\n"
              "full: every pixel and frame at full resolution"),
    Flag("image_format", default="jpeg", choices=("jpeg", "png"), group="images", recorded=True,
         help="Encoding for --image_mode reencode."),
    Flag("jpeg_quality", type=v.positive_int, default=95, group="images", recorded=True,
         help="JPEG quality for --image_mode reencode."),
    Flag("grayscale", action="store_true", default=False, group="images", recorded=True,
         help="One channel instead of RGB (reencode, raw)."),
    Flag("resize", type=v.parse_size, group="images", recorded=True,
         help="Resize to WIDTHxHEIGHT (reencode, raw); see --resize_mode."),
    Flag("resize_mode", default="stretch", choices=RESIZE_MODES, group="images", recorded=True,
         help="stretch to WIDTHxHEIGHT, fit inside it keeping the aspect ratio, or crop the centre to fill it."),
    Flag("max_image_mb", type=v.positive_float, default=DEFAULT_MAX_IMAGE_BYTES / MIB, group="checks",
         recorded=True,
         help="Largest input file read, in MiB; larger ones are too_large dead "
              "letters, refused without being read whole."),
    # How fast, not what: not recorded (outputs do not depend on it).
    Flag("image_threads", type=v.non_negative_int, default=0, group="images",
         help="Images each worker reads, checks and encodes at once. 0: one per CPU core the worker may use where "
              "that pays (--validate decode or full, --image_mode reencode or raw, gs:// or s3:// inputs), else 1. "
              "Outputs do not depend on it."),
    Flag("feature", action="append", group="inputs", recorded=True,
         help=f"Extra manifest key or CSV column as name:type, type one of {', '.join(FEATURE_TYPES)}; name:type? "
              "for a key that may be missing (stored as a list of 0 or 1 values, e.g. caption:bytes?); repeatable."),
    Flag("multi_label", action="store_true", default=False, group="labels and splits", recorded=True,
         help="image/class/label is a list; a CSV label holds labels split by ';'."),
    Flag("bbox_format", default="xyxy_pixels", choices=BBOX_FORMATS, group="inputs", recorded=True,
         help="How JSON Lines objects give their boxes."),
    Flag("image_root", group="inputs", recorded=True,
         help="Folder a COCO .json input's file_names are relative to (default: the .json's own "
              "folder; a build none of whose first images is there stops naming this flag)."),
    Flag("label_offset", type=int, choices=(0, 1), group="labels and splits", recorded=True,
         help="The id of the first numbered object class (default 1, as the "
              "Object Detection API numbers them; 0 writes no label_map.pbtxt)."),
    Flag("coco_ids", default="keep", choices=COCO_IDS, group="labels and splits", recorded=True,
         help="keep: a COCO file's category ids are the object class ids; "
              "renumber: number its classes by sorted name."),
    Flag("boxes_outside", default="skip", choices=BOX_POLICIES, group="inputs", recorded=True,
         help="A box not inside its image: skip it (as the Object Detection "
              "API's create_coco_tf_record does) or clip it; counted either way."),
    Flag("append", action="store_true", default=False, group="output",
         help="Add these inputs to the set published in --output_dir: its shards are kept, images it holds are "
              "duplicate_image dead letters, new classes get the next indexes (tfrecord-shards append)."),
    Flag("fresh", action="store_true", default=False, group="output",
         help="Start over: remove the work an interrupted or failed build left in --output_dir/.staging (else a "
              "build with the same flags resumes it). A publish whose journal was written is finished first."),
    # Where, not what: not recorded (outputs do not depend on it).
    Flag("staging_dir", type=v.folder_path, group="output",
         help="Write the run files (each record staged once, about the size of the records, with their done lists "
              "for a resumed build) under this folder (local, gs:// or s3://) instead of --output_dir/.staging, "
              "e.g. a local SSD while the output is a NAS or a bucket; the shards are still staged in --output_dir "
              "and published by renames. Each run writes only its own folder there and removes it once it "
              "published; a rerun with the same flags resumes from it."),
    Flag("image_column", default=PARQUET_COLUMNS[0], group="inputs", recorded=True,
         help="Parquet inputs: the column of image bytes (or of {bytes, path} structs)."),
    Flag("label_column", default=PARQUET_COLUMNS[1], group="inputs", recorded=True,
         help="Parquet inputs: the column of class indices or class names."),
    # Recorded by the build only when on (off, the default, leaves the manifest as before the check).
    Flag("near_duplicates", default=DEFAULT_NEAR_DUPLICATES, choices=NEAR_DUPLICATE_MODES, group="checks",
         help="Look for the same photo in two splits (resized, re-saved) by a perceptual hash of each image's "
              "pixels: report the pairs in near_duplicates.jsonl and the summary (report), or also reject the copy "
              "in the split that ranks later as a cross_split_near_duplicate dead letter. A build whose images all "
              "go to one split hashes nothing; otherwise it decodes every image (JPEG at 1/2-1/8 scale): about 10 "
              "CPU s per GB of JPEGs, on top of a build's 6 (BENCHMARKS.md): off (the default) skips it, and a "
              "build of two splits or more says so in its summary."),
    Flag("near_duplicate_distance", type=v.non_negative_int, default=DEFAULT_NEAR_DUPLICATE_DISTANCE,
         group="checks",
         help="The most bits (of 64) two images' perceptual hashes may differ in to "
              f"be near-duplicates (0-{MAX_NEAR_DUPLICATE_DISTANCE})."),
))

PLAN_FLAGS = FlagSet("PlanOptions", (
    Flag("plan_json", group="output",
         help="Also write the plan as JSON to this path (not inside --output_dir or an --input folder)."),
    Flag("rate_mb_s", type=v.positive_float, group="output",
         help="Build speed, in MiB of input per second after the start-up every build pays (about 4 s), for the "
              "run-time estimate (default: the build's measured rate and cost per input on 2 cores, one process, "
              "default image flags; BENCHMARKS.md, 'Plan before running')."),
))

RESHARD_FLAGS = FlagSet("ReshardOptions", (
    Flag("input_compression", default="auto", choices=READ_COMPRESSIONS, group="inputs", recorded=True,
         help="Compression of the inputs; auto goes by suffix (.gz, .zz)."),
    Flag("skip_corrupt", action="store_true", default=False, group="failures", recorded=True,
         help="Write damaged input stretches to dead_letters.jsonl and go on, instead of failing."),
))

VERIFY_FLAGS = FlagSet("VerifyOptions", (
    Flag("files", group="inputs",
         help="Check the TFRecord files matching this pattern, without a manifest."),
    Flag("decode_images", action="store_true", default=False, group="checks",
         help="Decode every image and compare it with its record's size fields."),
    Flag("decode_with", group="checks",
         help=f"Decode every image with these decoders, separated by commas, among {', '.join(DECODERS)}; report "
              "each that refuses an image or decodes it to another size than image/height and image/width."),
    Flag("report", group="output", help="Write the problems as JSON to this path."),
    Flag("preview", group="output", help="Write a PNG contact sheet of sample images and shard sizes here."),
))


# The shared flags of the jobs that publish a shard set (build, plan, reshard): all of them.
PUBLISHING = tuple(flag.name for flag in SHARED.flags)

BUILD = Job(
    name="build_shards",
    summary="Build balanced, shuffled TFRecord shards from images and labels (see README.md).",
    options=(SHARD_FORMAT, BUILD_FLAGS), shared=PUBLISHING, shared_set=SHARED, run_flags=(RUN,),
    epilog="examples:\n"
           "  tfrecord-shards build --input data/flowers --output_dir out/flowers\n"
           "  tfrecord-shards build --input labels.csv --output_dir out/x --split_fractions "
           "train=0.9,validation=0.1")

PLAN = Job(
    name="plan_build",
    summary="Plan a build: what it would find, reject and write, and for how long; writes nothing "
            "(see docs/next-day.md).",
    options=(SHARD_FORMAT, BUILD_FLAGS, PLAN_FLAGS), shared=PUBLISHING, shared_set=SHARED, run_flags=(RUN,),
    epilog="examples:\n"
           "  tfrecord-shards plan --input data/flowers --output_dir out/flowers\n"
           "  tfrecord-shards plan --input labels.csv --output_dir out/x --split_fractions "
           "train=0.9,validation=0.1 --plan_json plan.json")

RESHARD = Job(
    name="reshard",
    summary="Regenerate any set of TFRecord (or ArrayRecord) files as balanced shards, record for record.",
    options=(SHARD_FORMAT, RESHARD_FLAGS, RECORD_READING), shared=PUBLISHING, shared_set=SHARED, run_flags=(RUN,),
    epilog="example:\n  tfrecord-shards reshard --input 'old/train-*' --output_dir new/ --split train")

VERIFY = Job(
    name="verify_shards",
    summary="Check a shard set against its manifest (--output_dir), or any TFRecord files (--files).",
    options=(VERIFY_FLAGS, RECORD_READING), shared=("output_dir",), shared_set=SHARED, run_flags=(RUN,),
    regroup={"output_dir": "inputs"},
    epilog="examples:\n"
           "  tfrecord-shards verify --output_dir out/flowers --decode_images\n"
           "  tfrecord-shards verify --files 'somewhere/*.tfrecord.gz'")

INSPECT = Job(
    name="inspect_shard", beam=False, usage="%(prog)s SHARD [flags]",
    summary="Print the records of a TFRecord (or ArrayRecord) file as text.",
    options=(FlagSet("InspectFlags", (
        Flag("shard", positional=True, group="inputs", help="TFRecord file: a local path, gs:// or s3://."),
        Flag("limit", type=v.positive_int, default=10, group="output", help="Records to print."),
        Flag("offset", type=v.non_negative_int, default=0, group="inputs",
             help="Start at the first record that starts at or after this byte (an ArrayRecord "
                  "file: at this record number)."),
        Flag("compression", default="auto", choices=READ_COMPRESSIONS, group="inputs",
             help="auto (by suffix: .gz gzip, .zz/.deflate zlib), none, gzip or zlib."),
        _MAX_RECORD_MB,
    )),),
    epilog="example:\n  tfrecord-shards inspect out/flowers/train-00000-of-00004.tfrecord --limit 2")

SAMPLE = Job(
    name="make_sample_data", beam=False,
    summary="Writes a deterministic sample dataset of procedural images in class folders.",
    options=(FlagSet("SampleFlags", (
        Flag("output", required=True, group="output", help="Folder to create."),
        Flag("size_mb", type=v.finite_positive_float, default=24.0, group="output",
             help="Approximate total size in MiB."),
        Flag("classes", default="daisy,rose,tulip", group="inputs",
             help=f"Comma-separated class names (styled: {', '.join(SAMPLE_CLASSES)})."),
        Flag("seed", type=int, default=0, group="inputs", help="Seed of the generated images."),
        Flag("broken", type=v.non_negative_int, default=0, group="inputs",
             help="Damaged files to add (a truncated JPEG, a text file named .jpg)."),
    )),),
    epilog="example:\n  tfrecord-shards sample --output data/sample --size_mb 24 --broken 2")

# command -> its job (append is the build with --append).
JOBS = {"build": BUILD, "append": BUILD, "plan": PLAN, "verify": VERIFY, "reshard": RESHARD,
        "inspect": INSPECT, "sample": SAMPLE}
