//go:build tools

// Package tools pins the Pulumi CLI the test tiers run (tools/build_cli.sh builds it).
package tools

import (
	_ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
)
