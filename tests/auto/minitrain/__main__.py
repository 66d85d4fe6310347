"""python -m minitrain [--steps N] [--batch-size B] [--workers W]"""

from .train import main

if __name__ == "__main__":
    main()
