"""``python -m bench <name> [args]``: run ``bench/<name>.py``'s ``main(argv)``.

With no name, run every benchmark module in turn with no arguments.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]))


def run(name: str, argv: list[str]) -> int:
    module = importlib.import_module(f"bench.{name}")
    result = module.main(argv)
    return int(result or 0)


def main(argv: list[str]) -> int:
    names = available()
    if not argv:
        return max((run(name, []) for name in names), default=0)
    if argv[0] in ("-h", "--help") or argv[0] not in names:
        print(f"usage: python -m bench <name> [args]; names: {', '.join(names)}", file=sys.stderr)
        return 0 if argv[0] in ("-h", "--help") else 2
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
