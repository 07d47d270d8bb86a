#!/usr/bin/env bash
# Builds the Pulumi CLI the test tiers run (only for the tests: users install the CLI the usual way) into
# build/pulumi-cli/bin, with the Python dynamic-provider plugin beside it, where the CLI looks for bundled
# plugins. The Go module and build caches stay where `go env` puts them (outside the clone) and are reused.
# Usage: tools/pulumi-cli/build.sh   (prints how long it took; a no-op build takes seconds)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$root/build/pulumi-cli/bin"
mkdir -p "$bin"
cd "$here"
start=$(date +%s)
# go.mod's `go` line: an older Go refuses the module (with GOTOOLCHAIN=local it cannot fetch a newer one).
need=$(sed -n 's/^go //p' go.mod)
have=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
  echo "tools/pulumi-cli: Go $need or newer is needed, this machine has $have" >&2
  exit 1
fi
version=$(go list -m -f '{{.Version}}' github.com/pulumi/pulumi/pkg/v3)
sdk=$(go list -m -f '{{.Version}}' github.com/pulumi/pulumi/sdk/v3)
# The CLI and the SDK module it is linked with come from one release.
if [ "$version" != "$sdk" ]; then
  echo "tools/pulumi-cli/go.mod: pkg/v3 $version and sdk/v3 $sdk must be the same release" >&2
  exit 1
fi
# -mod=readonly: go.sum is the pin; a module the proxy cannot serve fails here with go's own error.
GOFLAGS=-mod=readonly GOBIN="$bin" go install \
  -ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$version" \
  github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
# The dynamic-provider plugin the engine launches for Python dynamic resources: a shell script of the SDK
# module (python/dist), found next to the pulumi binary.
dist="$(go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)/python/dist"
install -m 0755 "$dist/pulumi-resource-pulumi-python" "$bin/pulumi-resource-pulumi-python"
PULUMI_SKIP_UPDATE_CHECK=true PULUMI_HOME="$root/build/pulumi-cli/home" "$bin/pulumi" version >/dev/null
echo "pulumi CLI $version built in $(( $(date +%s) - start )) s: $bin"
