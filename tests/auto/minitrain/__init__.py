"""A tiny training package launched as `python -m minitrain` (tests/auto).

Knows nothing about saturate: it checks that a job started with `-m` is
recorded like one started from a file.
"""
