#!/usr/bin/env bash
# End-to-end tests of `saturate tune` and `saturate tune feed` on CPU: a
# python3 busy loop whose speed depends on {threads} (measured with --metric),
# a loop that marks steps in the trace format itself and fails above a batch
# size (an out-of-memory stand-in), and the loader on a small packed dataset.
#
# usage: tune_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR
# The last line is "N passed, M failed"; the exit status is non-zero when anything failed.
set -u

SAT=${1:?usage: tune_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR}
SRC=${2:?usage: tune_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR}
FMNIST=${SATURATE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
SAT=$(cd "$(dirname "$SAT")" && pwd)/$(basename "$SAT")
SRC=$(cd "$SRC" && pwd)
[[ -x $SAT ]] || { echo "tune_test: $SAT is not an executable" >&2; exit 2; }

source "$SRC/tests/e2e/lib.sh"

# tune_get EXPR: a Python expression over `j`, the tune.json in $1.
tune_json() {
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
expect_tune() {  # expect_tune FILE EXPR EXPECTED WHAT
  local got
  if ! got=$(tune_json "$1" "$2" 2>&1); then bad "$4: $2 failed ($got)"
  elif [[ $got == "$3" ]]; then ok; else bad "$4: $2 is '$got', expected '$3'"; fi
}

# ---- usage ----------------------------------------------------------------------------
section "help and bad flags"
sat tune --help
expect_rc 0 "tune --help"
for w in --param --trial-seconds --trial-steps --metric --verify-rounds --baseline feed; do
  expect_out "$w" "tune --help mentions $w"
done
sat tune feed --help
expect_rc 0 "tune feed --help"
for w in DATASET --threads --prefetch --trial-seconds; do expect_out "$w" "tune feed --help mentions $w"; done
sat tune --param threads -- true
expect_rc 2 "a --param without values"
expect_err "--param 'threads'" "the error names the flag"
sat tune --param batch=64..32 -- true
expect_rc 2 "a range that ends below its start"
expect_err "ends below its start" "the error says why"
sat tune --param t=1,2 --param t=3 -- true
expect_rc 2 "a parameter given twice"
sat tune --param t=1,2 --metric 'rate=(' -- true
expect_rc 2 "a bad --metric regex"
expect_err "--metric" "the error names --metric"
sat tune --param t=1,2 --baseline u=1 -- true
expect_rc 2 "a --baseline of no --param"
sat tune --param t=1,2
expect_rc 2 "no command"
expect_not_out "trial" "nothing ran"

# ---- a command measured by --metric ----------------------------------------------------
section "tune a command by --metric"
# Runs until stopped; prints a rate proportional to its argument. The rate is
# not timed: a timed one follows the machine's load (a loaded CI machine, a
# sanitizer build), and this test is about tune's parsing, trials and verify.
cat >busy.py <<'PY'
import sys, time
threads = int(sys.argv[1])
import os
assert os.environ["SATURATE_TUNE_THREADS"] == sys.argv[1], "env and argv disagree"
n = 0
while True:
    time.sleep(0.005)
    n += 1
    if n % 10 == 0:
        print("rate=%.1f" % (1000.0 * threads), flush=True)
PY
run "$SAT" tune --param threads=1,2 --trial-seconds 1.5 --no-gpu -o metric \
  --metric 'rate=([0-9.]+)' -- python3 busy.py '{threads}'
expect_rc 0 "tune --metric"
J=metric/tune.json
check "tune.json written" test -s "$J"
check "report.html written" test -s metric/report.html
check "a trial is a run directory" test -s metric/trial-001/meta.json
check "the command's output is kept" grep -q "rate=" metric/trial-001/output.log
expect_tune "$J" "j['strategy']" "grid" "a small space is a grid"
expect_tune "$J" "len(j['trials'])" "6" "2 trials and 2 verify rounds of 2"
expect_tune "$J" "j['recommendation']['config']['threads']" "2" "2 threads recommended"
expect_tune "$J" "j['recommendation']['argv'][-1]" "2" "the placeholder is substituted"
expect_tune "$J" "j['recommendation']['env']['SATURATE_TUNE_THREADS']" "2" "the environment to use"
expect_tune "$J" "j['verify']['reliable_gain']" "True" "a 2x gain is reliable"
expect_tune "$J" "1.5 < j['verify']['ratio'] < 2.6" "True" "the verified ratio is about 2"
expect_tune "$J" "[t['ended_by'] for t in j['trials']][0]" "time" "trials end at the budget"
expect_tune "$J" "sum(1 for t in j['trials'] if t.get('best'))" "1" "one best trial"
expect_out "verify:" "the summary gives the verdict"
expect_out "env: SATURATE_TUNE_THREADS=2" "the summary gives the environment"
check "the page has charts" grep -q "<svg" metric/report.html
check "the page has no scripts" bash -c '! grep -q "<script" metric/report.html'

# ---- step marks, a failing batch size, the adaptive search ------------------------------
section "tune by step marks with a failing batch"
# Marks steps in its own spans file (the trace format); a step takes longer
# with a larger batch but less per sample, and 2 threads halve it (more do
# not help). Exits 3 like an out-of-memory error above batch 256.
cat >steps.py <<'PY'
import json, os, sys, time
batch, threads = int(sys.argv[1]), int(sys.argv[2])
if batch > 256:
    print("RuntimeError: CUDA out of memory (pretend)", file=sys.stderr)
    sys.exit(3)
path = os.path.join(os.environ["SATURATE_RUN_DIR"], "spans-%d.jsonl" % os.getpid())
pid = os.getpid()
with open(path, "a") as f:
    f.write(json.dumps({"ph": "M", "pid": pid, "comm": "python3", "clock": "CLOCK_MONOTONIC",
                        "ts_ns": time.monotonic_ns(), "unix_ns": time.time_ns()},
                       separators=(",", ":")) + "\n")
    step = 0
    while True:
        time.sleep(0.01 * (0.5 + batch / 256) / min(threads, 2))
        step += 1
        f.write(json.dumps({"ph": "step", "step": step, "ts_ns": time.monotonic_ns(),
                            "pid": pid, "tid": pid}, separators=(",", ":")) + "\n")
        f.flush()
PY
run "$SAT" tune --param batch=64..1024:x2 --param threads=1,2,4 --trial-steps 30 \
  --trial-seconds 10 --strategy adaptive --verify-rounds 1 --no-gpu -o steps \
  -- python3 steps.py '{batch}' '{threads}'
expect_rc 0 "tune by step marks"
J=steps/tune.json
expect_tune "$J" "j['strategy']" "adaptive" "--strategy adaptive"
expect_tune "$J" "j['unit']" "samples/s" "steps x batch = samples/s"
expect_tune "$J" "[t['status'] for t in j['trials'] if t['config']['batch'] == '512']" "['failed']" \
  "batch 512 fails"
expect_tune "$J" "[t['exit_code'] for t in j['trials'] if t['status'] == 'failed']" "[3]" \
  "the failure's exit code"
expect_tune "$J" "any('out of memory' in l for t in j['trials'] for l in t.get('output_tail', []))" \
  "True" "the failure's last output lines"
expect_tune "$J" "[t for t in j['trials'] if t['config']['batch'] == '1024']" "[]" \
  "a batch larger than a failed one is skipped"
expect_tune "$J" "j['recommendation']['config']['threads']" "2" "threads past 2 do not help"
expect_tune "$J" "[t['ended_by'] for t in j['trials'] if t['status'] == 'ok'][0]" "steps" \
  "--trial-steps ends a trial"
expect_tune "$J" "j['recommendation']['config']['batch']" "256" "the largest batch that fits"
expect_tune "$J" "j['recommendation']['gradient_accumulation']" "1" \
  "no accumulation when the batch grows"
expect_tune "$J" "j['verify']['reliable_gain']" "True" "the gain is verified"

# ---- tune feed --------------------------------------------------------------------------
section "tune feed"
if [[ -f $FMNIST/t10k-images-idx3-ubyte.gz ]]; then
  sat pack idx "$FMNIST/t10k-images-idx3-ubyte.gz" "$FMNIST/t10k-labels-idx1-ubyte.gz" fm -q
  expect_rc 0 "pack idx for tune feed"
  sat tune feed fm --threads 1,2 --prefetch 2,4 --trial-seconds 1 -o feed
  expect_rc 0 "tune feed"
  J=feed/tune.json
  expect_tune "$J" "j['mode']" "feed" "tune.json mode"
  expect_tune "$J" "len(j['trials'])" "3" "2 thread counts, then 1 more prefetch depth"
  expect_tune "$J" "all(t['throughput'] > 0 for t in j['trials'])" "True" "every trial fed samples"
  expect_tune "$J" "j['knee']['shape'] in ('rising', 'plateau', 'declining')" "True" "a knee"
  expect_tune "$J" "j['knee']['threads'] in (1, 2)" "True" "the knee is a measured count"
  expect_out "knee:" "the summary names the knee"
  check "tune feed report" grep -q 'id="threads-cpu"' feed/report.html
  sat tune feed fm --threads 0,1
  expect_rc 2 "tune feed --threads 0"
  sat tune feed no-such-dataset --threads 1 --prefetch 2 --trial-seconds 1
  expect_rc_nonzero "tune feed on a missing dataset"
else
  echo "tune_test: Fashion-MNIST missing from $FMNIST; tune feed not tested" >&2
  bad "tune feed needs $FMNIST"
fi

echo "$PASS passed, $FAIL failed"
[[ $FAIL -eq 0 ]]
