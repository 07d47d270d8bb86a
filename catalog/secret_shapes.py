"""What a secret looks like in text that is about to become plain: a Hydra override, an entrypoint.

Two roads carry a secret into the job's entrypoint or logs without passing through a Kubernetes Secret:
- an OmegaConf resolver that reads the environment (`${oc.env:WANDB_API_KEY}`, the legacy `${env:...}`):
  verl resolves the config in its TaskRunner and prints it (volcengine/verl verl/trainer/main_ppo.py
  @b178a3cd5, TaskRunner.run: `pprint(OmegaConf.to_container(config, resolve=True))`), so the value
  lands in the job's logs and Cloud Logging;
  OmegaConf's grammar allows spaces around the resolver name (`${ oc.env : X}`), and `oc.decode` resolves
  the interpolations inside a string, so any resolver is refused, plain `${a.b}` node references are not;
- the credential itself typed as a value: a W&B API key (40 hex characters, what wandb.ai/authorize
  shows), a Hugging Face token (`hf_` and 30+ letters and digits), and other well-known token shapes.
"""

from __future__ import annotations

import re

# `${` then an optional space, a dotted resolver name, an optional space and `:` (OmegaConf's
# interpolation grammar: a resolver call; a node interpolation has no colon).
RESOLVER = re.compile(r"\$\{\s*([A-Za-z_][\w.]*)\s*:")
SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a Hugging Face token (hf_...)", re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")),
    ("a W&B API key (40 hex characters)", re.compile(r"(?<![0-9A-Fa-f])[0-9a-f]{40}(?![0-9A-Fa-f])")),
    ("a GitHub token (ghp_/gho_/ghs_...)", re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{30,}")),
    ("an AWS access key id (AKIA...)", re.compile(r"(?<![A-Z0-9])AKIA[0-9A-Z]{16}(?![A-Z0-9])")),
    ("a Google API key (AIza...)", re.compile(r"AIza[0-9A-Za-z_-]{35}")),
    ("a private key (-----BEGIN ... PRIVATE KEY)", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY")),
)


def resolver_problem(text: str) -> str | None:
    """Why an OmegaConf resolver call in `text` is refused, None when there is none."""
    m = RESOLVER.search(text)
    if not m:
        return None
    return (f"uses the resolver ${{{m[1]}:...}}: verl resolves and prints its whole config in the job's "
            "log, so an environment variable read this way (e.g. a key) ends up in plain text there; "
            "write the value itself (secrets go in `pulumi config set --secret`)")


def credential_problem(text: str) -> str | None:
    """Which credential `text` looks like, None when it looks like none."""
    for what, shape in SHAPES:
        if shape.search(text):
            return (f"carries what looks like {what}: the overrides become the job's entrypoint, shown "
                    "in plain text on the Ray dashboard; set keys with `pulumi config set --secret` "
                    "(hfToken, wandbApiKey)")
    return None
