"""Unmodified PyTorch jobs (issue 20): the scripts in tests/auto know nothing
about saturate; the bootstrap (python/saturate/_bootstrap, first on
PYTHONPATH, with SATURATE_RUN_DIR set) records what they spend their steps on,
and `saturate doctor` explains them.

Three layers:
- recording: run a script with the bootstrap by hand and read the
  spans-<pid>-auto.jsonl files (steps, data waits, worker fetches, host syncs
  and their sites, saves, collectives; the job itself unchanged);
- doctor: `saturate doctor -- python tests/auto/X.py` (which injects the
  bootstrap itself) must name each script's problem, with the call site;
- distributed and `python -m` launches, and the fix doctor names, applied.

Multi-rank runs need torchrun from a torch >= 2 environment: $SATURATE_TORCH2_PYTHON
(scripts/test.sh sets it; default REPO/.venv-torch2/bin/python, made by
scripts/torch2-env.sh). These tests run real CPU work: they assert causes,
sites and directions, not exact numbers.
"""

import glob
import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import free_port, saturate_cmd, scrape_watch_until, torch2_python, torchrun

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
AUTO = os.path.join(REPO, "tests", "auto")
BOOTSTRAP = os.path.join(REPO, "python", "saturate", "_bootstrap")
BAD_CAUSES = {"input_pipeline", "host_sync", "checkpoint_stall", "io_bound"}


def script(name):
    return os.path.join(AUTO, name)


def marker_line(name, marker):
    """The line number of the one line of tests/auto/NAME that holds MARKER."""
    with open(script(name)) as f:
        lines = [i for i, text in enumerate(f, 1) if marker in text]
    assert len(lines) == 1, (name, marker, lines)
    return lines[0]


