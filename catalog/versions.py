"""Everything that can drift upstream, pinned in one place (a pin, never a floor)."""

# verl source tag staged into the bucket; the image below ships verl's dependencies, not verl.
VERL_VERSION = "v0.6.1"
VERL_REPO = "https://github.com/volcengine/verl.git"
# A fixed release tag, not a floating one: the vLLM 0.11 image verl v0.6.1's own CI runs
# (volcengine/verl@d62da495 .github/workflows/cpu_unit_tests.yml and the e2e vLLM workflows:
# verl-ci-cn-beijing.cr.volces.com/verlai/verl:vllm011.dev7, their mirror of Docker Hub's verlai/verl).
# `vllm011.latest` appears nowhere at that tag. Pin the bytes with `image: verlai/verl@sha256:...`.
VERL_IMAGE = "verlai/verl:vllm011.dev7"
VERL_IMAGE_VLLM = "0.11.0"  # the tag's vLLM (vllm011); verl v0.6.1 setup.py: vllm>=0.8.5,<=0.11.0
# Ray in VERL_IMAGE: vLLM 0.11 requires ray[cgraph]>=2.48.0 (vllm requirements/cuda.txt) and verl v0.6.1
# ray[default]>=2.41.0 (setup.py); KubeRay's rayVersion, checked against both (tests/test_image_and_bucket.py).
# The exact patch inside the image is not read here: override with `rayVersion` once you inspect it.
RAY_VERSION = "2.49.2"
RAY_FLOOR_FOR_VLLM = "2.48.0"
# container-engine-accelerators revision that holds the NCCL RDMA installer manifests: master of
# 2026-06-11, gIB plugin v1.1.1 in both installers. It is after bdd28b0f (2025-07-15), which removed the
# privileged `alpine:latest` init container that Autopilot's allow-list of privileged DaemonSets rejects.
GIB_INSTALLER_REVISION = "992db81257553607f1477945f1b3219632991829"
