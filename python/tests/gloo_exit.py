"""Ending one rank of a Gloo test job without interpreter finalization.

A Gloo process group can outlive destroy_process_group() (a device mesh holds it; Accelerate's
state too), so only the interpreter's final garbage collection frees it. A Gloo worker thread that drops its last
collective at that moment (tensors with Python references) cannot take the GIL, and torch aborts
with "terminate called without an active exception" (docs/checkpoint.md; a core dump's stacks
were all torch's). leave() first does what finalization would have done that matters here, then
ends the process: the Python exit handlers (saturate's auto-instrumentation writes its `exit`
record there) and the trace's last write (a C exit handler otherwise).
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
