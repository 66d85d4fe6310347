"""Ending one rank of a Gloo test job without interpreter finalization.

A Gloo worker thread that drops the last reference to a collective that just finished needs
the GIL (the collective's saved thread-local state holds Python objects). If the main thread
reaches finalization first, Python ends that thread with a forced unwind through a noexcept
destructor and torch aborts the rank: "terminate called without an active exception"
(docs/checkpoint.md; the core dumps' stacks were all torch's). leave() first does what
finalization would have done that matters here, then ends the process: the Python exit
handlers (saturate's auto-instrumentation writes its `exit` record there) and the trace's last
write (a C exit handler otherwise).
"""

import atexit
import os
import sys


def leave(code: int = 0) -> None:
    atexit._run_exitfuncs()
    import saturate

    saturate.trace.stop()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
