"""``python -m saturate ARGS`` runs the bundled ``saturate`` command-line tool."""

import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "saturate")
    if not os.path.exists(exe):
        sys.exit(f"saturate: the command-line tool is not bundled here ({exe})")
    os.execv(exe, [exe, *sys.argv[1:]])  # argv, never a shell string


if __name__ == "__main__":
    main()
