// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3 etcdmain) at the release k8s.io/kubernetes
// requires, for the `k8s` test tier. Debian's etcd-server (3.4.23) predates the progress notifications the
// API server needs to serve watch-list streams (k8s.io/apiserver pkg/storage/feature: RequestWatchProgress
// wants etcd >= 3.4.31 or 3.5.13), which client-go 1.35+ asks for by default: every informer's watch then
// fails and falls back to relists with a backoff (seen: kwok made pods Running 6-40 s late). kwok imports
// k8s.io/apiserver, whose feature gate replaces client-go's, so KUBE_FEATURE_WatchListClient cannot turn
// that off there.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
