# saturate auto-instrumentation: the start-up hook (docs/auto.md).
#
# saturate watch/doctor/tune/run-instrumented put the folder holding this file
# first on PYTHONPATH, so Python imports it at start-up, before user code. It
# runs the sitecustomize it shadows (if any), then installs
# saturate_autotrace, which records training steps, data waits, host syncs,
# copies, saves and collectives into $SATURATE_RUN_DIR. It never edits user
# files, never prints, and any failure leaves the job as it would run without
# saturate.
import os as _os
import sys as _sys


def _saturate_chain_sitecustomize():
    """Runs the sitecustomize module this one hides, as Python would have.
    Other copies of this bootstrap on the path (nested saturate commands) are
    skipped, so the user's own runs once and the chain cannot loop."""
    import importlib.machinery
    import importlib.util

    def is_bootstrap(entry):
        return _os.path.exists(_os.path.join(entry or _os.curdir, "saturate_autotrace.py"))

    path = [p for p in _sys.path if not is_bootstrap(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    _sys.modules["sitecustomize"] = module  # `import sitecustomize` now gives the user's
    spec.loader.exec_module(module)


def _saturate_install():
    try:
        import saturate_autotrace

        saturate_autotrace.install_from_env()
    except Exception:  # a broken copy or an odd interpreter must not break the job
        pass


try:
    _saturate_chain_sitecustomize()
finally:
    _saturate_install()
