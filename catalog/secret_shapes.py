"""What a secret looks like in text that is about to become plain: a config value, a Hydra override, an entrypoint.

Every non-secret config key refuses these shapes (stacks.keys.KIND_RULES); a refused value is never shown
(catalog.problems.shown).

Two roads carry a secret into the job's entrypoint or logs without passing through a Kubernetes Secret:
- an OmegaConf resolver that reads the environment (`${oc.env:WANDB_API_KEY}`, the legacy `${env:...}`):
  verl resolves the config in its TaskRunner and prints it (volcengine/verl verl/trainer/main_ppo.py
  @b178a3cd5, TaskRunner.run: `pprint(OmegaConf.to_container(config, resolve=True))`), so the value
  lands in the job's logs and Cloud Logging;
  OmegaConf's grammar allows spaces around the resolver name (`${ oc.env : X}`), and `oc.decode` resolves
  the interpolations inside a string, and a resolver's name may itself be interpolated (`${${k}:X}` with
  `+k=oc.env` in another override), so any resolver call is refused, plain `${a.b}` node references are not;
- the credential itself typed as a value: a W&B API key (40 hex characters, what wandb.ai/authorize
  shows), a Hugging Face token (`hf_` and 30+ letters and digits), and other well-known token shapes.
"""

from __future__ import annotations

import re

HF_TOKEN = "a Hugging Face token (hf_...)"
WANDB_KEY = "a W&B API key (40 hex characters)"
SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (HF_TOKEN, re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")),
    (WANDB_KEY, re.compile(r"(?<![0-9A-Fa-f])[0-9a-f]{40}(?![0-9A-Fa-f])")),
    ("a GitHub token (ghp_/gho_/ghs_...)", re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{30,}")),
    ("an AWS access key id (AKIA...)", re.compile(r"(?<![A-Z0-9])AKIA[0-9A-Z]{16}(?![A-Z0-9])")),
    ("a Google API key (AIza...)", re.compile(r"AIza[0-9A-Za-z_-]{35}")),
    ("a private key (-----BEGIN ... PRIVATE KEY)", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY")),
    # OpenAI's (sk-..., sk-proj-...) and Anthropic's (sk-ant-...) API keys; Google's OAuth access tokens
    # (ya29.); Slack's bot/user/app tokens (xoxb-, xoxp-, xapp-): shapes a reward or an eval often needs.
    ("an OpenAI or Anthropic API key (sk-...)", re.compile(r"(?<![A-Za-z0-9])sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}")),
    ("a Google OAuth access token (ya29....)", re.compile(r"(?<![A-Za-z0-9])ya29\.[0-9A-Za-z_-]{20,}")),
    ("a Slack token (xoxb-/xoxp-/xapp-...)", re.compile(r"(?<![A-Za-z0-9])(?:xox[abposr]|xapp)-[0-9A-Za-z-]{10,}")),
)


def _resolver_call(text: str) -> str | None:
    """The name part of the first resolver call in `text` (None when there is none).

    OmegaConf's grammar (omegaconf/grammar/OmegaConfGrammarParser.g4): a resolver call is `${` name `:`
    args `}`, where the name may itself be built from interpolations (`${${k}:X}`, `${oc.${k}:X}` with
    `+k=oc.env` set by another override); a node interpolation never has a colon at its own level (its
    keys exclude `:`). So: a colon at the interpolation's own brace level, whatever precedes it.
    """
    # One pass with a stack of open braces (an interpolation's start, or -1 for a plain brace): linear,
    # so a value of 100,000 `${` costs what its length does.
    open_braces: list[int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "$" and text.startswith("${", i):
            open_braces.append(i)
            i += 2
            continue
        if c == "{":
            open_braces.append(-1)
        elif c == "}":
            if open_braces:
                open_braces.pop()
        elif c == ":" and open_braces and open_braces[-1] >= 0:
            name = text[open_braces[-1] + 2:i].strip()
            return name if len(name) <= 40 else name[:40] + "..."
        i += 1
    return None


def resolver_problem(text: str) -> str | None:
    """Why an OmegaConf resolver call in `text` is refused, None when there is none."""
    name = _resolver_call(text)
    if name is None:
        return None
    return (f"uses the resolver ${{{name}:...}}: verl resolves and prints its whole config in the job's "
            "log, so an environment variable read this way (e.g. a key) ends up in plain text there; "
            "write the value itself (secrets go in `pulumi config set --secret`)")


# A key that names a commit (`...model.revision=<40 hex>`, `+trainer.git_sha=...`) holds a git or Hub commit
# id, which has a W&B key's shape; the Hub takes only the full 40 characters as a commit revision.
COMMIT_KEY = re.compile(r"(?i)(^|[._])(revision|commit|commit_id|sha|git_sha|commit_sha)$")


def credential_shape(text: str, key: str = "", commit_ids: bool = False) -> str | None:
    """Which credential `text` looks like (e.g. "a Hugging Face token (hf_...)"), None when it looks like none.
    Under a `key` that names a commit, or where the text may hold one (`commit_ids`: a path, an image tag), 40 hex
    characters are a commit id."""
    for what, shape in SHAPES:
        if what == WANDB_KEY and (commit_ids or COMMIT_KEY.search(key)):
            continue
        if shape.search(text):
            return what
    return None


def credential_problem(text: str, key: str = "") -> str | None:
    """Why an override carrying what looks like a credential is refused, None when it carries none (`key`: the
    override's key)."""
    what = credential_shape(text, key)
    if what is None:
        return None
    return (f"carries what looks like {what}: the overrides become the job's entrypoint, shown "
            "in plain text on the Ray dashboard; set keys with `pulumi config set --secret` "
            "(hfToken, wandbApiKey)" + (
                "; a commit id has the same shape: it is taken under a key named revision, commit or sha"
                if what == WANDB_KEY else ""))
