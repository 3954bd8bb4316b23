#!/usr/bin/env bash
# Property-test a real node's HTTP API against its own /openapi.json with schemathesis (PyPI).
# Not part of CI (it needs Python and a network install); run by hand:
#   bash crates/node/scripts/schemathesis.sh [EXAMPLES]
# It builds the binary, starts a node on an ephemeral port in a temp data dir, runs every
# schemathesis check, and stops the node. A 5xx shows up as `not_a_server_error`.
set -euo pipefail
examples="${1:-300}"
root="$(cd "$(dirname "$0")/../../.." && pwd)"
venv="${SCHEMATHESIS_VENV:-/tmp/skillbox-schemathesis}"
[ -x "$venv/bin/schemathesis" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q schemathesis; }
cargo build -p skillbox --manifest-path "$root/Cargo.toml"
bin="$root/target/debug/skillbox"
dir="$(mktemp -d)"
"$bin" --data-dir "$dir/node" init --api 127.0.0.1:0 >/dev/null
"$bin" --data-dir "$dir/node" node >"$dir/node.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -s "$dir/node/api.addr" ] && break; sleep 0.1; done
addr="$(cat "$dir/node/api.addr")"
token="$(cat "$dir/node/api.token")"
"$venv/bin/schemathesis" run "http://$addr/openapi.json" -H "Authorization: Bearer $token" -n "$examples" --checks all
