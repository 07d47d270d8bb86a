"""Pulumi's own dynamic provider server (`python -m pulumi.dynamic`, as the engine starts it), driven over gRPC.

Each call carries the provider pickled the way the engine stores it (`__provider`), so what runs is the
unpickled provider in another process, with the engine's wire format (numbers as doubles, unknowns as the
sentinel). A failed call raises ProviderCallError with the provider's message. The server's stderr is
collected: since Pulumi CLI 3.146.0 the engine shows it on the console (pulumi/pulumi#18253).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from typing import Any

from tests.ray_fixtures import BOGUS_RAY_ADDRESS, REPO

URN = "urn:pulumi:test::verl-gke::pulumi-python:dynamic/verl-gke:RayJob::grpo"


class ProviderCallError(Exception):
    pass


def _struct(props: dict[str, Any]):
    from pulumi.runtime import rpc

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(props, {}))
    finally:
        loop.close()


def wire(props: dict[str, Any]) -> dict[str, Any]:
    """Props as the engine's gRPC round trip delivers them to a provider: numbers as doubles, None dropped."""
    from pulumi.runtime import rpc

    return rpc.deserialize_properties(_struct(props))


def _plain(struct, keep_unknowns: bool = False) -> dict[str, Any]:
    from pulumi.runtime import rpc

    return {k: v for k, v in rpc.deserialize_properties(struct, keep_unknowns).items() if k != "__provider"}


class ProviderServer:
    """One provider server process; `env` adds to (or, with None values, removes from) its environment."""

    def __init__(self, env: dict[str, str | None] | None = None):
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env.update(RAY_ADDRESS=BOGUS_RAY_ADDRESS, RAY_API_SERVER_ADDRESS=BOGUS_RAY_ADDRESS)
        for key, value in (env or {}).items():
            if value is None:
                self.env.pop(key, None)
            else:
                self.env[key] = value
        self.stderr_lines: list[str] = []

    def __enter__(self) -> ProviderServer:
        import grpc
        from google.protobuf import struct_pb2
        from pulumi.dynamic.dynamic import serialize_provider
        from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

        from components.ray_job import RayJobProvider

        self._pb = provider_pb2
        self.blob = serialize_provider(RayJobProvider())
        self.proc = subprocess.Popen([sys.executable, "-m", "pulumi.dynamic"], cwd=REPO, env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        port = int(self.proc.stdout.readline())
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)
        self.stub.Configure(provider_pb2.ConfigureRequest(args=struct_pb2.Struct()), timeout=120)
        return self

    def __exit__(self, *_exc) -> None:
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line.rstrip("\n"))

    def _call(self, method: str, request, timeout: float):
        import grpc

        try:
            return getattr(self.stub, method)(request, timeout=timeout)
        except grpc.RpcError as err:
            raise ProviderCallError(err.details()) from None

    def _with_provider(self, props: dict[str, Any]):
        return _struct({**props, "__provider": self.blob})

    def check(self, news: dict[str, Any], olds: dict[str, Any] | None = None) -> tuple[dict, set]:
        resp = self._call("Check", self._pb.CheckRequest(
            urn=URN, olds=self._with_provider(olds) if olds else _struct({}), news=self._with_provider(news)), 120)
        return _plain(resp.inputs, True), {(f.property, f.reason) for f in resp.failures}

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]):
        return self._call("Diff", self._pb.DiffRequest(
            id=id_, urn=URN, olds=self._with_provider(olds), news=self._with_provider(news)), 120)

    def create(self, props: dict[str, Any], timeout: float = 600) -> tuple[str, dict[str, Any]]:
        resp = self._call("Create", self._pb.CreateRequest(urn=URN, properties=self._with_provider(props)), timeout)
        return resp.id, _plain(resp.properties)

    def read(self, id_: str, props: dict[str, Any], timeout: float = 300) -> tuple[str, dict, dict]:
        resp = self._call("Read", self._pb.ReadRequest(
            id=id_, urn=URN, properties=self._with_provider(props), inputs=self._with_provider(props)), timeout)
        return resp.id, _plain(resp.properties), _plain(resp.inputs)

    def delete(self, id_: str, props: dict[str, Any], timeout: float = 300) -> None:
        self._call("Delete", self._pb.DeleteRequest(id=id_, urn=URN, properties=self._with_provider(props)), timeout)
