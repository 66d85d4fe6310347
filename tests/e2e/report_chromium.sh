#!/usr/bin/env bash
# The doctor's HTML report opened in a real browser: Debian's chromium,
# headless, parses the page (--dump-dom: the findings table and the three
# SVG charts are in the DOM, the <script> carried in the run's command line
# stayed text) and renders it (--screenshot: a real, non-blank PNG, kept for
# a person to look at).
#
# usage: report_chromium.sh RENDER_REPORT_BINARY PROJECT_SOURCE_DIR
# Fails when chromium is not installed (scripts/install-deps.sh installs it);
# SATURATE_SKIP_CHROMIUM=1 skips the test instead (exit 77, "skipped").
set -u

RENDER=${1:?usage: report_chromium.sh RENDER_REPORT_BINARY PROJECT_SOURCE_DIR}
SRC=${2:?usage: report_chromium.sh RENDER_REPORT_BINARY PROJECT_SOURCE_DIR}
SRC=$(cd "$SRC" && pwd)
RENDER=$(realpath "$RENDER")

if [[ ${SATURATE_SKIP_CHROMIUM:-0} == 1 ]]; then
  echo "SKIPPED: SATURATE_SKIP_CHROMIUM=1"
  exit 77
fi
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $CHROMIUM ]]; then
  echo "FAIL: chromium is not installed (apt-get install chromium, as scripts/install-deps.sh" \
    "does), or set SATURATE_SKIP_CHROMIUM=1 to skip this test" >&2
  exit 1
fi
source "$SRC/tests/e2e/lib.sh"

# browser ARGS... URL: headless chromium with a fresh profile, at most 60 s.
browser() {
  timeout 60 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --user-data-dir="$(mktemp -d "$WORK/profile.XXXXXX")" "$@"
}
dom_has() {  # dom_has SUBSTRING WHAT
  if grep -qF -- "$1" "$OUT"; then ok; else bad "$2: the DOM lacks '$1'"; fi
}
dom_count() {  # dom_count SUBSTRING N WHAT
  local n
  n=$(grep -oF -- "$1" "$OUT" | wc -l)
  if [[ $n -eq $2 ]]; then ok; else bad "$3: the DOM has $n of '$1', expected $2"; fi
}

section "render the synthetic run's report"
run "$RENDER" "$WORK/report.html"
expect_rc 0 "render_report"
expect_out "input_pipeline" "the terminal summary lists the top finding"
check "report.html was written" test -s "$WORK/report.html"

section "chromium parses it"
run browser --dump-dom "file://$WORK/report.html"
expect_rc 0 "chromium --dump-dom"
dom_has '<table class="findings">' "the findings table"
dom_has '>input_pipeline</td>' "the top finding's row"
dom_count '<svg ' 4 "one SVG per chart"
dom_has '>step 240</text>' "the step waterfall's rows"
dom_has '<polyline' "the utilization timeline's lines"
dom_has 'data_wait</text>' "the step-phase bars' labels"
dom_has '0.25–0.5 s</text>' "the idle-gap histogram's buckets"
# What the run carried as markup came out as text: no script element.
dom_count '<script' 0 "no script element"
dom_has '&lt;script&gt;alert(' "the command line's <script> shown as text"

section "chromium renders it"
PNG=$WORK/report.png
run browser --screenshot="$PNG" --window-size=1280,2000 "file://$WORK/report.html"
expect_rc 0 "chromium --screenshot"
check "the screenshot was written" test -s "$PNG"
# PNG signature, then the IHDR chunk's width and height.
read -r magic width height < <(python3 -c '
import struct, sys
head = open(sys.argv[1], "rb").read(24)
w, h = struct.unpack(">II", head[16:24]) if len(head) == 24 else (0, 0)
print(head[:8].hex(), w, h)' "$PNG" 2>/dev/null || echo "none 0 0")
if [[ $magic == 89504e470d0a1a0a ]]; then ok; else bad "the screenshot is not a PNG ($magic)"; fi
if [[ $width -eq 1280 && $height -eq 2000 ]]; then ok
else bad "the screenshot is ${width}x$height, expected 1280x2000"; fi
# A blank page compresses to a few KB; text, tables and charts do not.
size=$(stat -c %s "$PNG" 2>/dev/null || echo 0)
if [[ $size -gt 50000 ]]; then ok; else bad "the screenshot is $size bytes: a blank page?"; fi
KEEP=${SATURATE_TEST_TMPDIR:-${TMPDIR:-/tmp}}
mkdir -p "$KEEP" && cp "$PNG" "$KEEP/report_chromium.png" && cp "$WORK/report.html" "$KEEP/report_chromium.html" &&
  echo "screenshot: $KEEP/report_chromium.png (page: $KEEP/report_chromium.html)"

section "a healthy run's report"
run "$RENDER" "$WORK/healthy.html" --healthy
expect_rc 0 "render_report --healthy"
expect_out "no cause costs more than" "the summary says the run is healthy"
run browser --dump-dom "file://$WORK/healthy.html"
expect_rc 0 "chromium --dump-dom (healthy)"
dom_has 'class="healthy-box"' "the healthy message instead of a table"
dom_count '<table class="findings">' 0 "no findings table"

summary
