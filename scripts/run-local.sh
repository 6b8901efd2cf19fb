#!/usr/bin/env bash
# Start rdma-webhook locally on the shipped policies, with freshly generated dev certificates and
# the example cluster state (no API server needed), and print how to send it a pod once it
# answers /readyz (not before: the first start compiles nothing, but loading takes a moment).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8443}"
CERTS="${CERTS:-certs/dev}"
READY_TIMEOUT="${READY_TIMEOUT:-60}"
rm -rf "$CERTS"
rdma-webhook certs --service rdma-webhook --namespace rdma-webhook --dns localhost --ip 127.0.0.1 --out "$CERTS" >/dev/null

rdma-webhook serve --policies policies --tls-cert "$CERTS/tls.crt" --tls-key "$CERTS/tls.key" \
  --host 127.0.0.1 --port "$PORT" --workers 2 --cluster-state examples/cluster-state.yaml &
server=$!
# Ctrl-C or SIGTERM stop the server (it finishes in-flight requests); its exit status is ours.
stopping=0
trap 'stopping=1; kill -TERM "$server" 2>/dev/null || true' INT TERM

ready() {
  python3 - "$PORT" "$CERTS/ca.crt" <<'PY'
import ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[2])
try:
    with urllib.request.urlopen(f"https://localhost:{sys.argv[1]}/readyz", context=ctx, timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

deadline=$((SECONDS + READY_TIMEOUT))
until ready; do
  if ! kill -0 "$server" 2>/dev/null; then
    wait "$server" || status=$?
    echo "rdma-webhook exited before it was ready (status ${status:-0}); see the log above" >&2
    exit "${status:-1}"
  fi
  if (( SECONDS >= deadline )); then
    echo "rdma-webhook did not answer /readyz within ${READY_TIMEOUT}s; stopping it" >&2
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" || true
    exit 1
  fi
  sleep 0.2
done

cat <<MSG
rdma-webhook listening on https://localhost:$PORT (policies/: $(ls policies | tr '\n' ' '))
Namespaces and NetworkAttachmentDefinitions come from examples/cluster-state.yaml.

Send it a PyTorchJob worker pod from another shell:
  curl -s --cacert $CERTS/ca.crt -H 'Content-Type: application/json' \\
       --data-binary @examples/admission-review.json https://localhost:$PORT/mutate | python3 -m json.tool
Decode the patch:
  ... | python3 -c 'import sys,json,base64; print(base64.b64decode(json.load(sys.stdin)["response"]["patch"]).decode())'
Or see the same decision offline, for people:
  .venv/bin/rdma-webhook review --explain --policy erdma,sriov-roce --cluster-state examples/cluster-state.yaml examples/pods/*.yaml
Health and metrics:  curl -s --cacert $CERTS/ca.crt https://localhost:$PORT/readyz   (and /metrics)
Stop with Ctrl-C.

MSG
status=0
wait "$server" || status=$?
# a trapped signal interrupts the wait (status 128+n): wait again for the server's own exit status
if (( stopping )); then status=0; wait "$server" || status=$?; fi
exit "$status"
