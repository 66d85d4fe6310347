#!/usr/bin/env bash
# End-to-end tests of `saturate watch`, run the way a user runs it: around a
# command, around a pid, with a Prometheus endpoint read by a real HTTP client
# (Python's urllib), parsed by prometheus_client's parser and scraped by a real
# Prometheus server when Debian's `prometheus` is installed.
#
# usage: watch_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR FAKE_NVML_LIBRARY
# (no GPU on CI machines: the fake libnvidia-ml built by the tests stands in
# for the driver; one test also runs without any driver)
set -u

SAT=${1:?usage: watch_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR FAKE_NVML_LIBRARY}
SRC=${2:?usage: watch_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR FAKE_NVML_LIBRARY}
FAKE=${3:?usage: watch_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR FAKE_NVML_LIBRARY}
SRC=$(cd "$SRC" && pwd)
SAT=$(realpath "$SAT")
FAKE=$(realpath "$FAKE")
source "$SRC/tests/e2e/lib.sh"

# Debian's python3 (with python3-prometheus-client), whatever python3 comes first on PATH.
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_for CMD...: retries CMD for up to 10 s.
wait_for() {
  local i
  for i in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

section "help and bad flags"
sat watch --help
expect_rc 0 "watch --help"
expect_out "--prometheus" "watch --help lists --prometheus"
sat watch --interval fast -- true
expect_rc 2 "watch with a bad --interval"
expect_err "bad duration 'fast'" "watch names the bad interval"
sat watch --pid 1 -- true
expect_rc 2 "watch with both --pid and a command"
sat watch --no-record -- saturate-no-such-command
expect_rc 2 "watch a missing command"
expect_err "command not found" "watch says the command is missing"
sat watch --prometheus 99999 --no-record -- true
expect_rc 2 "watch with a bad --prometheus address"

section "around a command: exit code, run directory"
sat watch --nvml-library "$FAKE" --interval 50ms --out run1 -- \
  sh -c 'echo child-out; sleep 1.5 & sleep 0.3; wait; exit 5'
expect_rc 5 "watch returns the command's exit code"
expect_out "child-out" "the command's stdout passes through"
expect_err "2 GPUs" "watch says which GPUs it sees"
check "run1/meta.json and samples.jsonl follow the schema" python3 - run1 <<'PY'
import json, sys
run = sys.argv[1]
meta = json.load(open(f"{run}/meta.json"))
for key in ("host", "cpus", "gpus", "driver_version", "command", "start_unix_ns", "end_unix_ns",
            "interval_ns", "exit_code", "samples", "sampler_cpu_ns"):
    assert key in meta, key
assert meta["exit_code"] == 5 and meta["interval_ns"] == 50_000_000
assert meta["command"][0] == "sh" and len(meta["gpus"]) == 2
lines = [json.loads(l) for l in open(f"{run}/samples.jsonl")]
assert len(lines) == meta["samples"] >= 8, len(lines)
last = lines[-1]
assert last["gpus"][0]["util_pct"] == 40 and last["gpus"][1]["power_w"] == 251
assert 0 <= last["host"]["cpu_busy_pct"] <= 100 and last["host"]["mem_total_bytes"] > 0
# sh and its sleeps (new children are found by a /proc scan once a second)
assert max(l["tree"]["processes"] for l in lines if "tree" in l) >= 2
PY

section "without a driver"
sat watch --nvml-library /nonexistent/libnvidia-ml.so.1 --no-record -- true
expect_rc 0 "watch without a driver still runs"
expect_err "no GPUs: no NVIDIA driver" "watch says in one line why there are no GPUs"

section "signals reach the command"
"$SAT" watch --no-record -q -- sh -c 'trap "exit 9" TERM; while :; do sleep 0.05; done' \
  >/dev/null 2>&1 &
BG_PID=$!
sleep 0.5
kill -TERM "$BG_PID"
wait "$BG_PID"
RC=$?
BG_PID=
LAST_CMD="watch -- sh (trap TERM)"
expect_rc 9 "SIGTERM to watch reaches the command, whose exit code watch returns"

section "--pid, --duration, Ctrl-C"
sleep 3 &
SLEEPER=$!
sat watch --pid "$SLEEPER" --no-record --interval 50ms --no-gpu
expect_rc 0 "watch --pid ends when the process does"
sat watch --duration 300ms --no-record --no-gpu
expect_rc 0 "watch --duration ends on time"
"$SAT" watch --no-gpu --out run2 -q >/dev/null 2>&1 &
BG_PID=$!
sleep 0.5
kill -INT "$BG_PID"
wait "$BG_PID"
RC=$?
BG_PID=
expect_rc 130 "Ctrl-C ends a host watch with 130"
check "Ctrl-C still finishes the run directory" python3 -c \
  'import json; m = json.load(open("run2/meta.json")); assert m["samples"] > 0 and "end_unix_ns" in m'

section "Prometheus endpoint"
PORT=$(free_port)
"$SAT" watch --nvml-library "$FAKE" --no-record --prometheus "$PORT" -q --duration 30s \
  >/dev/null 2>"$WORK/prom.err" &
BG_PID=$!
check "the endpoint answers on 127.0.0.1" wait_for python3 -c \
  "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/metrics', timeout=1)"
check "the page parses as the Prometheus text format, with dcgm-exporter names" $PY - "$PORT" <<'PY'
import sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
url = f"http://127.0.0.1:{sys.argv[1]}/metrics"
for _ in range(50):
    with urllib.request.urlopen(url, timeout=2) as r:
        ctype, page = r.headers["Content-Type"], r.read().decode()
    if "DCGM_FI_DEV_GPU_UTIL" in page:
        break
    time.sleep(0.1)
assert ctype.startswith("text/plain; version=0.0.4"), ctype
families = {f.name: f for f in text_string_to_metric_families(page)}
util = families["DCGM_FI_DEV_GPU_UTIL"]
assert util.type == "gauge" and len(util.samples) == 2
labels = util.samples[1].labels
assert labels["gpu"] == "1" and labels["UUID"] == "GPU-fake-1" and labels["modelName"] == "Fake GPU 1"
assert util.samples[0].value == 40
assert "saturate_host_cpu_pct" in families and "saturate_host_memory_used_bytes" in families
PY

if command -v prometheus >/dev/null 2>&1; then
  section "a real Prometheus server scrapes it"
  PROM_PORT=$(free_port)
  cat >prom.yml <<YML
global: {scrape_interval: 1s}
scrape_configs:
  - job_name: saturate
    static_configs: [{targets: ["127.0.0.1:$PORT"]}]
YML
  prometheus --config.file=prom.yml --storage.tsdb.path=prom-data \
    --web.listen-address="127.0.0.1:$PROM_PORT" >prom.log 2>&1 &
  PROM_PID=$!
  query() {
    python3 - "$PROM_PORT" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
result = json.load(urllib.request.urlopen(url, timeout=2))["data"]["result"]
assert result and float(result[0]["value"][1]) > 0, result
PY
  }
  check "Prometheus scraped saturate: up == 1" wait_for query 'up{job="saturate"}'
  check "Prometheus has the GPU metric with dcgm labels" \
    wait_for query 'DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="Fake GPU 0"}'
  kill "$PROM_PID" 2>/dev/null
  wait "$PROM_PID" 2>/dev/null
else
  echo "(prometheus not installed: the server scrape test is skipped)"
fi
kill -INT "$BG_PID" 2>/dev/null
wait "$BG_PID" 2>/dev/null
BG_PID=

section "the Python auto-instrumentation bootstrap (watch, run-instrumented)"
HERE=$(pwd -P)
mkdir -p mine && echo 'MARK = 1' >mine/saturate_e2e_mine.py
# Shows whether the bootstrap is on sys.path and loaded, and that the user's PYTHONPATH still works.
SHOW='import sys, saturate_e2e_mine
print("auto-path", [p for p in sys.path if p.endswith("/.auto")])
print("autotrace", "saturate_autotrace" in sys.modules)'
PYTHONPATH=$HERE/mine run "$SAT" watch --no-gpu -q -o auto-on -- "$PY" -c "$SHOW"
expect_rc 0 "watch runs a Python command with the bootstrap"
expect_out "auto-path ['$HERE/auto-on/.auto']" "the bootstrap folder is on sys.path"
expect_out "autotrace True" "sitecustomize loaded saturate_autotrace"
check "meta.json says auto_instrument is on" \
  python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["auto_instrument"] is True' \
  auto-on/meta.json
PYTHONPATH=$HERE/mine run "$SAT" watch --no-auto --no-gpu -q -o auto-off -- "$PY" -c "$SHOW"
expect_rc 0 "watch --no-auto (a pre-existing PYTHONPATH entry still imports)"
expect_out "auto-path []" "--no-auto: no bootstrap on sys.path"
expect_out "autotrace False" "--no-auto: saturate_autotrace not loaded"
check "--no-auto leaves no bootstrap folder" test ! -e auto-off/.auto
check "meta.json says auto_instrument is off" \
  python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["auto_instrument"] is False' \
  auto-off/meta.json
sat watch --help
expect_out "--no-auto" "watch --help lists --no-auto"

sat run-instrumented --help
expect_rc 0 "run-instrumented --help"
expect_out "SATURATE_RUN_DIR" "run-instrumented --help says where the run directory is"
sat run-instrumented -o inst -- "$PY" -c \
  'import os,sys; print(os.environ["SATURATE_RUN_DIR"]); print(sys.modules.get("saturate_autotrace") is not None)'
expect_rc 0 "run-instrumented a Python command"
expect_out "$HERE/inst" "SATURATE_RUN_DIR is the absolute run directory"
expect_out "True" "the command imported saturate_autotrace"
check "the bootstrap is in RUN/.auto" test -s inst/.auto/sitecustomize.py
check "run-instrumented wrote a meta.json for report" grep -q '"recorder": "saturate run-instrumented"' inst/meta.json
sat report inst --no-html
expect_rc 0 "report opens a run-instrumented directory"
expect_out "no step data" "report on a job without torch says there is no step data"
sat run-instrumented -o inst -- sh -c 'exit 7'
expect_rc 7 "run-instrumented passes the exit status through"
sat run-instrumented -o inst -- sh -c 'kill -TERM $$'
expect_rc 143 "run-instrumented: a signal-killed command is the shell's 128+signal"
SATURATE_RUN_DIR=$HERE/from-env run "$SAT" run-instrumented -- sh -c 'echo "dir=$SATURATE_RUN_DIR"'
expect_out "dir=$HERE/from-env" "run-instrumented uses \$SATURATE_RUN_DIR without -o"
check "the run directory from the environment is created" test -d from-env/.auto
sat run-instrumented -o inst -- saturate-no-such-command
expect_rc 2 "run-instrumented a missing command"
expect_err "saturate-no-such-command: command not found" "run-instrumented names the missing command"
sat run-instrumented -o inst
expect_rc 2 "run-instrumented without a command"

summary
