#!/usr/bin/env python3
"""A TCP proxy that adds a fixed delay to every chunk it forwards, each way: a stand-in for a
git server far away (benchmarks only; tests use real servers without it).

Every chunk read from one side (one `recv`, at most --chunk bytes) waits --delay-ms before it is
written to the other side, in order, so a request of k chunks costs k delays in that direction.
Each connection gets its own upstream connection.

Usage: scripts/latency-proxy.py --listen PORT --target HOST:PORT [--delay-ms 30] [--chunk 65536]
Also importable: `start(listen_port, target_host, target_port, delay_ms)` runs it in a thread.
"""
import argparse
import asyncio
import sys
import threading


async def _pipe(reader, writer, delay, chunk):
    try:
        while True:
            data = await reader.read(chunk)
            if not data:
                break
            await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:  # noqa: BLE001 (already closed)
            pass


async def _serve(listen_port, target_host, target_port, delay, chunk, ready=None):
    async def handle(client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, upstream_writer, delay, chunk),
                             _pipe(upstream_reader, client_writer, delay, chunk))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port, backlog=1024)
    if ready is not None:
        ready.set()
    async with server:
        await server.serve_forever()


def start(listen_port, target_host, target_port, delay_ms, chunk=65536):
    """Runs the proxy in a daemon thread; returns once it listens."""
    ready = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(_serve(listen_port, target_host, target_port, delay_ms / 1000, chunk, ready)),
        daemon=True)
    thread.start()
    if not ready.wait(10):
        raise SystemExit("the latency proxy did not start")
    return thread


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--target", required=True, help="HOST:PORT")
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--chunk", type=int, default=65536)
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    asyncio.run(_serve(args.listen, host, int(port), args.delay_ms / 1000, args.chunk))


if __name__ == "__main__":
    sys.exit(main())
