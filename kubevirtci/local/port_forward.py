"""Publishes the API server on a host loopback port, as Docker's userland proxy publishes
a kind cluster's API port: it listens on the host, then moves into the cluster's network
namespace, so that every connection it opens reaches the API server there. TLS passes
through untouched (the client verifies the API server's certificate end to end).

Standalone (standard library only), run as a supervised process of the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import socket
import sys

CLONE_NEWNET = 0x40000000


def enter_netns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve(listener: socket.socket, host: str, port: int) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(host, port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def main() -> int:
    parser = argparse.ArgumentParser(prog="port_forward")
    parser.add_argument("--listen", required=True, help="host loopback HOST:PORT")
    parser.add_argument("--netns", required=True, help="network namespace file")
    parser.add_argument("--target", required=True, help="HOST:PORT in that namespace")
    args = parser.parse_args()
    listen_host, listen_port = args.listen.rsplit(":", 1)
    target_host, target_port = args.target.rsplit(":", 1)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((listen_host, int(listen_port)))
    listener.listen(128)
    # Single-threaded here: setns applies to the whole process from now on; the
    # listening socket stays in the host's namespace.
    enter_netns(args.netns)
    print(f"forwarding {args.listen} -> {args.target} in {args.netns}", flush=True)
    asyncio.run(serve(listener, target_host, int(target_port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
