"""``toolformer inspect`` and ``export``: a run folder read back, and its built data set for other trainers."""

from __future__ import annotations

from toolformer.cli.common import load_pipeline
from toolformer.stages import run_stage


def cmd_inspect(args) -> int:
    """Reads any run folder; writes only RUN_DIR/inspect (so it takes no lock)."""
    cfg = load_pipeline(args)
    if args.run_dir:
        cfg.run_dir = args.run_dir
    run_stage("inspect", cfg, force=args.force, tool=args.tool, kept=args.kept,
              min_margin=args.min_margin, max_margin=args.max_margin)
    return 0


def cmd_export(args) -> int:
    """Reads RUN_DIR/build (trl-dpo: RUN_DIR/filter and sample); writes only its own output file or folder,
    atomically (so it takes no lock, like inspect)."""
    from toolformer.inspect.export import export_run
    from toolformer.inspect.trl import FORMATS as TRL_FORMATS
    from toolformer.inspect.trl import export_trl

    cfg = load_pipeline(args)
    cfg.run_dir = args.run_dir
    if args.format in TRL_FORMATS:
        if args.force:
            raise ValueError(f"--force: a {args.format} export replaces only a folder an earlier export wrote, "
                             "never other files; leave the option out")
        export_trl(cfg, args.format, args.out, args.kept_only)
    else:
        export_run(cfg, args.format, args.out, args.kept_only, args.force)
    return 0
