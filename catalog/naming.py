"""Naming and format rules of Kubernetes, GCP, Hugging Face and git, each written once.

Digits are ASCII (re.ASCII): Python's \\d takes other scripts' digits too ("1.٣٣" as a GKE minor, which int()
reads as 1.33), and the platform's parsers do not.

Every `*_problem` check returns None when the value is allowed, else the text that says what is
allowed, so the config gate (stacks.config) and the components' own assertions share one
implementation and phrase the same rule the same way; the other functions return what they are
named for (machine_vcpus, gke_version_key, quantity).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable

# The Pulumi project (Pulumi.yaml's name, so the namespace of its config keys) and the project verl's
# trainer logs the run under (trainer.project_name).
PROJECT = "verl-gke"

# Kubernetes: RFC 1123 label (namespaces, most names), RFC 1035 label (Services, so RayClusters),
# RFC 1123 subdomain (PVs, PVCs, Secrets, ServiceAccounts, ConfigMaps).
# Source: kubernetes/apimachinery pkg/util/validation/validation.go.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # ConfigMap/Secret data keys (IsConfigMapKey)
_ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # C identifier: a name every shell and Kubernetes accept
# Namespaces GKE and Kubernetes reserve for themselves (kube-system, gke-managed-*, gmp-system).
RESERVED_NAMESPACE_PREFIXES = ("kube-", "gke-", "gmp-")
# GCP: project ids (Resource Manager "Creating and managing projects"), regions, zones.
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
# IAM service account ids: 6-30 characters, RFC 1035 (pulumi_gcp serviceaccount.Account account_id).
_SERVICE_ACCOUNT_ID = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
# Cloud Storage bucket names (https://cloud.google.com/storage/docs/buckets#naming, "Bucket names"): 3-63
# lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or digit; with dots up to 222, each
# dot-separated part at most 63 (a dotted name is a domain Google verified: no part is empty); not an IP address in
# dotted-decimal; not beginning with "goog"; not containing "google" or a close misspelling of it such as "g00gle".
_BUCKET = re.compile(r"[a-z0-9]([a-z0-9._-]*[a-z0-9])?")
_DOTTED_DECIMAL = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")
# "A close misspelling": read with digits as the letters they stand in for (g00gle, goog1e, 9oogle), one edit
# (a letter added, dropped, changed or two swapped: gogle, gooogle, googel) from "google".
_LOOK_ALIKES = str.maketrans("01369", "olegg")
# The stack's own bucket is "<prefix>-<8 hex>" (the storage component's suffix, kept in state): no dots, which would
# need the domain verified.
BUCKET_SUFFIX_BYTES = 4
MAX_BUCKET_PREFIX = 63 - 1 - 2 * BUCKET_SUFFIX_BYTES
_MACHINE = re.compile(r"^[a-z][a-z0-9]*-[a-z]+-(\d+)(-[a-z0-9]+)?$", re.ASCII)
# GKE versions: a full patch (1.32.2-gke.1475000) or a minor (1.33), as getServerConfig lists them.
_GKE_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)-gke\.(\d+)$", re.ASCII)
_GKE_MINOR = re.compile(r"^(\d+)\.(\d+)$", re.ASCII)
# Hugging Face repo ids, git refs (git check-ref-format, roughly) and URLs, image references.
_MODEL_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_GIT_REF = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/+-]+(?<![./])$")
_REPO_URL = re.compile(r"^(https?|ssh|git|file)://\S+$|^[\w.-]+@[\w.-]+:\S+$")
# An image reference as kubelet and containerd parse it (distribution/reference regexp.go @00a09fa3:
# lowercase path components joined by one of `.`, `_`, `__` or dashes; an optional registry host[:port];
# a tag `[\w][\w.-]{0,127}`; a digest `algo:` + 32 or more hex digits; reference.go: name <= 255 chars).
_IMG_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMG_HOST_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMG_HOST = rf"(?:{_IMG_HOST_PART}(?:\.{_IMG_HOST_PART})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_IMAGE = re.compile(rf"(?P<name>(?:{_IMG_HOST}/)?{_IMG_PATH}(?:/{_IMG_PATH})*)(?::[\w][\w.-]{{0,127}})?"
                    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?", re.ASCII)
_RAY_VERSION = re.compile(r"^\d+\.\d+\.\d+$", re.ASCII)
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$", re.ASCII)
_UNITS = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}

# A check: None when the value is allowed, else what is allowed.
Check = Callable[[object], str | None]


def _full_match(pattern: re.Pattern[str], allowed: str) -> Check:
    """The check of a rule that is one pattern a string must match in full."""
    def check(value: object) -> str | None:
        return None if isinstance(value, str) and pattern.fullmatch(value) else allowed
    return check


def dns_label_problem(value: object, max_len: int = 63) -> str | None:
    if isinstance(value, str) and _DNS_LABEL.fullmatch(value) and len(value) <= max_len:
        return None
    return f"must be a DNS label: at most {max_len} lowercase letters, digits or '-', starting and ending " \
           "with a letter or digit"


def dns_1035_label_problem(value: object, max_len: int = 63) -> str | None:
    if isinstance(value, str) and _DNS_1035.fullmatch(value) and len(value) <= max_len:
        return None
    return f"must be a DNS-1035 label: at most {max_len} lowercase letters, digits or '-', starting with a " \
           "letter and not ending with '-'"


def dns_subdomain_problem(value: object) -> str | None:
    if isinstance(value, str) and _DNS_SUBDOMAIN.fullmatch(value) and len(value) <= 253:
        return None
    return "must be a DNS subdomain: at most 253 lowercase letters, digits, '-' or '.'"


def namespace_problem(value: object) -> str | None:
    if problem := dns_label_problem(value):
        return problem
    if str(value).startswith(RESERVED_NAMESPACE_PREFIXES):
        return f"must not start with {', '.join(RESERVED_NAMESPACE_PREFIXES)} (reserved by Kubernetes and GKE)"
    return None


secret_key_problem: Check = _full_match(_SECRET_KEY, "must be a Secret data key: letters, digits, '-', '_' or '.'")


env_var_problem: Check = _full_match(_ENV_VAR, "must be an environment variable name: a letter or '_', then "
                                               "letters, digits or '_'")


project_id_problem: Check = _full_match(_PROJECT_ID, "must be a project id: 6-30 lowercase letters, digits or "
                                                     "hyphens, starting with a letter")


region_problem: Check = _full_match(_REGION, "must be a region such as us-central1")


def zone_problem(value: object) -> str | None:
    if isinstance(value, str) and "-" in value and re.fullmatch(r"[a-z]", value.rsplit("-", 1)[1]) \
            and region_problem(value.rsplit("-", 1)[0]) is None:
        return None
    return "must be a zone such as us-central1-b"


def zone_in_region_problem(zone: object, region_name: str) -> str | None:
    if isinstance(zone, str) and re.fullmatch(re.escape(region_name) + r"-[a-z]", zone):
        return None
    return f"must be a zone in region {region_name} (e.g. {region_name}-b)"


def _one_edit(a: str, b: str) -> bool:
    """Whether `a` is at most one edit from `b`: a character added, dropped or changed, or two neighbours swapped."""
    if a == b:
        return True
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long = sorted((a, b), key=len)
    return len(long) - len(short) == 1 and any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _google_misspelling(name: str) -> str | None:
    """The part of `name` that reads as "google" or a close misspelling of it, None when none does."""
    # A window with at least three real letters: digits ("604613", a date, the stack's own hex suffix, whose only
    # letter of "google" is 'e') read as letters are no misspelling anyone typed.
    read = name.translate(_LOOK_ALIKES)
    for size in (6, 5, 7):
        for i in range(len(read) - size + 1):
            window = name[i:i + size]
            if sum(c.isalpha() for c in window) >= 3 and _one_edit(read[i:i + size], "google"):
                return window
    return None


def _google_problem(name: str) -> str | None:
    if name.startswith("goog"):
        return "must not begin with 'goog' (Cloud Storage bucket naming, https://cloud.google.com/storage/docs/" \
               "buckets#naming)"
    if part := _google_misspelling(name):
        return f"must not contain 'google' or a close misspelling of it, as {part!r} reads (Cloud Storage bucket " \
               "naming, https://cloud.google.com/storage/docs/buckets#naming)"
    return None


def bucket_name_problem(value: object) -> str | None:
    """A bucket name as Cloud Storage allows one (the rules above): a bucket to adopt may have dots."""
    allowed = ("must be a Cloud Storage bucket name: 3-63 lowercase letters, digits, '-', '_' or '.', starting and "
               "ending with a letter or digit (with dots up to 222, each dot-separated part 1-63), "
               "https://cloud.google.com/storage/docs/buckets#naming")
    if not (isinstance(value, str) and _BUCKET.fullmatch(value) and 3 <= len(value) <= 222):
        return allowed
    parts = value.split(".")
    if any(not 1 <= len(part) <= 63 for part in parts):
        return allowed
    if _DOTTED_DECIMAL.fullmatch(value):
        return "must not be an IP address in dotted-decimal notation (Cloud Storage bucket naming, " \
               "https://cloud.google.com/storage/docs/buckets#naming)"
    return _google_problem(value)


def bucket_prefix_problem(value: object, max_len: int = MAX_BUCKET_PREFIX) -> str | None:
    """The part before "-<8 hex>" of a bucket the stack creates: lowercase letters, digits and hyphens (no dots, which
    would need the domain verified), and the rules of the whole name that a prefix can break."""
    if not (isinstance(value, str) and _DNS_LABEL.fullmatch(value) and len(value) <= max_len):
        return f"must be 1-{max_len} lowercase letters, digits or hyphens, starting and ending with a letter " \
               "or digit"
    return _google_problem(value)


def python_identifier_problem(value: object) -> str | None:
    """A Python name (a function or a top-level module)."""
    if isinstance(value, str) and value.isidentifier() and not keyword.iskeyword(value):
        return None
    return "must be a Python identifier"


def machine_vcpus(machine_type: str) -> int | None:
    """vCPUs of a predefined machine type such as c2-standard-16; None when not of that form."""
    m = _MACHINE.fullmatch(machine_type)
    return int(m.group(1)) if m else None


def service_account_id_problem(value: object) -> str | None:
    if isinstance(value, str) and _SERVICE_ACCOUNT_ID.fullmatch(value) and 6 <= len(value) <= 30:
        return None
    return "must be a service account id: 6-30 lowercase letters, digits or '-', starting with a letter"


def gke_version_key(version: str) -> tuple[int, ...] | None:
    """A GKE version as a comparable tuple; None when not of the form 1.32.2-gke.1475000."""
    m = _GKE_VERSION.fullmatch(version or "")
    return tuple(int(g) for g in m.groups()) if m else None


def gke_minor(version: str) -> tuple[int, int] | None:
    """(1, 33) for "1.33" or "1.33.5-gke.1080000"; None for anything else."""
    m = _GKE_MINOR.fullmatch(version or "") or _GKE_VERSION.fullmatch(version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def gke_version_pin_problem(value: object) -> str | None:
    """A pin is a full version or a minor to take the channel's newest patch of."""
    if isinstance(value, str) and (_GKE_VERSION.fullmatch(value) or _GKE_MINOR.fullmatch(value)):
        return None
    return "must be a GKE version such as 1.33.5-gke.1080000, or a minor such as 1.33 (its newest patch in the channel)"


