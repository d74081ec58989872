"""The ccompress-info command: prints :func:`ccompress.build_info` as JSON."""
from __future__ import annotations

import json
import sys
from typing import Any

from .._internal.build_info import build_info

__all__ = ["build_info", "main"]


def main(argv: Any = None) -> int:
    """ccompress-info: prints build_info() as JSON."""
    print(json.dumps(build_info(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
