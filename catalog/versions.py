"""Everything that can drift upstream, pinned in one place (a pin, never a floor)."""

# verl source tag staged into the bucket; the image below ships verl's dependencies, not verl.
VERL_VERSION = "v0.6.1"
VERL_REPO = "https://github.com/volcengine/verl.git"
# The image that verl's v0.6 docs build from; override with `image` when you pin a digest.
VERL_IMAGE = "verlai/verl:vllm011.latest"
# Ray in VERL_IMAGE (vLLM 0.11 needs ray>=2.48): KubeRay's rayVersion; override with `rayVersion`.
RAY_VERSION = "2.49.2"
# container-engine-accelerators revision that holds the NCCL RDMA installer manifests.
GIB_INSTALLER_REVISION = "2c776f7e9656a2b6476f19938b738b4186000ce3"