# The Hub's own rule for a repo id (huggingface_hub utils/_validators.py validate_repo_id: REPO_ID_REGEX
# `^(\b[\w\-.]+\b/)?\b[\w\-.]{1,96}\b$`, no `--` or `..`, no `.git` suffix); the model id is also a
# folder under the bucket (catalog.paths), so `..` must never be a path segment.
MAX_MODEL_ID = 96 + 1 + 96  # a namespace is a user or organisation name; the name has at most 96 characters


def model_id_problem(value: object) -> str | None:
    allowed = "must be a Hugging Face model id such as Qwen/Qwen2.5-32B-Instruct"
    if not isinstance(value, str):
        return allowed
    if len(value) > MAX_MODEL_ID:  # checked first: a huge value gets one short answer
        return f"is {len(value)} characters long: {allowed} (a name of at most 96 characters)"
    name = value.rsplit("/", 1)[-1]
    if not _MODEL_ID.fullmatch(value) or len(name) > 96 or not re.fullmatch(r"\w(.*\w)?", name) \
            or not re.fullmatch(r"\w(.*\w)?", value.split("/", 1)[0]):
        return allowed + " (letters, digits, '-', '_' and '.'; each part starts and ends with a letter or digit)"
    if "--" in value or ".." in value or value.endswith(".git"):
        return allowed + " (the Hub refuses '--', '..' and a '.git' suffix)"
    return None


