"""Issue 43 item 8: the smoke-run lines (docs/troubleshooting.md) about NCCL and the head's /tmp/ray volume
say what the program renders and quote NCCL's log lines as NCCL's source prints them (NVIDIA/nccl at the tag in
tests/data/nccl_init_messages.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from catalog.accelerators import ACCELERATORS
from recipe import grpo
from tests.stack_helpers import ROOT, composed_file

README = " ".join((ROOT / "docs" / "troubleshooting.md").read_text().split())
SECTION = README[README.index("**What to read on the first `dev-b200` run**"):]
SECTION = SECTION[:SECTION.index("## Destroy and the bucket")]
NCCL = json.loads((Path(__file__).parent / "data" / "nccl_init_messages.json").read_text())


def _pattern(fmt: str) -> re.Pattern:
    """An NCCL format string as a pattern over the README's quotes (<...> placeholders stand for values)."""
    parts = re.split(r"%[ds]", fmt)
    return re.compile("^" + "(?:<[^>]+>|[^ ]*?)".join(re.escape(p) for p in parts) + "$")


def test_the_nccl_lines_the_readme_quotes_are_nccls_own():
    patterns = [_pattern(f) for f in NCCL["messages"].values()]
    prose = re.sub(r"```.*?```", " ", SECTION)  # the probe's code block aside
    quoted = [q for q in re.findall(r"`([^`]+)`", prose)
              if q.startswith(("NCCL version", "NET/Plugin", "Successfully loaded", "Initialized NET",
                               "Assigned NET", "Using network", "Failed to initialize"))]
    assert len(quoted) >= 8, quoted
    # A quote ending in ":" is the start of a line: NET/Plugin: ... (the %s of plugin_open.cc is "NET" for nets).
    starts = [re.sub(r"%s", "NET", f, count=1) for f in NCCL["messages"].values()]
    unmatched = [q for q in quoted if not any(p.match(q) for p in patterns)
                 and not (q.endswith(":") and any(f.startswith(q) for f in starts))]
    assert not unmatched, unmatched


def test_the_library_path_the_readme_probes_with_is_the_jobs():
    rendered = grpo.library_path_env(ACCELERATORS["b200"])["LD_LIBRARY_PATH"].replace("${LD_LIBRARY_PATH}",
                                                                                       "$LD_LIBRARY_PATH")
    assert SECTION.count(f"LD_LIBRARY_PATH={rendered} ") == 1 and f"`{rendered}`" in SECTION, rendered


def test_the_head_volume_the_readme_names_is_the_rendered_one():
    run = composed_file(ROOT / "Pulumi.dev-b200.yaml")
    (cluster,) = [r for r in run.resources if r.type == "kubernetes:ray.io/v1:RayCluster"]
    spec = cluster.inputs["spec"]["headGroupSpec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if any(m["mountPath"] == "/tmp/ray" for m in c["volumeMounts"])]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp/ray"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" in volume
    assert (f"`{container['name']}` container mounts the `{mount['name']}` emptyDir at `/tmp/ray`") in SECTION
