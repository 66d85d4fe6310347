"""Errors: one exception type per engine status, with the engine's message; Ctrl-C."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import saturate
from saturate import transforms as T

from conftest import HERE, epoch_samples_and_stats


def test_missing_dataset_names_the_path(tmp_path):
    missing = str(tmp_path / "nope.sat")
    with pytest.raises(FileNotFoundError, match="nope.sat") as info:
        saturate.Loader(missing, 4)
    assert isinstance(info.value, saturate.Error) and info.value.code == "not_found"


def test_bad_options_name_the_option(photos):
    with pytest.raises(ValueError, match="option 'crop'"):
        saturate.Loader(photos, 4, transforms={"image": "crop=sideways"})
    with pytest.raises(ValueError, match="threads"):
        saturate.Loader(photos, 4, threads=0)
    with pytest.raises(ValueError, match="framework"):
        saturate.Loader(photos, 4, framework="tensorflow")
    with pytest.raises(ValueError, match="batch_size"):
        saturate.Loader(photos, 0)
    with pytest.raises(saturate.Error, match="nosuchfield"):
        saturate.Loader(photos, 4, transforms={"nosuchfield": [T.ToDtype("float32")]})
    with pytest.raises(TypeError, match="transforms"):
        saturate.Loader(photos, 4, transforms={"image": 42})


def corrupt_copy(dataset, dest):
    """A copy of `dataset` with one byte flipped in the middle of its first shard."""
    os.makedirs(dest)
    for name in os.listdir(dataset):
        data = bytearray(open(os.path.join(dataset, name), "rb").read())
        if name.endswith(".srec"):
            data[len(data) // 2] ^= 0xFF
        open(os.path.join(dest, name), "wb").write(bytes(data))
    return dest


def test_corrupt_record_raises_with_context_or_is_skipped(photos, tmp_path):
    bad = corrupt_copy(photos, str(tmp_path / "bad.sat"))
    with pytest.raises(saturate.errors.CorruptionError, match=r"record \d+") as info:
        for _ in saturate.Loader(bad, 4, shuffle=False, transforms={"image": [T.CenterCrop(16)]}):
            pass
    assert "bad.sat" in str(info.value)
    loader = saturate.Loader(bad, 4, shuffle=False, skip_bad=True,
                             transforms={"image": [T.CenterCrop(16)]})
    n, stats = epoch_samples_and_stats(loader)
    # One bad record: skipped in epoch 0, and again if the workers have read that far ahead.
    assert n == 35 and 1 <= stats["skipped"] <= 2


def hang_report(proc):
    """Native stacks of a hung child's threads (gdb, when installed) and its Python
    stacks (faulthandler, registered on SIGUSR1 by the child); kills the child."""
    report = ""
    if shutil.which("gdb"):
        report = subprocess.run(["gdb", "-p", str(proc.pid), "-batch", "-ex", "thread apply all bt 25"],
                                capture_output=True, text=True, timeout=120).stdout
    proc.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    proc.kill()
    _, err = proc.communicate()
    return report + "\n" + err


def test_ctrl_c_during_iteration_stops_promptly(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(f"""
import faulthandler, signal, sys; sys.path.insert(0, {HERE!r})
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's hang report
# A runner started in the background without job control (`cmd &` in a
# script) passes SIGINT down ignored, and Python keeps it ignored: as in a
# terminal, Ctrl-C must raise KeyboardInterrupt here.
signal.signal(signal.SIGINT, signal.default_int_handler)
from conftest import make_photo_folder
import saturate
make_photo_folder({str(tmp_path / 'f')!r}, per_class=40, classes=1)
saturate.pack({str(tmp_path / 'f')!r}, {str(tmp_path / 'd.sat')!r})
# One thread and big outputs: the main thread spends its time blocked in the engine.
loader = saturate.Loader({str(tmp_path / 'd.sat')!r}, 40, threads=1, prefetch=1,
                         transforms={{"image": "crop=random,size=1024"}})
print("started", flush=True)
for epoch in range(1000):
    for batch in loader:
        pass
""")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.stdout.readline().strip() == "started"
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("no exit 30 s after SIGINT; the child's stacks:\n" + hang_report(proc))
    assert time.monotonic() - sent < 5
    assert "KeyboardInterrupt" in err
    # Python exits by SIGINT after an uncaught KeyboardInterrupt: not a crash, not a hang.
    assert proc.returncode == -signal.SIGINT
