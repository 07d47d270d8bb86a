//go:build tools

// Package tools pins the control plane the k8s test tier runs (tools/k8s/build.sh builds it).
package tools

import (
	_ "github.com/ray-project/kuberay/ray-operator"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
