# The e2e tests' shared kit, sourced by each tests/e2e/*_test.sh: a scratch
# directory ($WORK, removed at exit, with $BG_PID killed), `run`/`sat` that
# capture stdout/stderr/exit status, and expect_* assertions that count
# PASS/FAIL and print the failing command's output.
# Needs: SAT (the saturate binary) set by the caller.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/saturate-e2e.XXXXXX")
BG_PID=
cleanup() {
  if [[ -n $BG_PID ]]; then kill -9 "$BG_PID" 2>/dev/null; wait "$BG_PID" 2>/dev/null; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cd "$WORK" || exit 2

# ---- a tiny assertion kit ---------------------------------------------------
PASS=0
FAIL=0
RC=0          # exit status of the last `run`
LAST_CMD=""   # the last `run`'s command line, for failure messages
OUT=$WORK/.stdout
ERR=$WORK/.stderr

ok() { PASS=$((PASS + 1)); }
bad() {
  FAIL=$((FAIL + 1))
  echo "FAIL: $1" >&2
  if [[ -n $LAST_CMD ]]; then
    echo "      command: $LAST_CMD (exit $RC)" >&2
    echo "      stdout: $(head -c 600 "$OUT" | sed 's/^/        /')" >&2
    echo "      stderr: $(head -c 600 "$ERR" | sed 's/^/        /')" >&2
  fi
}
# run CMD...: runs it with stdout/stderr captured into $OUT/$ERR and status into $RC.
run() {
  LAST_CMD="$*"
  "$@" >"$OUT" 2>"$ERR"
  RC=$?
}
sat() { run "$SAT" "$@"; }
expect_rc() {  # expect_rc N WHAT
  if [[ $RC -eq $1 ]]; then ok; else bad "$2: expected exit $1, got $RC"; fi
}
expect_rc_nonzero() {
  if [[ $RC -ne 0 ]]; then ok; else bad "$1: expected a non-zero exit"; fi
}
expect_rc_in() {  # expect_rc_in "2 3" WHAT
  local c
  for c in $1; do [[ $RC -eq $c ]] && { ok; return; }; done
  bad "$2: expected exit in {$1}, got $RC"
}
expect_out() {  # expect_out SUBSTRING WHAT
  if grep -qF -- "$1" "$OUT"; then ok; else bad "$2: stdout lacks '$1'"; fi
}
expect_err() {
  if grep -qF -- "$1" "$ERR"; then ok; else bad "$2: stderr lacks '$1'"; fi
}
expect_not_out() {
  if grep -qF -- "$1" "$OUT"; then bad "$2: stdout has '$1'"; else ok; fi
}
check() {  # check WHAT CMD...: passes when CMD succeeds
  local what=$1
  shift
  if "$@"; then ok; else bad "$what"; fi
}
# json_get EXPR: evaluates a Python expression over `j` (the JSON in $OUT), prints it.
json_get() {
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$OUT" "$1"
}
expect_json() {  # expect_json PY_EXPR EXPECTED WHAT
  local got
  if ! got=$(json_get "$1" 2>&1); then
    bad "$3: stdout is not JSON or lacks $1 ($got)"
  elif [[ $got == "$2" ]]; then ok; else bad "$3: $1 is '$got', expected '$2'"; fi
}
expect_valid_json() {
  if python3 -c 'import json,sys; json.load(sys.stdin)' <"$OUT" 2>/dev/null; then ok
  else bad "$1: stdout is not valid JSON"; fi
}
section() { echo "--- $*"; LAST_CMD=""; }
# Fingerprint of a directory tree (names, sizes, contents).
tree_sum() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum) | sha256sum; }

# summary: the last line, "N passed, M failed"; the exit status says whether all passed.
summary() {
  echo "elapsed: $((SECONDS - START))s"
  echo "$PASS passed, $FAIL failed"
  [[ $FAIL -eq 0 ]]
}
START=$SECONDS
