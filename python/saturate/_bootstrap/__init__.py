"""The auto-instrumentation bootstrap (docs/auto.md): sitecustomize.py and
saturate_autotrace.py, standard library only. saturate's command writes both
into RUN/.auto and puts that folder first on the job's PYTHONPATH; the
Python package uses saturate_autotrace through ``saturate.auto``."""