def clean_env(**extra):
    """This environment without saturate's own variables (pytest may itself run
    under saturate watch), plus EXTRA."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SATURATE_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def run_job(args, run_dir=None, python=None, pythonpath=(), cwd=None, timeout=120, text=True,
            **env_extra):
    """Runs `python ARGS`; with RUN_DIR, with the bootstrap first on PYTHONPATH
    and SATURATE_RUN_DIR=RUN_DIR, as saturate watch/doctor do."""
    env = clean_env(**env_extra)
    path = list(pythonpath)
    if run_dir is not None:
        path.insert(0, BOOTSTRAP)
        env["SATURATE_RUN_DIR"] = str(run_dir)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    return subprocess.run([python or sys.executable, *args], env=env, cwd=cwd, timeout=timeout,
                          capture_output=True, text=text)


def ok(r):
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def load_run(run_dir):
    """{pid: {"meta", "spans", "steps", "counters"}} from every spans-*-auto.jsonl
    under RUN_DIR (rank subdirectories included)."""
    procs = {}
    files = glob.glob(os.path.join(str(run_dir), "**", "spans-*-auto.jsonl"), recursive=True)
    for path in files:
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
        assert records and records[0]["ph"] == "M", (path, records[:1])
        meta = records[0]
        assert meta["source"] == "auto" and "hooks" in meta["auto"], meta
        p = procs.setdefault(meta["pid"], {"meta": meta, "spans": [], "steps": [], "counters": [],
                                           "path": path})
        for r in records[1:]:
            kind = {"X": "spans", "step": "steps", "C": "counters"}.get(r["ph"])
            if kind:
                p[kind].append(r)
    return procs


def main_process(procs):
    """The process that marked steps (the training process)."""
    stepping = [p for p in procs.values() if p["steps"]]
    assert len(stepping) == 1, {pid: len(p["steps"]) for pid, p in procs.items()}
    return stepping[0]


def spans(proc, name):
    return [s for s in proc["spans"] if s["name"] == name]


def last_counters(proc, name):
    """The latest counters record per (site, op, device) labels (they are cumulative)."""
    latest = {}
    for c in proc["counters"]:
        if c["name"] == name:
            labels = c.get("labels", {})
            latest[(labels.get("site"), labels.get("op"), labels.get("device"))] = c
    return latest


@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory):
    """An ImageFolder of 64 real photos (train/ only), for imagenet_main.py."""
    root = tmp_path_factory.mktemp("auto_photos") / "photos"
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make-photo-dataset"),
                    "--train", "64", "--val", "0", str(root)],
                   check=True, capture_output=True, timeout=300)
    return str(root)


# ---- recording (the bootstrap by hand; no CLI needed) ---------------------------------------


def test_one_step_mark_per_optimizer_update_and_item_sites(tmp_path):
    run = tmp_path / "run"
    ok(run_job([script("item_every_step.py"), "--steps", "40"], run))
    main = main_process(load_run(run))
    assert [s["step"] for s in main["steps"]] == list(range(1, 41))
    for phase in ("backward", "optimizer"):
        assert len(spans(main, phase)) == 40, phase
    # No DataLoader: a forward starts at the previous update, so the first has none.
    assert len(spans(main, "forward")) == 39
    assert not main["meta"]["auto"]["missing"], main["meta"]["auto"]
    assert main["meta"]["auto"]["torch"]

    line = marker_line("item_every_step.py", "HOST_SYNC_LINE")
    syncs = [c for (site, op, _), c in last_counters(main, "host_sync").items()
             if site.endswith(f"item_every_step.py:{line}") and op == ".item()"]
    assert len(syncs) == 1, last_counters(main, "host_sync")
    assert syncs[0]["args"]["count"] == 40
    assert syncs[0]["args"]["total_ns"] >= syncs[0]["args"]["max_ns"] > 0


def test_hooks_go_in_when_a_library_probed_for_torch_first(tmp_path):
    """Libraries ask whether torch is installed with importlib.util.find_spec before they
    import it (Hugging Face's is_torch_available, when a script imports transformers first).
    That probe's spec is never executed; the hooks must go in at the real import."""
    run = tmp_path / "run"
    probe = ("import importlib.util, runpy, sys\n"
             "assert importlib.util.find_spec('torch') and 'torch' not in sys.modules\n"
             f"sys.argv = [{script('item_every_step.py')!r}, '--steps', '10']\n"
             "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    ok(run_job(["-c", probe], run))
    main = main_process(load_run(run))
    assert [s["step"] for s in main["steps"]] == list(range(1, 11))
    hooks = main["meta"]["auto"]["hooks"]
    assert {"optimizer", "backward", "host_sync", "save"} <= set(hooks), main["meta"]["auto"]


@pytest.mark.parametrize("interpreter", ["this", "torch2"])
@pytest.mark.parametrize("precision,bits,autocast_bits,param_bits", [
    ("fp32", 32, 0, 32),  # an autocast(enabled=False) region every step does not count
    ("autocast", 16, 16, 32),  # the forward under autocast, the update outside it
    ("autocast-loop", 16, 16, 32),  # one autocast around the whole loop, entered once
    ("bf16", 16, 0, 16),  # no autocast: the parameters themselves in bfloat16
])
def test_precision_is_recorded_from_autocast_and_the_parameters(tmp_path, interpreter, precision,
                                                                bits, autocast_bits, param_bits):
    # Both autocast classes: torch 1.x's (the suite's first line) and torch 2's.
    import torch

    python = sys.executable
    if interpreter == "torch2":
        if not torch.__version__.startswith("1."):
            pytest.skip("this interpreter's torch is already >= 2")
        if os.environ.get("SATURATE_TORCH2_LINE"):
            pytest.skip("scripts/test.sh's torch 2 line runs the 'this' cases under torch 2")
        python = torch2_python()
    run = tmp_path / "run"
    ok(run_job([script("healthy.py"), "--steps", "6", "--log-every", "100", "--precision",
                precision], run, python=python))
    main = main_process(load_run(run))
    assert not main["meta"]["auto"]["missing"], main["meta"]["auto"]
    assert interpreter == "this" or main["meta"]["auto"]["torch"].startswith("2."), main["meta"]
    records = [c["args"] for c in main["counters"] if c["name"] == "precision"]
    # Written at the first update and when it changes: one record for a steady loop.
    assert len(records) == 1, records
    assert {k: records[0][k] for k in ("precision_bits", "autocast_bits", "param_bits")} == {
        "precision_bits": bits, "autocast_bits": autocast_bits, "param_bits": param_bits}
    assert records[0]["tf32_matmul"] == 0  # torch's default, "highest"
    # The weights, once: healthy.py's three convolutions (NCHW) and its Linear(64, 10).
    shapes = [c["args"] for c in main["counters"] if c["name"] == "model_shapes"]
    assert shapes == [{"conv_weights": 3, "conv_nchw_weights": 3, "matrix_weights": 1,
                       "matrix_unaligned_weights": 1}], shapes


def test_watch_serves_the_precision_the_job_trains_in(tmp_path):
    """`saturate watch --prometheus` around an unmodified loop under torch.autocast:
    saturate_job_precision_bits is 16 for its rank, from the auto-instrumentation's record."""
    port = free_port()
    watch = subprocess.Popen(
        [*saturate_cmd(), "watch", "-q", "--no-gpu", "--prometheus", str(port), "--out",
         str(tmp_path / "run"), "--", sys.executable, script("healthy.py"), "--precision",
         "autocast", "--steps", "100000", "--batch-size", "8", "--log-every", "100000"],
        env=clean_env(PYTHONPATH=os.pathsep.join(sys.path)), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    page = scrape_watch_until(watch, port, lambda page: "saturate_job_precision_bits{" in page)
    series = [line for line in page.splitlines() if line.startswith("saturate_job_precision_bits{")]
    assert len(series) == 1 and 'rank="0"' in series[0], series
    assert series[0].endswith(" 16"), series


def test_inline_loading_records_waits_and_fetches_in_the_training_process(tmp_path):
    run = tmp_path / "run"
    ok(run_job([script("inline_loading.py"), "--workers", "0", "--steps", "8",
                "--image-size", "64"], run))
    procs = load_run(run)
    assert len(procs) == 1, list(procs)
    main = main_process(procs)
    assert len(main["steps"]) == 8
    waits = spans(main, "data_wait")
    assert len(waits) >= 8 and all(w["args"]["loader_id"] == 0 for w in waits)
    fetches = spans(main, "load_batch")  # inline: fetched inside the data waits
    assert len(fetches) == 8 and all(f["args"]["samples"] == 16 for f in fetches)
    loaders = [c for c in main["counters"] if c["name"] == "dataloader"]
    assert len(loaders) == 1
    assert loaders[0]["args"]["num_workers"] == 0 and loaders[0]["args"]["batch_size"] == 16
    assert loaders[0]["labels"]["dataset"] == "SyntheticPhotos"
    assert loaders[0]["labels"]["site"].endswith(
        "inline_loading.py:%d" % marker_line("inline_loading.py", "loader = DataLoader("))


def test_worker_processes_record_their_fetches(tmp_path):
    run = tmp_path / "run"
    ok(run_job([script("inline_loading.py"), "--workers", "2", "--steps", "8",
                "--image-size", "64"], run))
    procs = load_run(run)
    main = main_process(procs)
    assert len(main["steps"]) == 8
    assert len(spans(main, "data_wait")) >= 8
    assert not spans(main, "load_batch")
    workers = [p for pid, p in procs.items() if p is not main]
    assert len(workers) == 2, list(procs)
    for w in workers:
        assert spans(w, "load_batch"), w["path"]
        assert not w["steps"]
    fetched = sum(s["args"]["samples"] for w in workers for s in spans(w, "load_batch"))
    assert fetched >= 8 * 16
    (loader,) = [c for c in main["counters"] if c["name"] == "dataloader"]
    assert loader["args"]["num_workers"] == 2


def test_torch_save_spans_carry_the_call_site(tmp_path):
    run = tmp_path / "run"
    ok(run_job([script("save_every_n.py"), "--steps", "10", "--save-every", "5", "--hidden", "512",
                "--out", str(tmp_path / "ckpt")], run))
    main = main_process(load_run(run))
    saves = spans(main, "checkpoint")
    assert len(saves) == 2, saves
    line = marker_line("save_every_n.py", "SAVE_LINE")
    for s in saves:
        assert s["cat"] == "checkpoint"
        assert s["labels"]["site"].endswith(f"save_every_n.py:{line}"), s
        assert s["labels"]["op"] == "torch.save"
        assert s["args"]["bytes"] == os.path.getsize(tmp_path / "ckpt" / "step000005.pt")


def test_imagenet_style_script(tmp_path, photo_folder):
    run = tmp_path / "run"
    r = ok(run_job([script("imagenet_main.py"), "-a", "tinynet", "-j", "2", "-b", "8",
                    "--image-size", "64", "--epochs", "2", "--max-steps", "10", "-p", "5",
                    "--checkpoint-dir", str(tmp_path / "ckpt"), photo_folder], run))
    assert "=> done: 10 steps" in r.stdout
    procs = load_run(run)
    main = main_process(procs)
    assert len(main["steps"]) == 10
    assert len(spans(main, "data_wait")) >= 10
    workers = [p for p in procs.values() if p is not main]
    assert len(workers) >= 2 and all(spans(w, "load_batch") for w in workers), list(procs)
    (loader,) = [c for c in main["counters"] if c["name"] == "dataloader"]
    assert loader["args"]["num_workers"] == 2 and loader["labels"]["dataset"] == "ImageFolder"

    item_line = marker_line("imagenet_main.py", "losses.update(loss.item()")
    counts = {site: c["args"]["count"] for (site, op, _), c in last_counters(main, "host_sync").items()
              if op == ".item()"}
    assert counts.get(next((s for s in counts if s.endswith(f"imagenet_main.py:{item_line}")),
                           None)) == 10, counts
    save_line = marker_line("imagenet_main.py", "torch.save(state, path)")
    saves = spans(main, "checkpoint")
    assert len(saves) == 2 and all(s["labels"]["site"].endswith(f"imagenet_main.py:{save_line}")
                                   for s in saves), saves


def test_python_dash_m_launch_is_recorded(tmp_path):
    run = tmp_path / "run"
    r = ok(run_job(["-m", "minitrain", "--steps", "12", "--log-every", "4"], run, cwd=AUTO))
    assert "done: 12 steps" in r.stdout
    main = main_process(load_run(run))
    assert len(main["steps"]) == 12
    line = marker_line(os.path.join("minitrain", "train.py"), "LOG_LINE")
    sites = [site for (site, op, _) in last_counters(main, "host_sync") if op == ".item()"]
    assert sites == [f"minitrain{os.sep}train.py:{line}"], sites  # relative to the cwd


def test_explicit_marks_work_beside_the_auto_ones(tmp_path):
    run = tmp_path / "run"
    r = ok(run_job([script("explicit_marks.py"), "--steps", "15"], run))
    assert "done: 15 steps" in r.stdout
    # The recorder marks the first update; from the first saturate.step() on,
    # the process's own marks and phases are the record and it stops its own.
    main = main_process(load_run(run))
    assert len(main["steps"]) == 1
    assert not [s for s in main["spans"] if s["name"] in ("forward", "backward", "optimizer")
                and s["ts_ns"] > main["steps"][0]["ts_ns"]]
    explicit = [p for p in glob.glob(str(run / "spans-*.jsonl")) if not p.endswith("-auto.jsonl")]
    assert len(explicit) == 1, os.listdir(run)
    with open(explicit[0]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    assert sum(1 for x in records if x.get("ph") == "step") == 15
    assert {x.get("name") for x in records if x.get("ph") == "X"} >= {"forward", "backward"}


def test_an_existing_sitecustomize_still_runs(tmp_path):
    user_site = tmp_path / "site"
    user_site.mkdir()
    mark = tmp_path / "sitecustomize-ran"
    (user_site / "sitecustomize.py").write_text(
        "import os\n"
        "MARK = 'user'\n"
        f"open({str(mark)!r}, 'w').write(str(os.getpid()))\n")
    check = tmp_path / "check.py"
    check.write_text(
        "import runpy, sys, sitecustomize\n"
        "print('sitecustomize:', sitecustomize.MARK)\n"
        f"sys.argv = [{script('item_every_step.py')!r}, '--steps', '5']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    run = tmp_path / "run"
    r = ok(run_job([str(check)], run, pythonpath=[str(user_site)]))
    assert "sitecustomize: user" in r.stdout
    assert mark.read_text() == str(main_process(load_run(run))["meta"]["pid"])
    assert len(main_process(load_run(run))["steps"]) == 5


def test_two_bootstrap_copies_on_the_path(tmp_path):
    """Nested saturate commands (run-instrumented around doctor, a tune trial
    under watch) put a second copy of the bootstrap on PYTHONPATH: the job must
    run, print nothing more, record once, and still run the user's sitecustomize."""
    import shutil

    copy = tmp_path / "outer-bootstrap"
    shutil.copytree(BOOTSTRAP, copy, ignore=shutil.ignore_patterns("__pycache__"))
    user_site = tmp_path / "site"
    user_site.mkdir()
    mark = tmp_path / "user-sitecustomize-ran"
    (user_site / "sitecustomize.py").write_text(f"open({str(mark)!r}, 'a').write('ran')\n")
    job = [script("prints_and_exits.py"), "--steps", "4"]
    plain = run_job(job, pythonpath=[str(user_site)], text=False)
    assert mark.read_text() == "ran"
    mark.unlink()
    run = tmp_path / "run"
    nested = run_job(job, run, pythonpath=[str(copy), str(user_site)], text=False)
    assert mark.exists() and mark.read_text() == "ran", "the user's sitecustomize ran once"
    assert (nested.returncode, nested.stdout, nested.stderr) == \
        (plain.returncode, plain.stdout, plain.stderr)
    assert len(main_process(load_run(run))["steps"]) == 4


@pytest.mark.parametrize("args", [
    ["--exit-code", "3"],
    ["--workers", "2", "--signal", "TERM"],
    ["--no-torch", "--exit-code", "1"],
], ids=["exit3", "sigterm_with_workers", "no_torch"])
def test_output_and_exit_status_unchanged(tmp_path, args):
    plain = run_job([script("prints_and_exits.py"), *args], text=False)
    run = tmp_path / "run"
    traced = run_job([script("prints_and_exits.py"), *args], run, text=False)
    assert (traced.returncode, traced.stdout, traced.stderr) == \
        (plain.returncode, plain.stdout, plain.stderr)
    procs = load_run(run)
    if "--signal" in args:
        assert plain.returncode == -signal.SIGTERM
        # Killed by a signal, the training process leaves without writing its
        # buffer (no exit handlers run); the workers wrote every fetch as it ended.
        assert any(spans(p, "load_batch") for p in procs.values()), procs
    elif "--no-torch" in args:
        assert b"no torch: False" in plain.stdout
        assert not procs, "a job that never imports torch records nothing"
    else:
        assert len(main_process(procs)["steps"]) == 8


def test_threads_waiting_for_the_gil_run_before_the_interpreter_finalizes(tmp_path):
    # A Gloo worker thread that gets the GIL only once finalization has begun aborts the
    # rank (docs/auto.md); the exit handler of a job whose Gloo threads are still alive
    # gives such a thread time to run first. Without that wait, OUT is never written.
    import torch

    if int(torch.__version__.split(".")[0]) < 2:
        pytest.skip("torch < 2 does not name its Gloo threads (the wait's condition)")
    out = tmp_path / "out"
    ok(run_job([script("thread_at_exit.py"), str(out)], run_dir=tmp_path / "run"))
    assert out.read_text() == "ran\n"


def test_an_unwritable_run_dir_does_not_break_the_job(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    args = [script("prints_and_exits.py"), "--workers", "2", "--exit-code", "2"]
    plain = run_job(args, text=False)
    broken = run_job(args, blocker / "run", text=False)
    assert (broken.returncode, broken.stdout, broken.stderr) == \
        (plain.returncode, plain.stdout, plain.stderr)
    assert plain.returncode == 2


def test_saturate_auto_install_records_without_the_bootstrap(tmp_path):
    run = tmp_path / "run"
    job = tmp_path / "job.py"
    job.write_text(
        "import runpy, sys\n"
        "import saturate.auto\n"
        "saturate.auto.install(sys.argv[1])\n"
        "assert saturate.auto.installed()\n"
        f"sys.argv = [{script('item_every_step.py')!r}, '--steps', '7']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    ok(run_job([str(job), str(run)], pythonpath=sys.path))
    main = main_process(load_run(run))
    assert len(main["steps"]) == 7


STAND_INS = r"""
import sys
sys.path.insert(0, sys.argv[2])
import saturate_autotrace as auto

class Tensor:
    def __init__(self, cuda, pinned=False):
        self.is_cuda, self.pinned = cuda, pinned
    def nelement(self): return 1024
    def element_size(self): return 4
    def is_pinned(self): return self.pinned

auto.install(sys.argv[1])
auto._record_to(Tensor(False), Tensor(True), (), {}, 0, 4000)                       # COPY_LINE
auto._record_to(Tensor(False, True), Tensor(True), (), {"non_blocking": True}, 0, 10)
auto._record_to(Tensor(True), Tensor(False), (), {}, 0, 50000)                      # D2H_LINE
auto._record_sync(".item()", "cuda", 0, 30000)                                      # SYNC_LINE
"""


def test_gpu_branches_with_tensor_stand_ins(tmp_path):
    """No GPU here: objects with is_cuda/is_pinned stand in for tensors, to drive
    the recorder's GPU branches: a host-to-device copy (pageable and pinned), a
    blocking device-to-host read and a sync on a GPU tensor. The real thing is
    test_doctor_on_a_gpu_names_pageable_copies_and_syncs (pytest -m gpu)."""
    code = tmp_path / "stand_ins.py"
    code.write_text(STAND_INS)
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, str(code), str(run), BOOTSTRAP], env=clean_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = STAND_INS.splitlines()
    line_of = lambda marker: next(i for i, t in enumerate(lines, 1) if marker in t)  # noqa: E731
    events = [json.loads(l) for f in glob.glob(str(run / "spans-*-auto.jsonl")) for l in open(f)]
    copies = [e for e in events if e.get("name") == "copy"]
    assert [(c["args"]["bytes"], c["args"]["pinned"], c["args"]["non_blocking"]) for c in copies] \
        == [(4096, 0, 0), (4096, 1, 1)]
    assert copies[0]["labels"]["site"].endswith(":%d" % line_of("COPY_LINE"))
    syncs = {(e["labels"]["op"], e["labels"]["site"].split(":")[-1]): e["args"]
             for e in events if e.get("name") == "host_sync" and e["ph"] == "C"}
    assert syncs[(".to(cpu)", str(line_of("D2H_LINE")))]["count"] == 1
    assert syncs[(".item()", str(line_of("SYNC_LINE")))]["total_ns"] == 30000
    assert all(e["labels"]["device"] == "cuda" for e in events if e.get("name") == "host_sync")


@pytest.mark.gpu
def test_doctor_on_a_gpu_names_pageable_copies_and_syncs(tmp_path):
    """On a GPU (bench/gpu/run.sh runs pytest -m gpu): pageable blocking copies
    and a per-step .item() are recorded as such, with their lines."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    report, stdout = doctor(tmp_path / "run", [sys.executable, script("gpu_copies.py")])
    features = check_shape(report)
    assert features["copy_pageable_pct"] == 100, features
    assert features["copy_blocking_pct"] == 100, features
    copy_line = marker_line("gpu_copies.py", "# COPY:")
    assert any(s["site"].endswith("gpu_copies.py:%d" % copy_line) for s in features["copy_sites"])
    sync_line = marker_line("gpu_copies.py", "# SYNC:")
    syncs = [s for s in features["host_syncs"] if s["device"] == "cuda"
             and s["site"].endswith("gpu_copies.py:%d" % sync_line)]
    assert syncs and syncs[0]["per_step"] >= 0.9, features["host_syncs"]
    found = findings_of(report, "host_sync")
    assert found and not found[0]["info"], stdout


def test_torchrun_ranks_record_steps_and_collectives(tmp_path):
    python = torch2_python()
    run = tmp_path / "run"
    env = clean_env(PYTHONPATH=BOOTSTRAP, SATURATE_RUN_DIR=str(run))
    r = subprocess.run([*torchrun(python), "--nproc_per_node=2", script("ddp_train.py"),
                        "--epochs", "2", "--samples", "512"],
                       env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    check_ranks(load_run(run), steps=2 * 512 // 2 // 32)


def check_ranks(procs, steps):
    ranks = {p["meta"]["auto"].get("env", {}).get("RANK"): p for p in procs.values() if p["steps"]}
    assert set(ranks) == {"0", "1"}, {pid: p["meta"]["auto"].get("env") for pid, p in procs.items()}
    line = marker_line("ddp_train.py", "ALL_REDUCE_LINE")
    for rank, p in ranks.items():
        assert len(p["steps"]) == steps, rank
        assert p["meta"]["auto"]["env"]["WORLD_SIZE"] == "2"
        reduces = spans(p, "all_reduce")
        assert len(reduces) == steps // 8, (rank, len(reduces))
        assert all(s["labels"]["site"].endswith(f"ddp_train.py:{line}") for s in reduces)
        assert all(s["args"]["bytes"] == 4 for s in reduces)  # one float32 loss
        assert len(spans(p, "broadcast")) == 4  # the 4 parameter tensors
        assert len(spans(p, "barrier")) == 1
        assert "collectives" in p["meta"]["auto"]["hooks"]


# ---- doctor (`saturate doctor` injects the bootstrap itself) ---------------------------------


def doctor(run_dir, command, *doctor_args, expect_rc=0, cwd=None, env=None, timeout=240):
    """`saturate doctor --no-gpu --out RUN_DIR ARGS -- COMMAND`; returns (findings.json, stdout)."""
    if env is None:
        env = clean_env(PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([*saturate_cmd(), "doctor", "--no-gpu", "--out", str(run_dir), *doctor_args,
                        "--", *command], env=env, cwd=cwd, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == expect_rc, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    with open(os.path.join(run_dir, "findings.json")) as f:
        return json.load(f), r.stdout


def findings_of(report, cause):
    return [f for f in report["findings"] if f["cause"] == cause]


def lost_s(report, cause):
    return sum(f["time_lost_s"] for f in findings_of(report, cause))


def check_shape(report):
    """Every finding has the fields the CONTRACT lists; features say steps and auto."""
    for f in report["findings"]:
        for key in ("cause", "title", "time_lost_s", "time_lost_pct", "evidence", "fix",
                    "fix_value", "confidence", "info", "sites"):
            assert key in f, (key, f)
        assert isinstance(f["info"], bool) and isinstance(f["sites"], list)
        for s in f["sites"]:
            assert {"site", "op", "count", "per_step", "total_s"} <= set(s), s
    features = report["features"]
    assert "steps" in features and isinstance(features.get("auto"), dict), features
    return features


def site_in(finding, filename, line):
    return [s for s in finding["sites"] if s["site"].endswith(f"{filename}:{line}")]


def recorded(features, steps=None):
    """The bootstrap recorded; with STEPS, doctor counted that many optimizer
    steps (or one fewer: a step is the time between two marks, and the first
    has no mark before it)."""
    assert features["auto"].get("processes", 0) >= 1, features["auto"]
    assert features["steps"] > 0, features
    if steps is not None:
        assert steps - 1 <= features["steps"] <= steps, (steps, features["steps"])


def test_doctor_inline_loading_names_num_workers_and_the_fix_helps(tmp_path):
    args = ["--steps", "50", "--image-size", "192"]
    before, stdout = doctor(tmp_path / "inline", [sys.executable, script("inline_loading.py"),
                                                  "--workers", "0", *args])
    features = check_shape(before)
    recorded(features)
    top = before["findings"][0] if before["findings"] else None
    assert top and top["cause"] == "input_pipeline", stdout
    assert not top["info"]
    assert isinstance(top["fix_value"], dict) and "num_workers" in top["fix_value"], top
    named = top["fix_value"]["num_workers"]
    assert float(named).is_integer() and named >= 1, top
    assert "num_workers=%d" % named in top["fix"], top["fix"]

    # The fix, applied (no more processes than cores: this runs on small CI machines).
    workers = max(1, min(int(named), os.cpu_count()))
    after, stdout_after = doctor(tmp_path / "workers", [sys.executable, script("inline_loading.py"),
                                                        "--workers", str(workers), *args])
    after_features = check_shape(after)
    recorded(after_features)
    # The direction only: how much faster depends on the machine and its load
    # (1.07x in one CI run on 2 busy cores); bench/ programs measure speed.
    rate = lambda f: f["steps"] / f["active_s"]  # noqa: E731
    assert rate(after_features) > rate(features), (features, after_features)
    assert after_features["step_time_median_s"] < features["step_time_median_s"]
    assert lost_s(after, "input_pipeline") < lost_s(before, "input_pipeline"), stdout_after
    assert isinstance(named, int), f"fix_value num_workers is {named!r}: the contract says an integer"


def test_doctor_points_at_the_item_call(tmp_path):
    report, stdout = doctor(tmp_path / "run", [sys.executable, script("item_every_step.py"),
                                               "--steps", "300"])
    features = check_shape(report)
    recorded(features, steps=300)
    line = marker_line("item_every_step.py", "HOST_SYNC_LINE")
    syncs = findings_of(report, "host_sync")
    assert syncs, stdout
    import torch

    if not torch.cuda.is_available():
        assert all(f["info"] for f in syncs), syncs  # nothing waits for a CPU
    hits = [s for f in syncs for s in site_in(f, "item_every_step.py", line)]
    assert hits, syncs
    assert hits[0]["count"] >= 300 and ".item()" in hits[0]["op"], hits


def test_doctor_names_the_torch_save_site(tmp_path):
    report, stdout = doctor(tmp_path / "run", [sys.executable, script("save_every_n.py"),
                                               "--out", str(tmp_path / "ckpt")])
    features = check_shape(report)
    recorded(features)
    stalls = findings_of(report, "checkpoint_stall")
    assert stalls and not stalls[0]["info"], stdout
    line = marker_line("save_every_n.py", "SAVE_LINE")
    assert site_in(stalls[0], "save_every_n.py", line), stalls[0]


def test_doctor_gpt_style_script_tells_the_eval_loop_from_every_step(tmp_path):
    """A nanoGPT-style loop (get_batch from a memmap, gradient accumulation, an
    estimate_loss() every eval_interval iterations with one .item() per eval batch,
    torch.save when the val loss improves, the loss logged with .item() every
    iteration). The eval loop's .item() has ~1 call per step, as the logging one
    does, but in 5% of the steps: doctor's every-step advice names the logging line
    only, and the features say in what share of the steps each site ran. The job
    runs under torch 2 (Debian's torch 1.13 takes ~20x longer per step here)."""
    iters, every = 60, 20
    report, stdout = doctor(tmp_path / "run", [
        torch2_python(), script("gpt_train.py"), f"--max_iters={iters}",
        f"--eval_interval={every}", "--always_save_checkpoint=True"],
        env=clean_env(), cwd=tmp_path)
    features = check_shape(report)
    recorded(features, steps=iters + 1)
    sites = {s["site"].rsplit(":", 1)[1]: s for s in features["host_syncs"]}
    eval_sync = sites[str(marker_line("gpt_train.py", "EVAL_SYNC_LINE"))]
    log_sync = sites[str(marker_line("gpt_train.py", "LOG_SYNC_LINE"))]
    assert eval_sync["count"] == (iters // every + 1) * 2 * 8, eval_sync  # 2 splits x 8 batches
    assert eval_sync["per_step"] >= 0.5 and eval_sync["step_share"] < 0.1, eval_sync
    assert log_sync["step_share"] > 0.9, log_sync
    (syncs,) = findings_of(report, "host_sync")
    assert syncs["info"], syncs
    assert [s["site"] for s in syncs["sites"]] == [log_sync["site"]], stdout
    assert features["checkpoints"] == iters // every, features
    assert features["checkpoint_sites"], features
    assert site_in({"sites": features["checkpoint_sites"]}, "gpt_train.py",
                   marker_line("gpt_train.py", "SAVE_LINE")), features["checkpoint_sites"]


def test_doctor_names_a_recompile_and_drop_last_ends_it(tmp_path):
    """A torch.compile'd MLP over 1000 samples in batches of 64: the short 16th batch has
    a new shape, and torch.compile compiles again mid-training. doctor records each
    compilation (Dynamo's compile callbacks), says how much of the start-up compiled,
    and names the recompile with its step; with --drop-last (the fix it names) only the
    start-up compiles. The aot_eager backend compiles in ~1 s here (inductor: ~10)."""
    reports = {}
    for name, extra in (("short_last", []), ("drop_last", ["--drop-last"])):
        reports[name] = doctor(tmp_path / name, [
            torch2_python(), script("compiled_mlp.py"), "--backend", "aot_eager", "--epochs", "3",
            "--samples", "1000", "--batch-size", "64", *extra], env=clean_env())
    report, stdout = reports["short_last"]
    features = check_shape(report)
    recorded(features, steps=3 * 16)
    procs = load_run(tmp_path / "short_last")
    triggers = [s["labels"]["trigger"] for s in spans(main_process(procs), "compile")]
    assert triggers.count("dynamo") >= 2, triggers  # the first frame, then the new shape
    assert features["compiles"] >= 2 and features["compiles_in_window"] >= 1, features
    assert features["compile_steps"][0] == 16, features
    assert 0 < features["compile_in_window_s"] < features["compile_s"], features
    (recompile,) = findings_of(report, "recompile")
    assert not recompile["info"] and recompile["time_lost_s"] > 0, stdout
    assert "It compiled in step 16" in recompile["fix"] and "drop_last=True" in recompile["fix"]
    assert "of it in torch.compile" in stdout, stdout

    report, stdout = reports["drop_last"]
    features = check_shape(report)
    recorded(features, steps=3 * 15)
    assert features["compiles"] >= 1 and features["compiles_in_window"] == 0, features
    assert not findings_of(report, "recompile"), stdout
    assert features["startup_s"] > features["compile_s"] > 0, features


def test_a_lightning_script_is_told_of_the_plugin_that_ends_its_checkpoint_stall(tmp_path):
    """ModelCheckpoint's torch.save stalls a Lightning loop: doctor finds it at Lightning's save
    site and names saturate's checkpoint plugin and ModelCheckpoint's interval; the same script
    with the plugin (its one changed line) saves as often with no stall left. Runs in CI's
    torch 2 line, named apart from the test_doctor_* tests it leaves out."""
    pytest.importorskip("lightning", reason="PyTorch Lightning is not installed in this "
                        "environment (scripts/torch2-env.sh puts it in .venv-torch2)")
    steps, every = 40, 5
    reports = {}
    for io in ("torch", "saturate"):
        reports[io] = doctor(tmp_path / f"run-{io}", [
            sys.executable, script("lightning_train.py"), "--steps", str(steps), "--save-every",
            str(every), "--io", io, "--out", str(tmp_path / f"ckpt-{io}")])
    report, stdout = reports["torch"]
    recorded(check_shape(report), steps=steps)
    (stall,) = findings_of(report, "checkpoint_stall")
    assert not stall["info"], stdout
    assert any("lightning/" in s["site"] for s in stall["sites"]), stall["sites"]
    assert "Trainer(plugins=[saturate.lightning.SaturateCheckpointIO()])" in stall["fix"], stdout
    assert "ModelCheckpoint(every_n_train_steps=" in stall["fix"], stdout

    report, stdout = reports["saturate"]
    features = check_shape(report)
    recorded(features, steps=steps)
    assert features["checkpoints"] == steps // every, features
    assert not findings_of(report, "checkpoint_stall"), stdout


def test_a_hugging_face_trainer_script_is_explained(tmp_path):
    """The Trainer saves five files a checkpoint (weights with safetensors, then torch.save of
    the optimizer, scheduler, RNG state, arguments) and tests each step's loss for NaN/inf on
    the host: doctor counts one checkpoint per save, sees the safetensors write, and names the
    Trainer's own settings in its fixes; a Trainer that tokenizes inline is told its
    TrainingArguments' worker count. Runs in CI's torch 2 line (scripts/test.sh), which
    leaves out the other test_doctor_* tests: named apart from them on purpose."""
    pytest.importorskip("transformers", reason="Hugging Face transformers is not installed in "
                        "this environment (scripts/torch2-env.sh puts it in .venv-torch2)")
    steps, every = 40, 5
    report, stdout = doctor(
        tmp_path / "run", [sys.executable, script("hf_trainer.py"), "--steps", str(steps),
                           "--save-steps", str(every), "--out", str(tmp_path / "out")],
        env=clean_env(PYTHONPATH=os.pathsep.join(sys.path), HF_HUB_OFFLINE="1"))
    features = check_shape(report)
    recorded(features, steps=steps)
    assert features["checkpoints"] == steps // every, features
    (stall,) = findings_of(report, "checkpoint_stall")
    assert not stall["info"], stdout
    ops = {s["op"] for s in stall["sites"]}
    assert {"torch.save", "safetensors.save_file"} <= ops, stall["sites"]
    assert all("transformers/" in s["site"] for s in stall["sites"]), stall["sites"]
    assert "TrainingArguments(save_steps=" in stall["fix"], stall["fix"]
    assert f", {every} steps)" in stall["fix"], stall["fix"]  # how often it saves now
    (syncs,) = findings_of(report, "host_sync")
    assert "logging_nan_inf_filter=False" in syncs["fix"], syncs["fix"]

    # Tokenizing inline (dataloader_num_workers=0): the loader Accelerate builds has a
    # batch_sampler and no batch_size, is built inside accelerate, and is set through the
    # Trainer's arguments; the fix says so, with a number.
    report, stdout = doctor(
        tmp_path / "run-tokenize", [sys.executable, script("hf_trainer.py"), "--steps", "30",
                                    "--text-chars", "20000", "--hidden", "128", "--layers", "2",
                                    "--out", str(tmp_path / "out-tokenize")],
        env=clean_env(PYTHONPATH=os.pathsep.join(sys.path), HF_HUB_OFFLINE="1"))
    features = check_shape(report)
    assert features["loader_batch_size"] == 16 and features["loader_threads"] == 0, features
    assert "transformers/trainer.py:" in features["loader_site"], features["loader_site"]
    (slow,) = findings_of(report, "input_pipeline")
    assert "TrainingArguments dataloader_num_workers=" in slow["fix"], slow["fix"]
    assert slow["fix_value"]["num_workers"] >= 1, slow


@pytest.mark.parametrize("args", [[], ["--data", "loader", "--workers", "2", "--batch-size", "128",
                                        "--steps", "30", "--log-every", "10"]],
                         ids=["memory", "loader_with_workers"])
def test_doctor_finds_nothing_wrong_with_a_healthy_loop(tmp_path, args):
    report, stdout = doctor(tmp_path / "run", [sys.executable, script("healthy.py"), *args])
    features = check_shape(report)
    recorded(features)
    bad = [f for f in report["findings"] if f["cause"] in BAD_CAUSES and not f["info"]]
    assert not bad, stdout
    # What the math ran in, as recorded (no GPU here, so no model_config finding).
    assert features["precision_bits"] == 32 and features["precision_source"] == "precision"
    assert features["model_shapes"]["conv_nchw_weights"] == 3, features["model_shapes"]


def test_doctor_imagenet_style_script(tmp_path, photo_folder):
    report, stdout = doctor(tmp_path / "run", [
        sys.executable, script("imagenet_main.py"), "-a", "tinynet", "-j", "2", "-b", "16",
        "--image-size", "64", "--epochs", "1", "--max-steps", "4", "-p", "2",
        "--checkpoint-dir", str(tmp_path / "ckpt"), photo_folder])
    features = check_shape(report)
    recorded(features, steps=4)
    assert features["auto"]["processes"] >= 3, features["auto"]  # the job and 2 workers


def test_doctor_python_dash_m(tmp_path):
    report, _ = doctor(tmp_path / "run", [sys.executable, "-m", "minitrain", "--steps", "20"],
                       cwd=AUTO)
    features = check_shape(report)
    recorded(features, steps=20)


def test_doctor_counts_explicit_and_auto_steps_once(tmp_path):
    report, _ = doctor(tmp_path / "run", [sys.executable, script("explicit_marks.py"),
                                          "--steps", "30"])
    features = check_shape(report)
    recorded(features, steps=30)  # not 60: explicit and auto marks are the same steps


def test_doctor_no_auto_leaves_the_job_alone(tmp_path):
    report, _ = doctor(tmp_path / "run", [sys.executable, script("item_every_step.py"),
                                          "--steps", "20"], "--no-auto")
    assert not glob.glob(str(tmp_path / "run" / "**" / "spans-*-auto.jsonl"), recursive=True)
    assert check_shape(report)["steps"] == 0


def test_doctor_on_a_command_that_is_not_python(tmp_path):
    report, stdout = doctor(tmp_path / "run", ["sleep", "2"])
    features = check_shape(report)
    assert features["steps"] == 0
    assert "no step data" in stdout, stdout


@pytest.mark.parametrize("command,rc", [
    ([sys.executable, "-c", "import sys; sys.exit(3)"], 3),
    ([sys.executable, script("prints_and_exits.py"), "--signal", "TERM"], 128 + signal.SIGTERM),
], ids=["exit3", "sigterm"])
def test_doctor_passes_the_exit_status_through(tmp_path, command, rc):
    doctor(tmp_path / "run", command, expect_rc=rc)


def test_doctor_under_torchrun(tmp_path):
    python = torch2_python()
    env = clean_env()  # no PYTHONPATH: torch 2's environment must not see Debian's torch
    report, stdout = doctor(tmp_path / "run", [*torchrun(python), "--nproc_per_node=2",
                                               script("ddp_train.py"), "--epochs", "2",
                                               "--samples", "512"], env=env)
    features = check_shape(report)
    recorded(features)
    # Each rank in its own folder (docs/ranks.md); doctor merges them.
    for r in (0, 1):
        assert glob.glob(str(tmp_path / "run" / f"rank-{r}" / "spans-*-auto.jsonl")), r
    assert features["ranks"]["world_size"] == 2, features["ranks"]
    assert [row["steps"] for row in features["ranks"]["rows"]] == [2 * 512 // 2 // 32 - 1] * 2
    check_ranks(load_run(tmp_path / "run"), steps=2 * 512 // 2 // 32)


def test_run_instrumented_records_and_keeps_the_exit_code(tmp_path):
    run = tmp_path / "run"
    r = subprocess.run([*saturate_cmd(), "run-instrumented", "-o", str(run), "--",
                        sys.executable, script("prints_and_exits.py"), "--exit-code", "4"],
                       env=clean_env(PYTHONPATH=os.pathsep.join(sys.path)), capture_output=True,
                       timeout=120)
    plain = run_job([script("prints_and_exits.py"), "--exit-code", "4"], text=False)
    assert (r.returncode, r.stdout, r.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert len(main_process(load_run(run))["steps"]) == 8
