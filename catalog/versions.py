"""Everything that can drift upstream, pinned in one place (a pin, never a floor)."""

# verl source tag staged into the bucket; the image below ships verl's dependencies, not verl.
VERL_VERSION = "v0.6.1"
VERL_REPO = "https://github.com/volcengine/verl.git"
# The image that verl's v0.6 docs build from; override with `image` when you pin a digest.
VERL_IMAGE = "verlai/verl:vllm011.latest"
# Ray in VERL_IMAGE (vLLM 0.11 needs ray>=2.48): KubeRay's rayVersion; override with `rayVersion`.
RAY_VERSION = "2.49.2"
# container-engine-accelerators revision that holds the NCCL RDMA installer manifests: master of
# 2026-06-11, gIB plugin v1.1.1 in both installers. It is after bdd28b0f (2025-07-15), which removed the
# privileged `alpine:latest` init container that Autopilot's allow-list of privileged DaemonSets rejects.
GIB_INSTALLER_REVISION = "992db81257553607f1477945f1b3219632991829"
