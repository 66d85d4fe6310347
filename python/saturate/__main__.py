"""``python -m saturate ARGS`` runs the bundled ``saturate`` command-line tool.

``saturate pack`` of Parquet files (``saturate pack [parquet] train-*.parquet OUT``) runs here
instead, in Python: pyarrow reads them (saturate._parquet), the engine packs.
"""

import os
import sys


def _is_parquet_pack(args) -> bool:
    if len(args) < 2 or args[0] != "pack":
        return False
    if args[1] == "parquet":
        return True
    inputs = [a for a in args[1:] if not a.startswith("-")][:-1]  # SOURCE... OUT
    return bool(inputs) and any(a.lower().endswith((".parquet", ".parq")) for a in inputs)


def main() -> None:
    args = sys.argv[1:]
    if _is_parquet_pack(args):
        from ._parquet import main as pack_parquet

        sys.exit(pack_parquet(args[1:]))
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "saturate")
    if not os.path.exists(exe):
        sys.exit(f"saturate: the command-line tool is not bundled here ({exe})")
    os.execv(exe, [exe, *sys.argv[1:]])  # argv, never a shell string


if __name__ == "__main__":
    main()
