# Sourced by the remote benchmarks: starts a SeaweedFS server with S3 on free loopback ports,
# its data under $1, and exports AWS_ENDPOINT_URL (and credentials; the server checks none).
# s3curl signs requests as the benches' curl uploads need; stop_seaweedfs ends the server.
# usage: source bench/seaweedfs.sh; start_seaweedfs WORKDIR [WEED]; ...; stop_seaweedfs
start_seaweedfs() {
  local dir=$1 weed=${2:-${WEED:-.venv/bin/weed}} ports
  ports=$(python3 - <<'PY'
import socket
out = []
while len(out) < 4:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    if p + 10000 > 65535 or p in out: continue
    try:
        with socket.socket() as s: s.bind(("127.0.0.1", p + 10000))
    except OSError: continue
    out.append(p)
print(*out)
PY
  )
  local mp vp fp sp
  read -r mp vp fp sp <<<"$ports"
  export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_ENDPOINT_URL=http://127.0.0.1:$sp
  mkdir -p "$dir/data"
  "$weed" server -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.port="$mp" \
    -volume.port="$vp" -filer.port="$fp" -s3 -s3.port="$sp" -volume.max=100 \
    -master.volumeSizeLimitMB=64 -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false \
    >"$dir/weed.log" 2>&1 &
  WEED_PID=$!
  disown "$WEED_PID"  # no "Killed" notice from the clean-up
}
stop_seaweedfs() {
  [[ -n ${WEED_PID:-} ]] || return 0
  kill "$WEED_PID" 2>/dev/null || true
  sleep 2
  kill -9 "$WEED_PID" 2>/dev/null || true
}
s3curl() { curl -sSf --aws-sigv4 aws:amz:us-east-1:s3 -u bench:bench "$@"; }
# The S3 port answers before the filer behind it is ready: retry the bucket creation.
make_bucket() {
  for _ in $(seq 120); do s3curl -X PUT "$AWS_ENDPOINT_URL/$1" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "SeaweedFS did not create bucket $1 (see its log)" >&2
  return 1
}
