"""Flags shared by the jobs.

Beam parses every direct subclass of ``PipelineOptions`` with one argparse
parser, so two jobs cannot each define ``--input``: the flags they share live
here, once, and each job's own options class adds only its own flags.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from transforms import options as opt
from transforms.shard_writer import COMPRESSIONS

__all__ = ["ShardingOptions"]


class ShardingOptions(PipelineOptions):
    """Inputs, output folder and shard layout, common to build, reshard and verify."""

    @classmethod
    def _add_argparse_args(cls, parser):
        opt.one_line_errors(parser)
        parser.add_argument("--input", action="append", default=None,
                            help="build: folder of class (or split) folders, or a .csv/.jsonl input "
                                 "manifest; reshard: TFRecord files or a pattern. Local, gs:// or "
                                 "s3://. Repeatable.")
        parser.add_argument("--output_dir", type=opt.folder_path, default=None,
                            help="Folder of the shard set (no *, ? or [ in its path).")
        parser.add_argument("--split", default="train",
                            help="Split name of unsplit inputs (build) or of the output (reshard).")
        parser.add_argument("--shard_size_mb", type=opt.positive_float, default=150.0,
                            help="Target shard size in MiB; shards land within [2/3, 4/3] of it.")
        parser.add_argument("--num_shards", type=opt.positive_int, default=None,
                            help="Fixed number of shards per split (overrides --shard_size_mb).")
        parser.add_argument("--compression", default="none", choices=COMPRESSIONS,
                            help="Compression of the shards written.")
        parser.add_argument("--seed", type=int, default=0, help="Shuffle seed.")
