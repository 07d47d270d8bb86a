#!/usr/bin/env bash
# Builds what the `k8s` test tier runs (only for the tests) into build/k8s/bin:
# - kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes), the KubeRay operator
#   (ray-operator: go install names it after its package folder) and etcd (tools/k8s/etcd: why not Debian's),
#   from tools/k8s, in one `go install`, so the packages they share (client-go, apimachinery, grpc...) are
#   compiled once;
# - kwok, from tools/kwok (its own k8s.io release: see its tools.go);
# - the pulumi-kubernetes provider, from tools/pulumi-kubernetes (see its main.go).
# The Go module and build caches stay where `go env` puts them (outside the clone) and are reused: a no-op
# build takes seconds.
# Usage: tools/k8s/build.sh   (prints how long each part took)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$root/build/k8s/bin"
mkdir -p "$bin"
# -mod=readonly: go.sum is the pin; a module the proxy cannot serve fails here with go's own error.
export GOFLAGS=-mod=readonly GOBIN="$bin"
version() { go list -m -f '{{.Version}}' "$1"; }
took() { echo "$1 built in $(( $(date +%s) - $2 )) s"; }

cd "$here"
start=$(date +%s)
release=$(version k8s.io/kubernetes)  # v1.35.4
minor=${release#v1.}; minor=${minor%%.*}
# The staging modules must be the release's own (tools/k8s/replaces.py writes their replaces).
if [ "$(version k8s.io/api)" != "v0.${release#v1.}" ]; then
  echo "tools/k8s/go.mod: k8s.io/api $(version k8s.io/api) is not k8s.io/kubernetes $release's staging tag:" \
       "run venv/bin/python -m tools.k8s.replaces" >&2
  exit 1
fi
# The version the API server reports (/version) and its clients check, as hack/lib/version.sh stamps it.
ldflags="-s -w"
for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $v.gitVersion=$release -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
done
go install -ldflags "$ldflags" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  github.com/ray-project/kuberay/ray-operator \
  ./etcd
took "Kubernetes $release, etcd $(version go.etcd.io/etcd/server/v3) and KubeRay $(version github.com/ray-project/kuberay/ray-operator)" "$start"
share="$root/build/k8s/share"
mkdir -p "$share/kuberay-crds"
# The operator's own CRDs (it watches RayCluster, RayJob and RayService), unmodified.
install -m 0644 "$(go list -m -f '{{.Dir}}' github.com/ray-project/kuberay/ray-operator)"/config/crd/bases/*.yaml \
  "$share/kuberay-crds/"

cd "$here/../kwok"
start=$(date +%s)
go install -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok
took "kwok $(version sigs.k8s.io/kwok)" "$start"
# kwok's upstream stages, unmodified (what kwokctl configures): nodes initialized and kept Ready with a
# lease; pods Running and Ready, a Job's pods completed, deleted pods removed.
stages="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  echo "---"
  cat "$stages/$f"
done > "$share/kwok-stages.yaml"

cd "$here/../pulumi-kubernetes"
start=$(date +%s)
module=github.com/pulumi/pulumi-kubernetes/provider/v4
# The module's pseudo-version is the commit of this release tag (pulumi/pulumi-kubernetes v4.25.0).
provider_version=4.25.0
dir=$(go list -m -f '{{.Dir}}' "$module")
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  go mod download "$module"
  dir=$(go list -m -f '{{.Dir}}' "$module")
fi
# upstream's go generate inputs, which main.go embeds (the module cache's copies are read-only)
install -m 0644 "$dir/cmd/pulumi-resource-kubernetes/schema.json" \
  "$dir/cmd/pulumi-resource-kubernetes/terraform-mapping.json" pulumi-resource-kubernetes/
go install -ldflags "-s -w -X $module/pkg/version.Version=$provider_version" ./pulumi-resource-kubernetes
took "pulumi-kubernetes provider $provider_version" "$start"
"$bin/kube-apiserver" --version
