#!/usr/bin/env bash
# Writes the two Pods that scripts/containers/podman-scenario.sh plays with `podman kube play` (issue #28, section 2):
#   DIR/daemon-pod.yaml   deploy/kubernetes/daemonset.yaml's pod template as a Pod (podman 4.3 plays no DaemonSet),
#                         with the image localhost/engram-host:test and the checkpoint's hostPath set to MODEL
#   DIR/engine.yaml       deploy/kubernetes/engine-example.yaml with the image localhost/engram-engine:test
# and prints what differs from the manifests (diff). Nothing else changes: the probes, the security context, the
# volumes and the ConfigMap (played with --configmap) are the manifests' own. scripts/ci/deploy-check.sh validates
# both files as it validates deploy/kubernetes/, so that a change to the manifests that breaks this derivation fails
# CI without booting the guest.
#
#   scripts/containers/kube-pods.sh DIR [MODEL]     (MODEL default: /var/cache/engram-containers/model-small)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: scripts/containers/kube-pods.sh DIR [MODEL]" >&2; exit 2; }
dir=$1 model=${2:-/var/cache/engram-containers/model-small}
mkdir -p "$dir"
template() { awk '/^  template:/{t=1; next} t && /^    spec:/{s=1} t && s {sub(/^    /, ""); print}' "$ROOT/deploy/kubernetes/daemonset.yaml"; }
grep -q 'image: registry.example.com/engram-host:0.1.0' "$ROOT/deploy/kubernetes/daemonset.yaml" \
  && grep -q 'path: /data/engram' "$ROOT/deploy/kubernetes/daemonset.yaml" \
  && grep -q 'image: registry.example.com/engram-engine:latest' "$ROOT/deploy/kubernetes/engine-example.yaml" \
  || { echo "kube-pods.sh: the manifests' image or checkpoint path changed: update the substitutions here" >&2; exit 1; }
{ printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: engram-host\n  namespace: engram-host\n  labels:\n    app.kubernetes.io/name: engram-host\n'
  template
} | sed -e "s|image: registry.example.com/engram-host:0.1.0|image: localhost/engram-host:test|" \
        -e "s|path: /data/engram|path: $model|" > "$dir/daemon-pod.yaml"
sed -e "s|image: registry.example.com/engram-engine:latest|image: localhost/engram-engine:test|" \
  "$ROOT/deploy/kubernetes/engine-example.yaml" > "$dir/engine.yaml"
diff <(template) <(tail -n +8 "$dir/daemon-pod.yaml") | sed 's/^/changed in the template: /' || true
diff "$ROOT/deploy/kubernetes/engine-example.yaml" "$dir/engine.yaml" | sed 's/^/changed in engine-example.yaml: /' || true
