"""Which IPv4 ranges a VPC subnet (primary or secondary range) may use, as Google Cloud documents them.

Source: VPC "Subnets", sections "Valid IPv4 ranges" and "Prohibited IPv4 subnet ranges",
https://cloud.google.com/vpc/docs/subnets#valid-ranges (written down 2026-12-01; the stored copy of the
page found here showed only its opening, so the tables below are as the page lists them from our
reading of it, not re-read line by line: re-check them when GCP refuses a range this accepts). Valid: RFC 1918
(10/8, 172.16/12, 192.168/16), shared address space 100.64/10 (RFC 6598), IETF protocol assignments
192.0.0/24, the documentation ranges 192.0.2/24, 198.51.100/24 and 203.0.113/24, the 6to4 relay
anycast 192.88.99/24, benchmarking 198.18/15, class E 240/4 ("reserved for future use"), and
privately used public IPv4 addresses (any other unicast range, with caveats). Prohibited: Google's
own public ranges (APIs and services; not checkable offline: the subnet's creation fails with a
400 naming the conflict), 199.36.153.4/30 and 199.36.153.8/30 (Private Google Access VIPs),
0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4 (multicast) and 255.255.255.255/32.

`is_private` (Python's IANA special-purpose registry) is the wrong test both ways: it is true for
127/8 and 169.254/16, which GCP refuses, and false for 100.64/10, 198.18/15 or 240/4, which GCP takes.
Privately used public ranges are refused here (a documented divergence): whether one is inside
Google's own netblocks cannot be told offline, and GKE would SNAT Pod traffic to them.
"""

from __future__ import annotations

import ipaddress

SOURCE = "https://cloud.google.com/vpc/docs/subnets#valid-ranges"
PROHIBITED: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "the current network (RFC 1122)"),
    ("127.0.0.0/8", "loopback (RFC 1122)"),
    ("169.254.0.0/16", "link-local (RFC 3927)"),
    ("224.0.0.0/4", "multicast (RFC 5771)"),
    ("255.255.255.255/32", "the limited broadcast address (RFC 919)"),
    ("199.36.153.4/30", "Private Google Access's restricted.googleapis.com addresses"),
    ("199.36.153.8/30", "Private Google Access's private.googleapis.com addresses"),
)
# Non-RFC 1918 ranges GCP documents as valid for subnets; anything else unicast is a privately used
# public range (valid too: GCP then cannot reach the real owners of those addresses).
SPECIAL_VALID: tuple[tuple[str, str], ...] = (
    ("100.64.0.0/10", "shared address space (RFC 6598)"),
    ("192.0.0.0/24", "IETF protocol assignments (RFC 6890)"),
    ("192.0.2.0/24", "documentation (RFC 5737)"),
    ("198.51.100.0/24", "documentation (RFC 5737)"),
    ("203.0.113.0/24", "documentation (RFC 5737)"),
    ("192.88.99.0/24", "6to4 relay anycast (RFC 7526)"),
    ("198.18.0.0/15", "benchmark testing (RFC 2544)"),
    ("240.0.0.0/4", "reserved for future use, class E (RFC 1112)"),
)
RFC1918 = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
_VALID = tuple(ipaddress.ip_network(c) for c in (*RFC1918, *(c for c, _ in SPECIAL_VALID)))
_PROHIBITED = tuple((ipaddress.ip_network(c), why) for c, why in PROHIBITED)


def subnet_problem(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str | None:
    """Why GCP would refuse `net` as a subnet's IPv4 range; None when GCP documents it as valid."""
    if net.version != 4:
        return "must be an IPv4 range (these subnets are IPv4 single-stack)"
    for bad, why in _PROHIBITED:
        if net.overlaps(bad):
            return (f"overlaps {bad}, {why}, which GCP prohibits for subnets ({SOURCE}); use an RFC 1918 "
                    "range such as 10.0.0.0/8, or 100.64.0.0/10")
    if any(net.subnet_of(ok) for ok in _VALID):
        return None
    # A privately used public range: GCP takes it unless it is one of Google's own netblocks, which
    # cannot be checked offline, and GKE masquerades Pod traffic to it unless SNAT is reconfigured.
    return (f"is a public range: GCP prohibits Google's own public ranges ({SOURCE}), which cannot be told "
            "apart offline, and the cluster would SNAT traffic to it; use a private range (RFC 1918) or one of "
            + ", ".join(c for c, _ in SPECIAL_VALID[:1]) + ", 198.18.0.0/15, 240.0.0.0/4")
