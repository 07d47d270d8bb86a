//go:build tools

// Package tools pins kwok, the nodes without a kubelet of the k8s test tier (tools/k8s/build.sh builds it).
// A module of its own: kwok v0.8.0 is built against k8s.io v0.36 (v0.7.0, the last on v0.33, no longer
// compiles against v0.34's apimachinery), and it talks to the API server only through client-go.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
