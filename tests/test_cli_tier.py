"""The real-CLI tier's own footing: the built CLI is the pinned release and runs offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import pulumi_cli

pytestmark = pytest.mark.cli


def test_built_cli_reports_the_release_pinned_in_tools_pulumi_cli_go_mod(tmp_path: Path) -> None:
    pinned = re.search(r"github.com/pulumi/pulumi/pkg/v3 (v\S+)",
                       (pulumi_cli.ROOT / "tools/pulumi-cli/go.mod").read_text()).group(1)
    ws = pulumi_cli.Workspace(tmp_path, tmp_path / "scratch")
    result = ws.run("version")
    assert result.code == 0, result
    assert result.out.strip() == pinned


def test_dynamic_provider_plugin_is_bundled_next_to_the_cli() -> None:
    plugin = pulumi_cli.BIN / "pulumi-resource-pulumi-python"
    assert plugin.is_file() and plugin.stat().st_mode & 0o111
    assert "-m pulumi.dynamic" in plugin.read_text()


def test_the_python_sdk_is_the_release_requirements_pin():
    """The pair the tier tests: the SDK the program and its dynamic provider import, as requirements.txt pins it."""
    from importlib.metadata import version

    pinned = re.search(r"^pulumi==(\S+)", (pulumi_cli.ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert version("pulumi") == pinned
