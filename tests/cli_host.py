"""A language host for the real Pulumi CLI: the Python SDK's own Automation API server, serving one program.

The Python language host (`pulumi-language-python`) is a Go module the module proxy does not serve here (its
`@v/list` answers 403 "This module version is not available"), so the real-CLI tier gives the CLI the language
host the Python SDK ships for inline programs (`pulumi.automation._server.LanguageServer`, what
`Stack.up(program=...)` starts); the CLI reaches it through its `--client` flag, as the Automation API does.
Everything else is the real CLI: the project and stack load, the config merge and type checks, secrets
decryption, the engine and the dynamic-provider plugin.

Run as `python -m tests.cli_host MODULE:FUNCTION`; prints the port on its first line, serves until stdin closes.
"""

from __future__ import annotations

import importlib
import sys
from concurrent import futures


def main(target: str) -> None:
    import grpc
    from pulumi.automation._server import LanguageServer
    from pulumi.runtime.proto import language_pb2_grpc

    module, _, name = target.partition(":")
    program = getattr(importlib.import_module(module), name)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.max_receive_message_length", 1 << 30)])
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(LanguageServer(program), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()  # the test closes stdin (or dies) when the CLI command is done
    server.stop(grace=None)


if __name__ == "__main__":
    main(sys.argv[1])
