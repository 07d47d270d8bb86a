"""TrainingStorage: the training bucket, the pods' identity on it, the token secrets, the GCS FUSE PVs/PVCs.

The bucket holds verl's source, the model weights, the dataset and the checkpoints. It is mounted
through four static GCS FUSE PersistentVolumes, one per kind of mount (catalog.gcsfuse): a writer for
staging (no cache, short TTL), a reader for training (long TTL, prefetch, bounded file cache), the
GPU workers' checkpoints and the head's checkpoints (`only-dir=checkpoints`, short TTL, no file
cache). A pod's two bucket PVs carry distinct volume handles (catalog.gcsfuse.volume_handle). Soft delete is off by
default. Pods reach it as the Kubernetes service account, bound directly on the bucket with a
Workload Identity principal (no Google service account); `catalog.gcsfuse.pod_annotations` gives
what a pod mounting a PVC needs. Pass the cluster's Kubernetes provider in `opts`
(`ResourceOptions(provider=...)`); depend on the component itself to wait until the claims are
bound and the identity can read the bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
import pulumi_random as random

from catalog import naming
from catalog.gcsfuse import (
    CHECKPOINT_VOLUME_ATTRIBUTES,
    CSI_DRIVER,
    STAGING_PARALLEL_FILES,
    VOLUME_ATTRIBUTES,
    WRITER_VOLUME_ATTRIBUTES,
    checkpoint_mount_options,
    checkpoint_open_files,
    head_checkpoint_mount_options,
    reader_mount_options,
    volume_handle,
    writer_mount_options,
)
from catalog.problems import Problem
from components.problems import require
from components.stack_guard import BucketKeeper

# Static provisioning: the class only pairs the PV with its PVC, so it must not name a real
# StorageClass (a provisioner would otherwise try to create a volume for the claim).
STORAGE_CLASS = "gcsfuse-static"
BUCKET_ROLE = "roles/storage.objectUser"


def workload_identity_principal(project_number: str, project_id: str, namespace: str, ksa: str) -> str:
    """The IAM principal of a Kubernetes service account under Workload Identity Federation for GKE."""
    return (f"principal://iam.googleapis.com/projects/{project_number}/locations/global/"
            f"workloadIdentityPools/{project_id}.svc.id.goog/subject/ns/{namespace}/sa/{ksa}")


@dataclass
class TrainingStorageArgs:
    project_id: str
    project_number: pulumi.Input[str]  # gcp.organizations.get_project_output().number
    location: str  # bucket location (region or multi-region)
    bucket_prefix: str  # bucket name = "<bucket_prefix>-<8 hex>"
    namespace: str  # created unless "default"
    ksa_name: str = "verl"
    hf_token: pulumi.Output[str] | None = None  # secret; no Secret object without it
    wandb_api_key: pulumi.Output[str] | None = None  # secret; no Secret object without it
    # False: `pulumi destroy` leaves the bucket (weights, checkpoints) in place and forgets it.
    # True: destroy deletes it with all its objects (the stack's own bucket only). Takes effect on the `pulumi up`
    # after a change.
    delete_on_destroy: bool = False
    # An existing bucket to adopt (imported) instead of creating `<bucket_prefix>-<8 hex>`.
    existing_bucket: str = ""
    adopt_key: str = "bucketName"  # the config key that names a bucket to adopt, for destroy's message
    # Three PVs on the one bucket, one per kind of job (catalog.gcsfuse): the reader (training),
    # the writer (staging; the head reads verl's source through it) and the checkpoints.
    pv_name: str = "training-bucket-pv"
    pvc_name: str = "training-bucket-pvc"
    writer_pv_name: str = "training-bucket-writer-pv"
    writer_pvc_name: str = "training-bucket-writer-pvc"
    # Named anew with the `<bucket>:ckpt` handle (a PV's source is immutable: the old one is replaced,
    # and a new name lets the replacement be created before the old PV is deleted).
    checkpoint_pv_name: str = "training-bucket-checkpoints-pv"
    checkpoint_pvc_name: str = "training-bucket-checkpoints-pvc"
    head_checkpoint_pv_name: str = "training-bucket-head-ckpt-pv"
    head_checkpoint_pvc_name: str = "training-bucket-head-ckpt-pvc"
    file_cache_mib: int = 16 * 1024  # bound of each reading mount's file cache (per pod)
    staging_open_files: int = STAGING_PARALLEL_FILES + 4  # downloads + marker/temp files
    # The ranks of one GPU worker pod (its GPUs): each streams its shard to the checkpoint mount at once.
    checkpoint_ranks_per_pod: int = 8
    # Soft-deleted objects are billed for this many days (GCS default 7): 0 turns soft delete off,
    # so a rotated ~393 GB checkpoint stops costing at once. Allowed: 0 or 7..90
    # (terraform-provider-google storage_bucket soft_delete_policy.retention_duration_seconds).
    soft_delete_days: int = 0
    capacity_gib: int = 768  # meaningless to GCS FUSE; PV and PVC just have to agree
    hf_secret_name: str = "hf-secret"
    hf_secret_key: str = "hf_api_token"
    wandb_secret_name: str = "wandb-secret"
    wandb_secret_key: str = "api_key"

    SECRET_FIELDS = ("hf_token", "wandb_api_key")  # never shown in a problem

    def problems(self) -> list[Problem]:
        checks = {
            "project_id": naming.project_id_problem(self.project_id),
            "location": None if self.location else "must be a Cloud Storage location such as us-central1",
            "bucket_prefix": naming.bucket_prefix_problem(self.bucket_prefix),
            "existing_bucket": naming.bucket_name_problem(self.existing_bucket) if self.existing_bucket else None,
            # An adopted bucket is not the stack's: destroy forgets it (retain_on_delete), never deletes what is in it.
            "delete_on_destroy": ("must be False with existing_bucket: the stack did not create that bucket, and "
                                  "destroy would delete it with everything in it")
            if self.existing_bucket and self.delete_on_destroy else None,
            "namespace": naming.namespace_problem(self.namespace),
            "ksa_name": naming.dns_label_problem(self.ksa_name),
            **{f: naming.dns_subdomain_problem(getattr(self, f)) for f in (
                "pv_name", "pvc_name", "writer_pv_name", "writer_pvc_name", "checkpoint_pv_name",
                "checkpoint_pvc_name", "head_checkpoint_pv_name", "head_checkpoint_pvc_name")},
            "soft_delete_days": naming.soft_delete_days_problem(self.soft_delete_days),
            "file_cache_mib": None if isinstance(self.file_cache_mib, int) and self.file_cache_mib >= 1
            else "must be an integer >= 1",
            "hf_secret_name": naming.dns_subdomain_problem(self.hf_secret_name),
            "hf_secret_key": naming.secret_key_problem(self.hf_secret_key),
            "wandb_secret_name": naming.dns_subdomain_problem(self.wandb_secret_name),
            "wandb_secret_key": naming.secret_key_problem(self.wandb_secret_key),
            "capacity_gib": None if isinstance(self.capacity_gib, int) and self.capacity_gib >= 1
            else "must be an integer >= 1",
            "checkpoint_ranks_per_pod": None if isinstance(self.checkpoint_ranks_per_pod, int)
            and not isinstance(self.checkpoint_ranks_per_pod, bool) and self.checkpoint_ranks_per_pod >= 1
            else "must be an integer >= 1 (the GPUs of one worker pod)",
        }
        found = [Problem(k, why) for k, why in checks.items() if why]
        for field_name, key in (("hf_token", "hfToken"), ("wandb_api_key", "wandbApiKey")):
            if getattr(self, field_name) is not None and not isinstance(getattr(self, field_name), pulumi.Output):
                # A plain string has already been through non-secret code paths: refuse it.
                found.append(Problem(field_name, f"a plain value: must be a secret Output "
                                          f"(pulumi.Config().get_secret('{key}')) or None"))
        if self.wandb_secret_name == self.hf_secret_name:
            found.append(Problem("wandb_secret_name", "must differ from hf_secret_name"))
        return found


class TrainingStorage(pulumi.ComponentResource):
    bucket: gcp.storage.Bucket
    bucket_name: pulumi.Output[str]
    namespace: pulumi.Output[str]  # resolves once the Namespace exists
    ksa_name: pulumi.Output[str]  # resolves once the service account exists
    pvc_name: pulumi.Output[str]  # the reader claim; resolves once the claim exists (bound to its PV)
    writer_pvc_name: pulumi.Output[str]
    checkpoint_pvc_name: pulumi.Output[str]
    head_checkpoint_pvc_name: pulumi.Output[str]
    hf_secret_name: pulumi.Output[str] | None
    hf_secret_key: str
    wandb_secret_name: pulumi.Output[str] | None
    wandb_secret_key: str
    bucket_access: gcp.storage.BucketIAMMember

    def __init__(self, name: str, args: TrainingStorageArgs, opts: pulumi.ResourceOptions | None = None):
        require("TrainingStorage", args)
        super().__init__("verl-gke:storage:TrainingStorage", name, None, opts)
        k8s_opts = pulumi.ResourceOptions(parent=self)

        retain = pulumi.ResourceOptions(parent=self, retain_on_delete=not args.delete_on_destroy)
        if args.existing_bucket:
            # Pulumi has no create-or-adopt: the bucket is imported. The engine imports only when the state has
            # no bucket here or one with another id (pulumi/pulumi pkg/resource/deploy/step_generator.go
            # `isImport`, commit 1b5949891b3c): naming the stack's own bucket is a no-op. An absent bucket
            # fails the preview ("resource '<name>' does not exist", step.go); settings that differ are
            # updated in place by CLI >= 3.174.0 (pulumi/pulumi#19339, commit 961156bb35: import, then an
            # ordinary diff; an older CLI fails "inputs to import do not match"); a replace of an imported
            # resource is refused by the engine (step_generator.go "previously-imported resources").
            bucket_name: pulumi.Input[str] = args.existing_bucket
            retain = pulumi.ResourceOptions.merge(retain, pulumi.ResourceOptions(import_=args.existing_bucket))
        else:
            # The random suffix is in the state: an existing stack keeps its bucket name.
            suffix = random.RandomId(f"{name}-bucket-suffix", byte_length=naming.BUCKET_SUFFIX_BYTES,
                                     opts=pulumi.ResourceOptions(parent=self))
            bucket_name = pulumi.Output.concat(args.bucket_prefix, "-", suffix.hex)
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=bucket_name,
            project=args.project_id,
            location=args.location,
            uniform_bucket_level_access=True,  # required by the hierarchical namespace
            hierarchical_namespace=gcp.storage.BucketHierarchicalNamespaceArgs(enabled=True),
            public_access_prevention="enforced",
            soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(
                retention_duration_seconds=args.soft_delete_days * 86400),
            force_destroy=args.delete_on_destroy,
            opts=retain)
        self.bucket_name = self.bucket.name
        # `pulumi destroy` prints the kept bucket's name and how to adopt it next time.
        BucketKeeper(f"{name}-bucket-keeper", self.bucket.name, kept=not args.delete_on_destroy,
                     adopt_key=args.adopt_key, opts=pulumi.ResourceOptions(parent=self))

        if args.namespace == "default":
            self.namespace = pulumi.Output.from_input(args.namespace)
        else:
            namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata={"name": args.namespace},
                                              opts=k8s_opts)
            self.namespace = namespace.metadata.name

        ksa = k8s.core.v1.ServiceAccount(
            f"{name}-ksa", metadata={"name": args.ksa_name, "namespace": self.namespace}, opts=k8s_opts)
        self.ksa_name = ksa.metadata.name
        member = pulumi.Output.all(args.project_number, args.project_id, self.namespace, self.ksa_name).apply(
            lambda a: workload_identity_principal(*a))
        self.bucket_access = gcp.storage.BucketIAMMember(
            f"{name}-bucket-access", bucket=self.bucket.name, role=BUCKET_ROLE, member=member,
            opts=pulumi.ResourceOptions(parent=self))

        self.hf_secret_key = args.hf_secret_key
        self.hf_secret_name = self._secret(f"{name}-hf-token", args.hf_secret_name, args.hf_secret_key,
                                           args.hf_token, k8s_opts)
        self.wandb_secret_key = args.wandb_secret_key
        self.wandb_secret_name = self._secret(f"{name}-wandb-key", args.wandb_secret_name,
                                              args.wandb_secret_key, args.wandb_api_key, k8s_opts)

        def claim(role: str, pv_name: str, pvc_name: str, options: tuple[str, ...],
                  attributes: dict[str, str], handle_role: str) -> pulumi.Output[str]:
            pv = k8s.core.v1.PersistentVolume(
                f"{name}-{role}",
                metadata={"name": pv_name},
                spec=k8s.core.v1.PersistentVolumeSpecArgs(
                    access_modes=["ReadWriteMany"],
                    capacity={"storage": f"{args.capacity_gib}Gi"},
                    # Deleting the claim must never touch the bucket's contents.
                    persistent_volume_reclaim_policy="Retain",
                    storage_class_name=STORAGE_CLASS,
                    # Reserved for our claim: no other claim can bind this volume.
                    claim_ref=k8s.core.v1.ObjectReferenceArgs(namespace=self.namespace, name=pvc_name),
                    mount_options=list(options),
                    csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                        driver=CSI_DRIVER,
                        # Distinct per mount role: a pod's two PVs on one bucket must not share a handle.
                        volume_handle=self.bucket.name.apply(lambda b: volume_handle(b, handle_role)),
                        volume_attributes=dict(attributes)),
                ),
                opts=k8s_opts)
            pvc = k8s.core.v1.PersistentVolumeClaim(
                f"{name}-{role}c",
                metadata={"name": pvc_name, "namespace": self.namespace},
                spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                    access_modes=["ReadWriteMany"],
                    resources=k8s.core.v1.VolumeResourceRequirementsArgs(
                        requests={"storage": f"{args.capacity_gib}Gi"}),
                    storage_class_name=STORAGE_CLASS,
                    volume_name=pv.metadata.name,  # binds to our PV only, after it exists
                ),
                opts=k8s_opts)
            return pvc.metadata.name

        # "pv"/"pvc" keep the reader's URNs from before the split.
        self.pvc_name = claim("pv", args.pv_name, args.pvc_name, reader_mount_options(args.file_cache_mib),
                              VOLUME_ATTRIBUTES, "reader")
        self.writer_pvc_name = claim("writer-pv", args.writer_pv_name, args.writer_pvc_name,
                                     writer_mount_options(args.staging_open_files), WRITER_VOLUME_ATTRIBUTES,
                                     "writer")
        self.checkpoint_pvc_name = claim("ckpt-pv", args.checkpoint_pv_name, args.checkpoint_pvc_name,
                                         checkpoint_mount_options(checkpoint_open_files(args.checkpoint_ranks_per_pod)),
                                         CHECKPOINT_VOLUME_ATTRIBUTES, "checkpoints")
        self.head_checkpoint_pvc_name = claim(
            "head-ckpt-pv", args.head_checkpoint_pv_name, args.head_checkpoint_pvc_name,
            head_checkpoint_mount_options(), CHECKPOINT_VOLUME_ATTRIBUTES, "head-checkpoints")
        self.register_outputs({
            "bucket_name": self.bucket_name, "namespace": self.namespace, "ksa_name": self.ksa_name,
            "pvc_name": self.pvc_name, "writer_pvc_name": self.writer_pvc_name,
            "checkpoint_pvc_name": self.checkpoint_pvc_name,
            "head_checkpoint_pvc_name": self.head_checkpoint_pvc_name, "hf_secret_name": self.hf_secret_name,
            "wandb_secret_name": self.wandb_secret_name,
        })

    def _secret(self, resource_name: str, secret_name: str, key: str, value: pulumi.Output[str] | None,
                opts: pulumi.ResourceOptions) -> pulumi.Output[str] | None:
        """An Opaque Secret holding one token (None without a token); pods read it via secretKeyRef."""
        if value is None:
            return None
        secret = k8s.core.v1.Secret(
            resource_name,
            metadata={"name": secret_name, "namespace": self.namespace},
            type="Opaque",
            string_data={key: pulumi.Output.secret(value)},
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                additional_secret_outputs=["data", "stringData"])))
        return secret.metadata.name