git_ref_problem: Check = _full_match(_GIT_REF, "must be a git tag, branch or commit such as v0.6.1")


# A release tag (v0.6.1): a branch would stage a moving target under a versioned folder.
release_tag_problem: Check = _full_match(re.compile(r"v\d+\.\d+\.\d+(\.post\d+)?", re.ASCII),
                                         "must be a release tag such as v0.6.1")


repo_url_problem: Check = _full_match(_REPO_URL,
                                      "must be a git URL (https://, ssh://, git://, file:// or user@host:path)")


def image_ref_problem(value: object) -> str | None:
    """An image reference with a tag or a digest (a bare name would float to :latest)."""
    m = _IMAGE.fullmatch(value) if isinstance(value, str) else None
    if m and len(m["name"]) <= 255 and (":" in value.rsplit("/", 1)[-1] or "@" in value):
        first = value.split("/", 1)[0]
        if "/" in value and first.lower() != first and not any(c in first for c in ".:"):
            # distribution/reference normalize.go splitDockerDomain: a first part with capitals is a host.
            return (f"{first!r} would be read as a registry host (capitals make it one), not a Docker Hub "
                    "account: image names are lowercase, e.g. verlai/verl:tag")
        return None
    return ("must be an image reference with a tag or digest and a lowercase name (as containerd parses it), "
            "e.g. repo/image:tag or repo/image@sha256:...")


