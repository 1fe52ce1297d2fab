"""The names a build's image flags choose among, and their defaults (pure, imports nothing).

Their home is here, apart from the modules that act on them (``codec``,
``records``, ``inputs``, ``orientation``), so that a command's ``--help`` and
its usage errors need no image library.
"""

from __future__ import annotations

__all__ = ["LAYOUTS", "COCO_IDS", "IMAGE_MODES", "RESIZE_MODES", "VALIDATE_LEVELS", "EXIF_ORIENTATION_MODES",
           "DEFAULT_MAX_IMAGE_BYTES", "NEAR_DUPLICATE_MODES", "DEFAULT_NEAR_DUPLICATE_DISTANCE",
           "MAX_NEAR_DUPLICATE_DISTANCE"]

# --layout: class folders, split folders, or told apart by what the folder holds.
LAYOUTS = ("auto", "classes", "splits")
# --coco_ids: keep a COCO file's category ids, or renumber its classes by sorted name.
COCO_IDS = ("keep", "renumber")
# --image_mode: what a record holds of its image.
IMAGE_MODES = ("tf", "passthrough", "reencode", "raw")
# --resize_mode: how an image meets --resize.
RESIZE_MODES = ("stretch", "fit", "crop")
# Levels of --validate, from cheapest to most costly (see codec.read_image_info).
VALIDATE_LEVELS = ("header", "structure", "decode", "full")
# --exif_orientation: turn images upright, or keep them as stored and record the orientation.
EXIF_ORIENTATION_MODES = ("apply", "keep")
# --max_image_mb default: the largest input file read.
DEFAULT_MAX_IMAGE_BYTES = 256 * (1 << 20)
# --near_duplicates: off (the default), pairs across splits reported, or the later copy also rejected.
# Off by default: hashing decodes every image, about 10 CPU s per GB of JPEGs where a build costs 6
# (BENCHMARKS.md "Near-duplicates: what the default costs"); a build of two splits or more says so.
NEAR_DUPLICATE_MODES = ("off", "report", "reject")
DEFAULT_NEAR_DUPLICATES = "off"
NEAR_DUPLICATE_CPU_S_PER_GB = 10
# --near_duplicate_distance: bits of 64 (BENCHMARKS.md, "Near-duplicates across splits"), and its
# largest value: beyond, bands of 2 bits or less put every hash in a handful of buckets.
DEFAULT_NEAR_DUPLICATE_DISTANCE = 6
MAX_NEAR_DUPLICATE_DISTANCE = 31
