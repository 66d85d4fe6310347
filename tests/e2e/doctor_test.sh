#!/usr/bin/env bash
# End-to-end tests of `saturate doctor` and `saturate report` on commands that
# carry no instrumentation (the metrics alone), run as a user runs them. The
# scenario jobs with spans, one per bottleneck, are in
# python/tests/test_doctor_scenarios.py; the report in a real browser is
# tests/e2e/report_chromium.sh.
#
# usage: doctor_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR
set -u

SAT=${1:?usage: doctor_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR}
SRC=${2:?usage: doctor_test.sh SATURATE_BINARY PROJECT_SOURCE_DIR}
SRC=$(cd "$SRC" && pwd)
SAT=$(realpath "$SAT")
source "$SRC/tests/e2e/lib.sh"

section "help and bad flags"
sat doctor --help
expect_rc 0 "doctor --help"
expect_out "--fail-on" "doctor --help lists --fail-on"
sat report --help
expect_rc 0 "report --help"
sat doctor --fail-on 'dataloader>5%' -- sh -c 'touch ran'
expect_rc 2 "doctor with an unknown cause in --fail-on"
expect_err "unknown cause 'dataloader'" "doctor names the bad gate"
check "a bad gate is refused before the command runs" test ! -e ran
sat doctor --no-gpu --out r0 -- saturate-no-such-command
expect_rc 2 "doctor a missing command"
expect_err "command not found" "doctor says the command is missing"
sat report no-such-run
expect_rc 2 "report on a missing run directory"
expect_err "no-such-run" "report names the missing run directory"

section "an uninstrumented command: exit code, outputs"
sat doctor --no-gpu --interval 50ms --out r1 -- sh -c 'echo child-out; sleep 1; exit 3'
expect_rc 3 "doctor returns the command's exit code"
expect_out "child-out" "the command's output passes through"
expect_out "saturate doctor" "doctor prints its summary"
for f in meta.json samples.jsonl findings.json report.html; do
  check "doctor wrote r1/$f" test -s "r1/$f"
done
check "findings.json has the documented keys" python3 - r1/findings.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert isinstance(j["findings"], list) and "features" in j and j["duration_s"] > 0.5, j
for f in j["findings"]:
    for key in ("cause", "time_lost_s", "time_lost_pct", "evidence", "fix"):
        assert key in f, (key, f)
PY

section "the child learns where its spans go"
sat doctor --no-gpu --out r2 -- sh -c 'echo "dir=$SATURATE_RUN_DIR"'
expect_rc 0 "doctor around sh"
expect_out "dir=$WORK/r2" "SATURATE_RUN_DIR is the run directory, absolute"

section "report re-renders a run; gates set the exit code"
rm r1/report.html r1/findings.json
sat report r1
expect_rc 0 "report r1"
check "report rewrote findings.json and report.html" test -s r1/findings.json -a -s r1/report.html
sat report r1 --fail-on 'any>0s' --min-pct 0
python3 -c 'import json,sys; sys.exit(0 if any(f["time_lost_s"] > 0 for f in json.load(open("r1/findings.json"))["findings"]) else 1)' \
  && expect_rc 1 "any>0s fails when there is a finding" \
  || expect_rc 0 "any>0s passes when there is no finding"
sat report r1 --fail-on 'any>100%'
expect_rc 0 "no cause costs more than the whole run"

section "report on a damaged run directory"
mkdir bad && echo '{not json' > bad/meta.json
sat report bad
expect_rc_nonzero "report on a bad meta.json"
expect_err "meta.json" "report names the bad file"

summary
