"""Props as the engine's gRPC round trip delivers them to a dynamic provider: numbers as doubles, None dropped, and
(keep_unknowns) a value not known yet as the SDK's provider server hands it over (pulumi.output.Unknown). The
provider's own tests call its methods with these; the real engine itself runs them in tests/test_engine_dynamic.py."""

from __future__ import annotations

import asyncio
from typing import Any


def wire(props: dict[str, Any], keep_unknowns: bool = False) -> dict[str, Any]:
    from pulumi.runtime import rpc

    loop = asyncio.new_event_loop()
    try:
        struct = loop.run_until_complete(rpc.serialize_properties(props, {}))
    finally:
        loop.close()
    return rpc.deserialize_properties(struct, keep_unknowns)
