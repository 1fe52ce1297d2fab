"""The lines a build's summary has beside every shard set's (no Beam).

``build_lines`` gives them from the published manifest (how images were stored, boxes and object
classes, near-duplicates); ``shardset.summary.published_summary`` prints the rest.
"""

from __future__ import annotations

from typing import Any, Mapping

from transforms.images.annotations import LABEL_MAP_NAME, object_ids_problem
from transforms.images.choices import NEAR_DUPLICATE_CPU_S_PER_GB
from transforms.images.orientation import UPRIGHT_HOW
from transforms.images.png_chunks import PNG_CHUNK_FIXES
from transforms.progress.report import plural
from transforms.shardset.manifest import Manifest
from transforms.shardset.naming import join_path
from transforms.shardset.summary import reader_lines

__all__ = ["build_lines", "image_lines", "object_lines", "near_duplicate_lines"]


def build_lines(output_dir: str, manifest: Manifest, near_unchecked: bool = False) -> list[str]:
    """A build's summary lines after its splits' (the class count and manifest line come last), from the
    manifest it published into ``output_dir``; ``near_unchecked``: the build could have looked for
    near-duplicates across splits and did not."""
    lines = image_lines(manifest.images, manifest.options.get("image_mode"),
                        manifest.options.get("exif_orientation") == "keep")
    lines += object_lines(manifest)
    lines += reader_lines(manifest)
    lines += near_duplicate_lines(output_dir, manifest.near_duplicates)
    if near_unchecked and len(manifest.splits) > 1 and not manifest.near_duplicates:
        lines.append(f"  near-duplicates across splits: not looked for (--near_duplicates report looks: "
                     f"about {NEAR_DUPLICATE_CPU_S_PER_GB} CPU s more per GB of JPEGs)")
    return lines


def image_lines(images, mode: str | None, orientation_feature: bool = False) -> list[str]:
    """Summary lines of a build's ``images`` counts: conversions, fixed PNG chunks, EXIF orientation,
    undecodable records."""
    def listed(counts) -> str:
        return ", ".join(f"{fmt} {n}" for fmt, n in sorted(counts.items()))
    lines = []
    if mode == "tf" and images.get("converted"):
        lines.append(f"  converted to PNG for TensorFlow: {plural(sum(images['converted'].values()), 'record')} "
                     f"({listed(images['converted'])})")
    if images.get("png_chunks_fixed"):
        fixed = images["png_chunks_fixed"]
        lines.append(f"  PNG chunks fixed for TensorFlow: {plural(sum(fixed.values()), 'record')} ("
                     + "; ".join(f"{PNG_CHUNK_FIXES.get(fix, fix)}: {n}" for fix, n in sorted(fixed.items()))
                     + ")")
    if images.get("exif_oriented"):
        turned = images["exif_oriented"]
        lines.append(f"  turned upright for their EXIF orientation: {plural(sum(turned.values()), 'record')} ("
                     + "; ".join(f"{UPRIGHT_HOW.get(how, how)}: {n}" for how, n in sorted(turned.items())) + ")")
    if images.get("exif_orientation_kept"):
        kept = images["exif_orientation_kept"]
        where = ("image/orientation holds it" if orientation_feature
                 else "--image_mode tf turns them upright")
        lines.append(f"  stored as the file holds them, not upright: {plural(sum(kept.values()), 'record')} with an "
                     f"EXIF orientation (orientation {listed(kept)}); {where}")
    if images.get("tf_undecodable"):
        lines.append(f"  TensorFlow cannot decode {plural(sum(images['tf_undecodable'].values()), 'record')} "
                     f"as recorded ({listed(images['tf_undecodable'])}); --image_mode tf converts them")
    return lines


def object_lines(manifest: Manifest) -> list[str]:
    """Summary lines on what detectors get: boxes not inside their image, object classes."""
    lines = []
    boxes = manifest.images.get("boxes", {})
    if boxes:
        done = ", ".join(f"{boxes[kind]} {kind}" for kind in ("clipped", "skipped") if boxes.get(kind))
        lines.append(f"  boxes not inside their image: {plural(sum(boxes.values()), 'box')}, {done} "
                     f"(--boxes_outside {manifest.options.get('boxes_outside') or 'skip'})")
    if manifest.object_labels:
        ids = [class_id for class_id, _ in manifest.object_labels]
        problem = object_ids_problem(manifest.object_labels)
        lines.append(f"  object classes: {len(ids)}, ids {min(ids)}-{max(ids)}; "
                     + (f"no {LABEL_MAP_NAME}: {problem}" if problem else LABEL_MAP_NAME))
    return lines


def near_duplicate_lines(output_dir: str, near: Mapping[str, Any]) -> list[str]:
    """Summary lines of a build's near-duplicate check: the pairs found, what was done, what was not compared."""
    if not near:
        return []
    done = ("the copy in the split that ranks later dead-lettered (cross_split_near_duplicate)"
            if near.get("mode") == "reject" else "--near_duplicates reject dead-letters the later copy")
    between = ", ".join(f"{each['kept']} keeps, {each['later']} has the later copy: {each['pairs']}"
                        for each in near.get("split_pairs") or ())
    lines = [f"  near-duplicates across splits (perceptual hash within {near.get('distance')} bits): "
             f"{plural(near['pairs'], 'pair')} in {join_path(output_dir, near['file'])}"
             + (f" ({between})" if between else "") + (f"; {done}" if near["pairs"] else "")]
    if near.get("buckets_over_cap"):
        lines.append(f"  near-duplicates: {plural(near['buckets_over_cap'], 'bucket')} of hashes held more "
                     f"images than are compared; {near.get('images_not_compared_in_a_bucket')} images were "
                     "not compared there (pairs found only there are missed; a lower "
                     "--near_duplicate_distance makes buckets smaller)")
    if near.get("images_not_hashed"):
        lines.append(f"  near-duplicates: {plural(near['images_not_hashed'], 'image')} whose pixels do not "
                     "decode were not compared")
    return lines
