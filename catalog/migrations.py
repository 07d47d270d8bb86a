"""Changes a live stack opts into (config key `migrations`); new stacks get them all at creation.

Each one would replace something, or restart every node under a running job, if Pulumi applied it to
a stack created before it existed. The program always asks for the new value; `ignore_changes` makes
Pulumi use it only when it creates the resource, unless the stack names the migration here. The
README ("Upgrading a live stack") says what each does to a live stack.
"""

from __future__ import annotations

# terraform-provider-google #20495 (open): changing private_cluster_config.enable_private_nodes plans
# a replacement of the cluster. New clusters are created private; a live one is switched out of band
# (`gcloud container clusters update --enable-private-nodes`, README) and then named here.
PRIVATE_CLUSTER = "private-cluster"
# Node pool network_config.enable_private_nodes updates in place (not ForceNew), but GKE recreates the
# pool's nodes to drop their external addresses: the Ray head and the workers go with them.
PRIVATE_NODES = "private-nodes"
# placement_policy is ForceNew on google_container_node_pool: dropping COMPACT replaces the GPU pool.
NO_COMPACT_PLACEMENT = "no-compact-placement"
# The primary VPC's MTU updates in place (terraform-provider-google #22956), but VMs pick up a new MTU
# only when they restart (VPC docs "Maximum transmission unit"): restart every node after it.
PRIMARY_MTU = "primary-mtu"

# The IP endpoint off (or limited to masterAuthorizedNetworks) and the Kubernetes provider moved to the DNS
# endpoint. Not in the same `up` that first records the provider's clusterIdentifier: pulumi-kubernetes
# replaces the provider, and with it every Kubernetes object, when the identifier is added while the
# active cluster's server changes (provider/pkg/provider/provider.go DiffConfig @94977969d: the
# identifier only suppresses replacement once it is the same on both sides).
DNS_ENDPOINT = "dns-endpoint"

MIGRATIONS: dict[str, str] = {
    DNS_ENDPOINT: "the IP endpoint off and the Kubernetes provider on the DNS endpoint (an `up` of its own "
                  "after this release's first `up`)",
    PRIVATE_CLUSTER: "the cluster-level private-nodes default (run the README's gcloud command first)",
    PRIVATE_NODES: "private CPU and GPU pools (GKE recreates their nodes: stop the job first)",
    NO_COMPACT_PLACEMENT: "no COMPACT placement on the GPU pool (replaces the pool)",
    PRIMARY_MTU: "MTU 8896 on the cluster VPC (restart the nodes afterwards)",
}
