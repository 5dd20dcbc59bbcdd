"""``python -m mpi_teleport.checkpoint newest|show DIR``: inspect checkpoints."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .find import any_checkpoint
from .store import DamagedCheckpointError


def main(argv=None) -> int:
    from ..parsers import OneLineParser, add_version

    parser = OneLineParser(
        prog="python -m mpi_teleport.checkpoint",
        description="Inspect checkpoints. newest: print the newest complete checkpoint "
                    "under DIR (a run, checkpoint or round-* directory); exit 1 if there is "
                    "none (for job scripts). show: print its manifest (records omitted).")
    add_version(parser)
    parser.add_argument("command", choices=("newest", "show"))
    parser.add_argument("dir")
    args = parser.parse_args(argv)
    try:
        found = any_checkpoint(Path(args.dir))
    except DamagedCheckpointError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if found is None:
        print(f"no complete checkpoint under {args.dir}", file=sys.stderr)
        return 1
    if args.command == "newest":
        print(found[0])
    else:
        manifest = dict(found[1])
        if isinstance(manifest.get("recorder"), dict):
            manifest["recorder"] = {k: v for k, v in manifest["recorder"].items() if k != "records"}
        print(json.dumps({"path": str(found[0]), **manifest}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
