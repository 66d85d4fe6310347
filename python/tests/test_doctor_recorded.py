"""Doctor on runs recorded on a GPU (tests/recorded/): each run directory of the
diagnosis suite's GPU scenarios, as `saturate doctor` recorded it on an H200, is
analysed again with `saturate report`. The top finding must name the cause the
scenario planted (bench/diagnosis/gpu_scenarios.py), and the healthy loop must
have no finding above 5% of the run: the suite's own test, without a GPU."""

import glob
import json
import os
import subprocess
import tarfile

import pytest
from conftest import REPO, load_module, saturate_cmd

RECORDED = os.path.join(REPO, "tests", "recorded")


suite = load_module("diagnosis_suite", os.path.join(REPO, "bench", "diagnosis", "run.py"))
EXPECT = {s.name: s.expect for s in suite.gpu_scenarios.GPU_SCENARIOS}
RUNS = sorted(glob.glob(os.path.join(RECORDED, "*", "*.tar.xz")))


def test_every_recorded_run_is_a_known_scenario():
    assert RUNS, f"no recorded runs in {RECORDED}"
    names = {os.path.basename(p)[: -len(".tar.xz")] for p in RUNS}
    assert names <= set(EXPECT), names - set(EXPECT)


@pytest.mark.parametrize("archive", RUNS, ids=lambda p: os.path.relpath(p, RECORDED))
def test_top_finding_names_the_planted_cause(tmp_path, archive):
    name = os.path.basename(archive)[: -len(".tar.xz")]
    run = tmp_path / name
    with tarfile.open(archive) as t:
        t.extractall(run, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    r = subprocess.run([*saturate_cmd(), "report", str(run)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(run / "findings.json") as f:
        found = suite.ranked(json.load(f))
    summary = [(x["cause"], round(x["time_lost_pct"], 1)) for x in found]
    if EXPECT[name]:
        assert found and found[0]["cause"] in EXPECT[name], (name, summary, r.stdout)
    else:
        assert all(x["time_lost_pct"] <= suite.HEALTHY_MAX_PCT for x in found), (summary, r.stdout)
