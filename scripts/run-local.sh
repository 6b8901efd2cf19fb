#!/usr/bin/env bash
# Start rdma-webhook locally on the shipped policies, with freshly generated dev certificates and
# the example cluster state (no API server needed), and print how to send it a pod.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8443}"
CERTS=certs/dev
rm -rf "$CERTS"
rdma-webhook certs --service rdma-webhook --namespace rdma-webhook --dns localhost --ip 127.0.0.1 --out "$CERTS" >/dev/null
cat <<MSG
rdma-webhook on https://localhost:$PORT (policies/: $(ls policies | tr '\n' ' '))
Namespaces and NetworkAttachmentDefinitions come from examples/cluster-state.yaml.

Send it a PyTorchJob worker pod from another shell:
  curl -s --cacert $CERTS/ca.crt -H 'Content-Type: application/json' \\
       --data-binary @examples/admission-review.json https://localhost:$PORT/mutate | python3 -m json.tool
Decode the patch:
  ... | python3 -c 'import sys,json,base64; print(base64.b64decode(json.load(sys.stdin)["response"]["patch"]).decode())'
Or see the same decision offline, for people:
  .venv/bin/rdma-webhook review --explain --cluster-state examples/cluster-state.yaml examples/pods/*.yaml
Health and metrics:  curl -s --cacert $CERTS/ca.crt https://localhost:$PORT/readyz   (and /metrics)
Stop with Ctrl-C.

MSG
exec rdma-webhook serve --policies policies --tls-cert "$CERTS/tls.crt" --tls-key "$CERTS/tls.key" \
  --host 127.0.0.1 --port "$PORT" --workers 2 --cluster-state examples/cluster-state.yaml
