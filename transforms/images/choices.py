"""The names a build's image flags choose among, and their defaults (pure, imports nothing).

Their home is here, apart from the modules that act on them (``codec``,
``records``, ``inputs``, ``orientation``), so that a command's ``--help`` and
its usage errors need no image library.
"""

from __future__ import annotations

__all__ = ["LAYOUTS", "COCO_IDS", "IMAGE_MODES", "RESIZE_MODES", "VALIDATE_LEVELS", "EXIF_ORIENTATION_MODES",
           "DEFAULT_MAX_IMAGE_BYTES"]

# --layout: class folders, split folders, or told apart by what the folder holds.
LAYOUTS = ("auto", "classes", "splits")
# --coco_ids: keep a COCO file's category ids, or renumber its classes by sorted name.
COCO_IDS = ("keep", "renumber")
# --image_mode: what a record holds of its image.
IMAGE_MODES = ("tf", "passthrough", "reencode", "raw")
# --resize_mode: how an image meets --resize.
RESIZE_MODES = ("stretch", "fit", "crop")
# Levels of --validate, from cheapest to most costly (see codec.inspect_image).
VALIDATE_LEVELS = ("header", "structure", "decode", "full")
# --exif_orientation: turn images upright, or keep them as stored and record the orientation.
EXIF_ORIENTATION_MODES = ("apply", "keep")
# --max_image_mb default: the largest input file read.
DEFAULT_MAX_IMAGE_BYTES = 256 * (1 << 20)
