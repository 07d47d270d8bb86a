"""Where the offline plan's quota check reads the project's quotas: the sample project, or the user's file.

    python -m tools.plan --stack h200 --quotas quotas.json

`quotas.json` is what `gcloud beta quotas info list --service=compute.googleapis.com --project=PROJECT
--format=json` prints (gcloud reference, https://cloud.google.com/sdk/gcloud/reference/beta/quotas/info/list:
"list QuotaInfos of all quotas for a given project, folder or organization"): a JSON list of Cloud Quotas
QuotaInfo resources (REST reference, https://cloud.google.com/docs/quotas/reference/rest/v1/
projects.locations.services.quotaInfos): `quotaId`, `service`, and `dimensionsInfos[]`, each with
`dimensions` (a map; a dimension left out means "every other value"), `details` (QuotaDetails: `value`, an
int64, which proto3 JSON writes as a string and omits when 0) and `applicableLocations` (["global"] for a
project-wide quota). The Pulumi SDK's GetSQuotaInfoResult flattens `details` into a list: both are read.

Both checks read one source: the plan's gate (stacks.quotas.quota_problems) and the mocked program run
(tools.mocking.ProgramMocks answers the program's own quota invokes from it), so they agree.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog import quotas as catalog_quotas
from catalog.problems import Problem
from tools import mocking

if TYPE_CHECKING:
    from stacks.quotas import QuotaNeed

GCLOUD = "gcloud beta quotas info list --service=compute.googleapis.com --project=PROJECT --format=json"
# A whole service's listing is far smaller; the cap only keeps a wrong file from filling memory.
MAX_BYTES = 16 * 1024 * 1024
EXPECTED = f"expected the JSON list of QuotaInfos that `{GCLOUD} > FILE` saves"
_INT = re.compile(r"-?[0-9]+", re.ASCII)  # int64 as proto3 JSON writes it; ASCII digits only

Row = mocking.QuotaRow  # one dimensionsInfo: (dimensions, value or None when omitted (0), applicableLocations)


class QuotaFileError(ValueError):
    """A --quotas file that cannot be read or is not a QuotaInfo listing (the plan exits 2)."""


@dataclass(frozen=True)
class QuotaSource:
    """The quotas the plan checks the stack against: `rows` by quota id; `file` is None for the sample project
    (tools/mocking.py MOCK_QUOTAS), which also answers, as the mocks do, that a quota it lacks is not found."""

    rows: Mapping[str, Sequence[Row]]
    file: str | None = None

    @property
    def label(self) -> str:
        """Where the values came from, for each refusal (short: a refusal's line is capped, stacks.config)."""
        if self.file is None:
            return "the plan's sample project quotas, tools/mocking.py: check yours with --quotas FILE"
        return f"quotas from --quotas {self.file}"

    def hint(self) -> list[Problem]:
        """The line under the refusals that says how to save your own quotas (none once they are yours)."""
        return [] if self.file is not None else [
            Problem("--quotas FILE", f"save your project's quotas with `{GCLOUD} > FILE`")]

    def infos(self, wanted: Sequence[QuotaNeed]) -> dict[str, list[dict] | str]:
        """What stacks.quotas.quota_problems reads for `wanted` (QuotaNeeds): quota_id -> its dimensionsInfos, or
        (samples only) the failed read of a quota the sample project lacks. A quota the file lacks is left out: see
        warnings."""
        out: dict[str, list[dict] | str] = {}
        for quota_id in dict.fromkeys(n.ref.quota_id for n in wanted):
            rows = self.rows.get(quota_id)
            if rows is not None:
                out[quota_id] = [{"dimensions": d, "value": None if v is None else str(v), "locations": locs}
                                 for d, v, locs in rows]
            elif self.file is None:
                out[quota_id] = mocking.quota_not_found(quota_id)
        return out

    def checked(self, wanted: Sequence[QuotaNeed]) -> list[QuotaNeed]:
        """The needs this source can check (a file's: those whose quota it lists)."""
        return [n for n in wanted if self.file is None or n.ref.quota_id in self.rows]

    def warnings(self, region: str, wanted: Sequence[QuotaNeed]) -> list[str]:
        """One warning per need whose quota the file lacks: never checked against a sample instead."""
        return [f"quota {n.ref.describe(region)}: not in {self.file}: not checked"
                for n in wanted if self.file is not None and n.ref.quota_id not in self.rows]

    def mock_answers(self, wanted: Sequence[QuotaNeed]) -> dict[str, list[Row] | int] | None:
        """ProgramMocks' `quotas` for the program's own reads: None (the samples, the mocks' default), else the
        file's rows; a quota the file lacks is answered unlimited (-1, the API's "no limit"), so the program's
        check of it passes and the plan's one warning (warnings) says it was not checked, instead of the program
        warning that it could not read it and advising a role grant that is not the cause."""
        if self.file is None:
            return None
        return {n.ref.quota_id: list(self.rows[n.ref.quota_id]) if n.ref.quota_id in self.rows
                else catalog_quotas.UNLIMITED for n in wanted}

    def report(self, region: str, wanted: Sequence[QuotaNeed]) -> str:
        """Each quota the stack needs with the value checked (id, dimension, location), as the plan prints it."""
        infos = self.infos(wanted)
        head = (f"Quotas checked: the plan's sample project's (tools/mocking.py), not your project's; check yours "
                f"with --quotas FILE, FILE saved by `{GCLOUD}`" if self.file is None
                else f"Quotas checked: {self.file} (--quotas)")
        lines = [head]
        for n in wanted:
            dims = "".join(f" {k}={v}" for k, v in sorted(n.ref.dimensions.items()))
            where = f"region {region}" if n.ref.regional else "global"
            info = infos.get(n.ref.quota_id)
            if not isinstance(info, list):
                value = f"not in {self.file}: not checked" if self.file else "not in the sample project"
            else:
                found = catalog_quotas.quota_value(info, n.ref, region)
                value = ("no value" if found is None else "unlimited" if found == catalog_quotas.UNLIMITED
                         else f"{found:,}") + (" (sample)" if self.file is None else "")
            lines.append(f"  {n.ref.quota_id}{dims}, {where}: {value}; the stack needs {n.needed:,}")
        return "\n".join(lines)


SAMPLE = QuotaSource(mocking.MOCK_QUOTAS)  # the plan's sample project: what the mocks answer without a file
# tools.destroy: the order of a destroy never depends on quotas, so none is checked (every read answers unlimited):
# a stack whose quotas fall short must still be destroyable.
UNCHECKED = QuotaSource({}, file="nothing (tools.destroy checks no quota)")


def from_file(path: Path) -> QuotaSource:
    """The QuotaInfos saved in `path`; QuotaFileError names --quotas and what is expected."""
    return QuotaSource(parse(read_bounded(path), str(path)), str(path))


def read_bounded(path: Path) -> bytes:
    """A regular file of at most MAX_BYTES: a FIFO, a device (/dev/zero) or a folder is refused before any read
    (opened non-blocking: opening a FIFO with no writer would wait forever)."""
    where = f"--quotas {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise QuotaFileError(f"{where}: no such file; {EXPECTED}") from None
    except OSError as err:
        raise QuotaFileError(f"{where}: cannot be read ({err.strerror or err}); {EXPECTED}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, a device or a socket)"
            raise QuotaFileError(f"{where}: is {kind}; {EXPECTED}")
        if info.st_size > MAX_BYTES:
            raise QuotaFileError(f"{where}: is {info.st_size:,} bytes, over the {MAX_BYTES:,} the plan reads; "
                                 f"{EXPECTED}")
        chunks, size = [], 0
        while chunk := os.read(fd, min(1 << 20, MAX_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_BYTES:  # it grew while being read
                raise QuotaFileError(f"{where}: grew past the {MAX_BYTES:,} bytes the plan reads; {EXPECTED}")
        return b"".join(chunks)
    except OSError as err:
        raise QuotaFileError(f"{where}: cannot be read ({err.strerror or err}); {EXPECTED}") from None
    finally:
        os.close(fd)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def parse(data: bytes, path: str) -> dict[str, list[Row]]:
    """The listing's QuotaInfos as quota_id -> rows; every departure from the documented shape is refused with
    the JSON path of the first bad value (a wrong file must not pass as a project with no quota)."""
    where = f"--quotas {path}"
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as err:
        raise QuotaFileError(f"{where}: not UTF-8 text (byte {err.start}); {EXPECTED}") from None
    except json.JSONDecodeError as err:
        raise QuotaFileError(f"{where}: not JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                             f"{EXPECTED}") from None
    except (ValueError, RecursionError) as err:
        raise QuotaFileError(f"{where}: not JSON ({err}); {EXPECTED}") from None

    def bad(at: str, what: str, got: Any) -> QuotaFileError:
        shown = "an object" if isinstance(got, dict) else "a list" if isinstance(got, list) else json.dumps(got)[:80]
        return QuotaFileError(f"{where}: {at}: expected {what}, got {shown}; {EXPECTED}")

    if not isinstance(doc, list):
        raise bad("the top level", "a list of QuotaInfo objects", doc)
    if not doc:
        raise QuotaFileError(f"{where}: lists no QuotaInfo (the wrong project or service?); {EXPECTED}")
    out: dict[str, list[Row]] = {}
    for i, item in enumerate(doc):
        at = f"[{i}]"
        if not isinstance(item, dict):
            raise bad(at, "a QuotaInfo object", item)
        quota_id = item.get("quotaId")
        if not isinstance(quota_id, str) or not quota_id:
            raise bad(f"{at}.quotaId", "the quota's id (a non-empty string)", quota_id)
        at = f"{at} ({_escaped(quota_id)})"
        service = item.get("service", catalog_quotas.SERVICE)
        if service != catalog_quotas.SERVICE:
            raise bad(f"{at}.service", f"{catalog_quotas.SERVICE!r} (--service=compute.googleapis.com)", service)
        if quota_id in out:
            raise QuotaFileError(f"{where}: {at}: the quota is listed twice; {EXPECTED}")
        infos = item.get("dimensionsInfos", [])  # proto3 JSON leaves an empty list out
        if not isinstance(infos, list):
            raise bad(f"{at}.dimensionsInfos", "a list", infos)
        out[quota_id] = [_row(d, f"{at}.dimensionsInfos[{j}]", bad) for j, d in enumerate(infos)]
    return out


def _escaped(text: str, limit: int = 100) -> str:
    """Text from the file for a message: every control and non-ASCII character escaped (an ESC, a BEL or a
    direction mark would act on the terminal), cut at `limit`."""
    shown = text.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(text):,} characters)"


def _row(info: Any, at: str, bad: Callable[[str, str, Any], QuotaFileError]) -> Row:
    if not isinstance(info, dict):
        raise bad(at, "a dimensionsInfo object", info)
    dims = info.get("dimensions", {})
    if not isinstance(dims, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in dims.items()):
        raise bad(f"{at}.dimensions", "an object of strings", dims)
    locations = info.get("applicableLocations", [])
    if not isinstance(locations, list) or not all(isinstance(x, str) for x in locations):
        raise bad(f"{at}.applicableLocations", "a list of strings", locations)
    details = info.get("details", {})
    if isinstance(details, list):  # the Pulumi SDK's flattened form: one QuotaDetails, or none
        if len(details) > 1:
            raise bad(f"{at}.details", "one QuotaDetails", details)
        details = details[0] if details else {}
    if not isinstance(details, dict):
        raise bad(f"{at}.details", "a QuotaDetails object", details)
    raw = details.get("value")
    if raw is None:
        value = None  # proto3 JSON omits a zero int64
    elif isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and _INT.fullmatch(raw):
        value = int(raw)
    else:
        raise bad(f"{at}.details.value", "an integer (a number or a string of digits)", raw)
    return dict(dims), value, list(locations)
