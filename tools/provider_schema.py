"""Which resource fields the GCP provider replaces on change, read from the provider's own Go schema.

    python -m tools.provider_schema --git-dir <a clone of hashicorp/terraform-provider-google>/.git \
        --commit <sha> --write     # rewrite tests/data/reference/provider_force_new.json

pulumi-gcp is a bridged provider: its Diff asks the Terraform schema of terraform-provider-google
(beta) whether a changed attribute is `ForceNew` (or a CustomizeDiff calls `ForceNew`/
`ForceNewIfChange`), and a replacement follows. pulumi-gcp's own schema.json carries no such flag,
so the fields are read from the Go source at a commit: every `"name": {...}` field of a resource's
`Schema` map with `ForceNew: true`, as a path of Pulumi property names (camelCase; a MaxItems=1
block is an object in Pulumi, so paths carry no list index). Schema maps spliced in by helper
functions (`"node_config": schemaNodeConfig()`) and package-level maps (`Schema: schemaNodePool`)
are followed. Fields built any other way are not listed: a test that meets a changed field it cannot
classify fails, it never guesses.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "reference" / "provider_force_new.json"
REPO = "hashicorp/terraform-provider-google"

# Pulumi type token -> (Go file, where the resource's schema starts: a regex whose match ends just
# before the `{` of the Schema map or at a package-level map's name).
SCHEMA_MAP = r"[\s\S]*?Schema: map\[string\]\*schema\.Schema"
RESOURCES: dict[str, tuple[str, str]] = {
    "gcp:container/cluster:Cluster": ("google/services/container/resource_container_cluster.go",
                                      r"func ResourceContainerCluster\(\)" + SCHEMA_MAP),
    "gcp:container/nodePool:NodePool": ("google/services/container/resource_container_node_pool.go",
                                        r"var schemaNodePool = map\[string\]\*schema\.Schema"),
    "gcp:compute/network:Network": ("google/services/compute/resource_compute_network.go",
                                    r"func ResourceComputeNetwork\(\)" + SCHEMA_MAP),
    "gcp:compute/subnetwork:Subnetwork": ("google/services/compute/resource_compute_subnetwork.go",
                                          r"func ResourceComputeSubnetwork\(\)" + SCHEMA_MAP),
}
# Helper functions that return one field's schema, and package-level schema maps: file, start regex.
HELPERS: dict[str, tuple[str, str]] = {
    "schemaNodeConfig()": ("google/services/container/node_config.go",
                           r"func schemaNodeConfig\(\) \*schema\.Schema \{\s*return &schema\.Schema"),
    "schemaNodePool": ("google/services/container/resource_container_node_pool.go",
                       r"var schemaNodePool = map\[string\]\*schema\.Schema"),
}

FIELD = re.compile(r'"([a-z0-9_]+)":\s*(\{|[A-Za-z_][A-Za-z0-9_]*(?:\(\))?)')
FORCE_NEW = re.compile(r"\bForceNew:\s*true\b")
SCHEMA_REF = re.compile(r"\bSchema:\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _block(text: str, start: int) -> str:
    """The text of the `{...}` block whose `{` is the first one at or after `start`."""
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at:i + 1]
    raise ValueError("unbalanced braces")


def force_new_paths(block: str, read: callable, prefix: tuple[str, ...] = ()) -> set[str]:
    """Pulumi paths of the ForceNew fields of one Schema map block (text from its `{`)."""
    found: set[str] = set()
    stack: list[str | None] = []  # one entry per open brace: the field it opens, or None
    i = 0
    while i < len(block):
        m = FIELD.match(block, i)
        if m:
            name, rest = m.groups()
            if rest == "{":
                stack.append(name)
                i = m.end()
                continue
            if rest in HELPERS:  # a field whose schema a helper returns, or a shared map
                path = (*prefix, *[k for k in stack if k], name)
                found |= _helper(rest, read, path)
            i = m.end()
            continue
        ch = block[i]
        if ch == "{":
            stack.append(None)
        elif ch == "}":
            stack.pop()
        elif block.startswith("ForceNew", i) and (fm := FORCE_NEW.match(block, i)):
            keys = [k for k in stack if k]
            if keys:
                found.add(".".join(camel(k) for k in (*prefix, *keys)))
            i = fm.end()
            continue
        elif block.startswith("Schema:", i) and (sm := SCHEMA_REF.match(block, i)) and sm.group(1) in HELPERS:
            found |= _helper(sm.group(1), read, (*prefix, *[k for k in stack if k]))
            i = sm.end()
            continue
        i += 1
    return found


def _helper(name: str, read: callable, path: tuple[str, ...]) -> set[str]:
    file, start = HELPERS[name]
    text = read(file)
    m = re.search(start, text)
    if not m:
        raise ValueError(f"{name} not found in {file}")
    body = _block(text, m.end())
    if name.endswith("()"):  # returns one field's &schema.Schema{...}: its own ForceNew counts for `path`
        inner = force_new_paths(body, read, path)
        own = _block(body, 0)
        # The field itself: a ForceNew at the top level of its own braces.
        top = re.sub(r"\{[^{}]*\}", "", own)
        while re.search(r"\{[^{}]*\}", top[1:-1]):
            top = top[0] + re.sub(r"\{[^{}]*\}", "", top[1:-1]) + top[-1]
        if FORCE_NEW.search(top):
            inner.add(".".join(camel(k) for k in path))
        return inner
    return force_new_paths(body, read, path)


def customize_diff(text: str) -> set[str]:
    """Fields a CustomizeDiff replaces on: ForceNewIfChange("x", ...) and d.ForceNew("x.0.y")."""
    names = re.findall(r'ForceNewIfChange\("([a-z0-9_.]+)"', text) + re.findall(r'\.ForceNew\("([a-z0-9_.]+)"\)', text)
    return {".".join(camel(p) for p in n.split(".") if not p.isdigit()) for n in names}


def extract(git_dir: str, commit: str) -> dict:
    cache: dict[str, str] = {}

    def read(path: str) -> str:
        if path not in cache:
            cache[path] = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                                         check=True, capture_output=True, text=True).stdout
        return cache[path]

    resources = {}
    for token, (file, start) in RESOURCES.items():
        text = read(file)
        m = re.search(start, text)
        if not m:
            raise ValueError(f"{token}: schema start not found in {file}")
        paths = force_new_paths(_block(text, m.end()), read)
        resources[token] = {"file": file, "force_new": sorted(paths | customize_diff(text))}
    return {"repo": REPO, "commit": commit, "how": "python -m tools.provider_schema (this file's docstring)",
            "resources": resources}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.provider_schema", description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    data = extract(args.git_dir, args.commit)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.write:
        DATA.write_text(text)
        print(f"wrote {DATA}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
