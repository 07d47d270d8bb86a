"""TrainingStorage: the training bucket, the pods' identity on it, the HF token secret, the GCS FUSE PV/PVC.

The bucket holds verl's source, the model weights, the dataset and the checkpoints; every pod mounts
it at `stacks.paths.MOUNT` through a static GCS FUSE PersistentVolume. Pods reach it as the
Kubernetes service account, bound directly on the bucket with a Workload Identity principal (no
Google service account). `gcsfuse_pod_annotations` gives what a pod mounting the PVC needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
import pulumi_random as random

CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
# Static provisioning: the class only pairs the PV with its PVC, so it must not name a real
# StorageClass (a provisioner would otherwise try to create a volume for the claim).
STORAGE_CLASS = "gcsfuse-static"
BUCKET_ROLE = "roles/storage.objectUser"
# The tutorial's options with upstream's corrections (GoogleCloudPlatform/gcsfuse samples/gke-csi-yaml/gpu):
# metadata ttl -1 (0 would make the prefetch on mount pointless); no implicit-dirs, which a
# hierarchical-namespace bucket does not need (its folders are real objects).
MOUNT_OPTIONS = (
    "metadata-cache:negative-ttl-secs:0",
    "metadata-cache:ttl-secs:-1",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-cache:max-size-mb:-1",
    "file-cache:cache-file-for-range-read:true",
    "file-cache:enable-parallel-downloads:true",
    "read_ahead_kb=1024",
    "write:enable-streaming-writes:true",
    "write:global-max-blocks:200000",
)
VOLUME_ATTRIBUTES = {
    # Skip the driver's bucket probe before each mount: faster mounts; access comes from the KSA binding.
    "skipCSIBucketAccessCheck": "true",
    "gcsfuseMetadataPrefetchOnMount": "true",
}
SIDECAR_ANNOTATION = "gke-gcsfuse/volumes"
_UNLIMITED = "0"  # "no limit" for the sidecar annotations; accepted on Standard only

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_SUFFIX_BYTES = 4  # 8 hex characters after "<prefix>-"
_MAX_BUCKET_PREFIX = 63 - 1 - 2 * _SUFFIX_BYTES
_RESERVED_NAMESPACES = ("kube-", "gke-", "gmp-")


@dataclass(frozen=True)
class SidecarResources:
    """GCS FUSE sidecar requests (= limits) for Autopilot, which rejects the "0" = unlimited form."""

    cpu: float
    memory_gib: float
    ephemeral_storage_gib: float

    @property
    def cpu_quantity(self) -> str:
        millis = round(self.cpu * 1000)
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"

    @property
    def memory_quantity(self) -> str:
        return _gib_quantity(self.memory_gib)

    @property
    def ephemeral_storage_quantity(self) -> str:
        return _gib_quantity(self.ephemeral_storage_gib)


def _gib_quantity(gib: float) -> str:
    mib = round(gib * 1024)
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def gcsfuse_pod_annotations(autopilot: bool, sidecar: SidecarResources) -> dict[str, str]:
    """Annotations for a pod that mounts the bucket PVC.

    The sidecar's default 5Gi ephemeral-storage limit is added to the pod's total; with an unlimited
    file cache (kept in the sidecar's default emptyDir `gke-gcsfuse-cache` on the node's ephemeral
    storage) that gets the pod evicted. On Standard all sidecar limits are lifted ("0"), so the cache
    is bounded by the workload container's own ephemeral-storage limit, and the metadata-prefetch
    container is unthrottled too (annotation honoured from GKE 1.32.3-gke.1717000, ignored before).
    Autopilot rejects "0": there the sidecar gets `sidecar` as requests = limits, counted in the pod.
    """
    if not autopilot:
        return {
            SIDECAR_ANNOTATION: "true",
            "gke-gcsfuse/cpu-limit": _UNLIMITED,
            "gke-gcsfuse/memory-limit": _UNLIMITED,
            "gke-gcsfuse/ephemeral-storage-limit": _UNLIMITED,
            "gke-gcsfuse/metadata-prefetch-cpu-limit": _UNLIMITED,
            "gke-gcsfuse/metadata-prefetch-memory-limit": _UNLIMITED,
        }
    return {
        SIDECAR_ANNOTATION: "true",
        "gke-gcsfuse/cpu-limit": sidecar.cpu_quantity,
        "gke-gcsfuse/memory-limit": sidecar.memory_quantity,
        "gke-gcsfuse/ephemeral-storage-limit": sidecar.ephemeral_storage_quantity,
    }


def workload_identity_principal(project_number: str, project_id: str, namespace: str, ksa: str) -> str:
    """The IAM principal of a Kubernetes service account under Workload Identity Federation for GKE."""
    return (f"principal://iam.googleapis.com/projects/{project_number}/locations/global/"
            f"workloadIdentityPools/{project_id}.svc.id.goog/subject/ns/{namespace}/sa/{ksa}")


@dataclass
class TrainingStorageArgs:
    provider: pulumi.ProviderResource  # the cluster's Kubernetes provider
    project_id: str
    project_number: pulumi.Input[str]  # gcp.organizations.get_project_output().number
    location: str  # bucket location (region or multi-region)
    bucket_prefix: str  # bucket name = "<bucket_prefix>-<8 hex>"
    namespace: str  # created unless "default"
    ksa_name: str = "verl"
    hf_token: pulumi.Output[str] | None = None  # secret; no Secret object without it
    # False: `pulumi destroy` leaves the bucket (weights, checkpoints) in place and forgets it.
    # True: destroy deletes it with all its objects. Takes effect on the `pulumi up` after a change.
    delete_on_destroy: bool = False
    pv_name: str = "training-bucket-pv"
    pvc_name: str = "training-bucket-pvc"
    capacity_gib: int = 768  # meaningless to GCS FUSE; PV and PVC just have to agree
    hf_secret_name: str = "hf-secret"
    hf_secret_key: str = "hf_api_token"

    def validate(self) -> None:
        problems: list[str] = []

        def bad(field_name: str, allowed: str) -> None:
            problems.append(f"TrainingStorageArgs.{field_name} = {getattr(self, field_name)!r}: {allowed}")

        if not isinstance(self.provider, pulumi.ProviderResource):
            bad("provider", "must be a pulumi_kubernetes.Provider")
        if not _PROJECT_ID.match(str(self.project_id)):
            bad("project_id", "must be a project id (6-30 lowercase letters, digits, hyphens)")
        if not self.location:
            bad("location", "must be a Cloud Storage location such as us-central1")
        prefix = str(self.bucket_prefix)
        if not (_DNS_LABEL.match(prefix) and len(prefix) <= _MAX_BUCKET_PREFIX):
            bad("bucket_prefix", f"must be 1-{_MAX_BUCKET_PREFIX} lowercase letters, digits or hyphens, "
                "starting and ending with a letter or digit")
        elif prefix.startswith("goog") or "google" in prefix:
            bad("bucket_prefix", "must not start with 'goog' or contain 'google' (Cloud Storage rules)")
        ns = str(self.namespace)
        if not (_DNS_LABEL.match(ns) and len(ns) <= 63):
            bad("namespace", "must be a DNS label: <= 63 lowercase letters, digits, hyphens")
        elif ns.startswith(_RESERVED_NAMESPACES):
            bad("namespace", f"must not start with {', '.join(_RESERVED_NAMESPACES)} (reserved)")
        if not (_DNS_LABEL.match(str(self.ksa_name)) and len(self.ksa_name) <= 63):
            bad("ksa_name", "must be a DNS label: <= 63 lowercase letters, digits, hyphens")
        for field_name in ("pv_name", "pvc_name", "hf_secret_name"):
            value = str(getattr(self, field_name))
            if not (_DNS_SUBDOMAIN.match(value) and len(value) <= 253):
                bad(field_name, "must be a DNS subdomain (lowercase letters, digits, '-', '.')")
        if not _SECRET_KEY.match(str(self.hf_secret_key)):
            bad("hf_secret_key", "must consist of letters, digits, '-', '_' or '.'")
        if not isinstance(self.capacity_gib, int) or self.capacity_gib < 1:
            bad("capacity_gib", "must be an integer >= 1")
        if self.hf_token is not None and not isinstance(self.hf_token, pulumi.Output):
            # A plain string has already been through non-secret code paths: refuse it.
            problems.append("TrainingStorageArgs.hf_token = <plain value>: must be a secret Output "
                            "(pulumi.Config().get_secret('hfToken')) or None")
        if problems:
            raise ValueError("invalid TrainingStorage arguments:\n  - " + "\n  - ".join(problems))


class TrainingStorage(pulumi.ComponentResource):
    bucket: gcp.storage.Bucket
    bucket_name: pulumi.Output[str]
    namespace: pulumi.Output[str]  # resolves once the Namespace exists
    ksa_name: pulumi.Output[str]  # resolves once the service account exists
    pvc_name: pulumi.Output[str]  # resolves once the claim exists (and is bound to its PV)
    hf_secret_name: pulumi.Output[str] | None
    hf_secret_key: str
    bucket_access: gcp.storage.BucketIAMMember
    resources: list[pulumi.Resource]  # what pods mounting the bucket must wait for (depends_on)

    def __init__(self, name: str, args: TrainingStorageArgs, opts: pulumi.ResourceOptions | None = None):
        args.validate()
        super().__init__("verl-gke:storage:TrainingStorage", name, None, opts)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)

        suffix = random.RandomId(f"{name}-bucket-suffix", byte_length=_SUFFIX_BYTES,
                                 opts=pulumi.ResourceOptions(parent=self))
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=pulumi.Output.concat(args.bucket_prefix, "-", suffix.hex),
            project=args.project_id,
            location=args.location,
            uniform_bucket_level_access=True,  # required by the hierarchical namespace
            hierarchical_namespace=gcp.storage.BucketHierarchicalNamespaceArgs(enabled=True),
            public_access_prevention="enforced",
            force_destroy=args.delete_on_destroy,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=not args.delete_on_destroy))
        self.bucket_name = self.bucket.name

        created: list[pulumi.Resource] = []
        if args.namespace == "default":
            self.namespace = pulumi.Output.from_input(args.namespace)
        else:
            namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata={"name": args.namespace},
                                              opts=k8s_opts)
            self.namespace = namespace.metadata.name
            created.append(namespace)

        ksa = k8s.core.v1.ServiceAccount(
            f"{name}-ksa", metadata={"name": args.ksa_name, "namespace": self.namespace}, opts=k8s_opts)
        self.ksa_name = ksa.metadata.name
        member = pulumi.Output.all(args.project_number, args.project_id, self.namespace, self.ksa_name).apply(
            lambda a: workload_identity_principal(*a))
        self.bucket_access = gcp.storage.BucketIAMMember(
            f"{name}-bucket-access", bucket=self.bucket.name, role=BUCKET_ROLE, member=member,
            opts=pulumi.ResourceOptions(parent=self))

        self.hf_secret_key = args.hf_secret_key
        self.hf_secret_name = None
        if args.hf_token is not None:
            secret = k8s.core.v1.Secret(
                f"{name}-hf-token",
                metadata={"name": args.hf_secret_name, "namespace": self.namespace},
                type="Opaque",
                string_data={args.hf_secret_key: pulumi.Output.secret(args.hf_token)},
                opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(
                    additional_secret_outputs=["data", "stringData"])))
            self.hf_secret_name = secret.metadata.name

        pv = k8s.core.v1.PersistentVolume(
            f"{name}-pv",
            metadata={"name": args.pv_name},
            spec=k8s.core.v1.PersistentVolumeSpecArgs(
                access_modes=["ReadWriteMany"],
                capacity={"storage": f"{args.capacity_gib}Gi"},
                # Deleting the claim must never touch the bucket's contents.
                persistent_volume_reclaim_policy="Retain",
                storage_class_name=STORAGE_CLASS,
                # Reserved for our claim: no other claim can bind this volume.
                claim_ref=k8s.core.v1.ObjectReferenceArgs(namespace=self.namespace, name=args.pvc_name),
                mount_options=list(MOUNT_OPTIONS),
                csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                    driver=CSI_DRIVER, volume_handle=self.bucket.name,
                    volume_attributes=dict(VOLUME_ATTRIBUTES)),
            ),
            opts=k8s_opts)
        pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-pvc",
            metadata={"name": args.pvc_name, "namespace": self.namespace},
            spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadWriteMany"],
                resources=k8s.core.v1.VolumeResourceRequirementsArgs(
                    requests={"storage": f"{args.capacity_gib}Gi"}),
                storage_class_name=STORAGE_CLASS,
                volume_name=pv.metadata.name,  # binds to our PV only, after it exists
            ),
            opts=k8s_opts)
        self.pvc_name = pvc.metadata.name
        # The sidecar webhook reads the PV when a pod is admitted, and the mount needs the binding.
        self.resources = [*created, ksa, self.bucket_access, pv, pvc]
        self.register_outputs({
            "bucket_name": self.bucket_name, "namespace": self.namespace, "ksa_name": self.ksa_name,
            "pvc_name": self.pvc_name, "hf_secret_name": self.hf_secret_name,
        })