ray_version_problem: Check = _full_match(_RAY_VERSION, "must be a Ray version such as 2.49.2")


def quantity(value: str) -> float | None:
    """A Kubernetes quantity in base units (2 -> 2.0, 500m -> 0.5, 4Gi -> 4294967296); None if malformed."""
    m = _QUANTITY.fullmatch(value) if isinstance(value, str) else None
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def positive_quantity_problem(value: object) -> str | None:
    number = quantity(value) if isinstance(value, str) else None
    if number is not None and number > 0:
        return None
    return "must be a positive Kubernetes quantity such as 2, 500m or 4Gi"


# A Cloud Billing account id, as in billingAccounts/012345-567890-ABCDEF (Cloud Billing API reference,
# https://cloud.google.com/billing/docs/reference/rest/v1/billingAccounts).
_BILLING_ACCOUNT = re.compile(r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$")


billing_account_id_problem: Check = _full_match(_BILLING_ACCOUNT, "must be a billing account id such as "
                                                                  "012345-567890-ABCDEF (gcloud billing accounts list)")


def soft_delete_days_problem(value: object) -> str | None:
    """A bucket's soft-delete retention in days: 0 turns it off, else 7..90 (Cloud Storage
    soft_delete_policy.retention_duration_seconds; terraform-provider-google storage_bucket docs)."""
    if isinstance(value, int) and not isinstance(value, bool) and (value == 0 or 7 <= value <= 90):
        return None
    return "must be 0 (soft delete off) or 7..90 days"
