// Command pulumi-resource-kubernetes serves the real pulumi-kubernetes provider for the `k8s` test tier.
//
// Upstream's own main (provider/cmd/pulumi-resource-kubernetes) embeds schema-embed.json and
// terraform-mapping-embed.json, which its `go generate` step writes from the schema.json and
// terraform-mapping.json beside it; the module carries those two, not the generated files. build.sh
// copies them here from the module (they are not committed), and main does what generate.go does to them:
// the schema gets the provider's version, both are compacted.
package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"log"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema.json
var schema []byte

//go:embed terraform-mapping.json
var mapping []byte

func main() {
	var spec map[string]any
	if err := json.Unmarshal(schema, &spec); err != nil {
		log.Fatalf("cannot deserialize schema: %v", err)
	}
	spec["version"] = version.Version
	versioned, err := json.Marshal(spec)
	if err != nil {
		log.Fatalf("cannot reserialize schema: %v", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, mapping); err != nil {
		log.Fatalf("cannot deserialize terraform mapping: %v", err)
	}
	provider.Serve("kubernetes", version.Version, versioned, compact.Bytes())
}
