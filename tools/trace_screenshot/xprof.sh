#!/bin/sh
# Profiles workload.py, serves the profile with TensorBoard's profile plugin
# (xprof) and saves a PNG of its trace viewer, unattended.
#
#   tools/trace_screenshot/xprof.sh OUT.png [ZOOM[,AT]]
#
# Run from the repository root after building. Needs xprof importable by
# python3 (pip install xprof, or PYTHONPATH pointing at a copy), Chromium and
# playwright-core on NODE_PATH (see README.md). ZOOM,AT go to
# render_xprof.js (default 3,0.1: the first steps). XPROF_PORT (default 8791)
# and XPROF_GRPC_PORT (default 50151) are the server's ports.
set -eu
out=$1
view=${2:-3,0.1}
port=${XPROF_PORT:-8791}
grpc_port=${XPROF_GRPC_PORT:-50151}
here=$(dirname "$0")
logdir=$(mktemp -d)
log="$logdir/xprof-server.log"

PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" python3 "$here/workload.py" "$logdir"
python3 -m xprof.server --logdir "$logdir" --port "$port" --grpc_port "$grpc_port" \
    >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT

tries=0
until python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
        "http://localhost:$port/data/plugin/profile/runs" 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 120 ] || ! kill -0 "$server" 2>/dev/null; then
        echo "the xprof server did not come up on port $port; its log:" >&2
        tail -20 "$log" >&2
        exit 1
    fi
    sleep 1
done
node "$here/render_xprof.js" "http://localhost:$port" "$out" "$view"
echo "$out (profile in $logdir)"
