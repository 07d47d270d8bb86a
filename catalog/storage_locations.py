"""The locations Cloud Storage offers for a bucket, as catalog data.

Source: Cloud Storage "Bucket locations", section "Available locations"
(https://cloud.google.com/storage/docs/locations#available-locations, page as of 2025-07-31):
regions, predefined dual-regions and multi-regions. The API takes a location in any case and
reports it upper-case. Configurable dual-regions are set with customPlacementConfig, not with a
location string, so they are not listed here. A region added after that date is refused until
this list has it: add it here with the page's date.
"""

from __future__ import annotations

import difflib

REGIONS = frozenset({
    # North America
    "northamerica-northeast1", "northamerica-northeast2", "northamerica-south1",
    "us-central1", "us-east1", "us-east4", "us-east5", "us-south1",
    "us-west1", "us-west2", "us-west3", "us-west4",
    # South America
    "southamerica-east1", "southamerica-west1",
    # Europe
    "europe-central2", "europe-north1", "europe-north2", "europe-southwest1",
    "europe-west1", "europe-west2", "europe-west3", "europe-west4", "europe-west6",
    "europe-west8", "europe-west9", "europe-west10", "europe-west12",
    # Middle East
    "me-central1", "me-central2", "me-west1",
    # Asia and Oceania
    "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2", "asia-northeast3",
    "asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2",
    "australia-southeast1", "australia-southeast2",
    # Africa
    "africa-south1",
})
DUAL_REGIONS = frozenset({"asia1", "eur4", "eur5", "eur7", "eur8", "nam4"})  # predefined pairs
MULTI_REGIONS = frozenset({"asia", "eu", "us"})
LOCATIONS = REGIONS | DUAL_REGIONS | MULTI_REGIONS


def bucket_location_problem(value: object) -> str | None:
    """None when Cloud Storage offers `value` as a bucket location, else what is allowed."""
    if isinstance(value, str) and value.lower() in LOCATIONS:
        return None
    close = difflib.get_close_matches(str(value).lower(), sorted(LOCATIONS), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return ("must be a Cloud Storage location: a region such as us-central1, a predefined dual-region "
            f"({', '.join(sorted(DUAL_REGIONS)).upper()}) or a multi-region (ASIA, EU, US){hint}")
