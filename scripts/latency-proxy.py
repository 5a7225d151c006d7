#!/usr/bin/env python3
"""A TCP proxy that adds a fixed delay to every chunk it forwards, each way, can limit each
connection's rate, and counts the bytes it forwards: a stand-in for a git server far away
(benchmarks only; tests use real servers without it).

Every chunk read from one side (one `recv`, at most --chunk bytes) waits --delay-ms before it is
written to the other side, in order, so a request of k chunks costs k delays in that direction.
With --rate-mbps X (megabytes per second, 12.5 = 100 Mbit/s), each connection, each direction,
also sends no faster than X: a chunk of n bytes leaves n / X seconds after the previous one has
left (or after its delay, whichever is later), in order. 0 = unlimited. Each connection gets its
own upstream connection.

A link that drops: with --cut-percent P, each connection is cut with probability P / 100, after
a random number of bytes (uniform below --cut-within, default 4096) in a random direction: what
passed up to there is forwarded, then both sides are closed.

Bytes forwarded are counted: up (client to target) and down (target to client), connections
accepted, and connections cut. With --stats-port PORT, a connection to 127.0.0.1:PORT gets the
totals so far as one line of text, `UP DOWN CONNECTIONS CUTS`, and is closed.

Usage: scripts/latency-proxy.py --listen PORT --target HOST:PORT [--delay-ms 30] [--chunk 65536]
                                [--rate-mbps 0] [--cut-percent 0] [--cut-within 4096]
                                [--stats-port PORT]
Also importable: `start(listen_port, target_host, target_port, delay_ms, rate_mbps=0)` runs it in
a thread; the thread's `counters` (a Counters) holds the totals.
"""
import argparse
import asyncio
import random
import sys
import threading
import time


class Counters:
    """Bytes forwarded up (client to target) and down (target to client), connections accepted.
    Written by the proxy's event loop only; read from anywhere (ints, read whole)."""

    def __init__(self):
        self.up = 0
        self.down = 0
        self.connections = 0
        self.cuts = 0

    def totals(self):
        """(up, down, connections, cuts)."""
        return self.up, self.down, self.connections, self.cuts


async def _pipe(reader, writer, delay, chunk, rate, count, cut=None):
    """Forwards reader to writer chunk by chunk: each waits `delay` seconds, then (with `rate`,
    bytes per second) until the previous chunk has had its n / rate seconds; `count(n)` after
    each write. With `cut` (bytes, and a function that closes both sides), once that many bytes
    passed, the rest is dropped and both sides are closed."""
    free_at = 0.0  # when this direction's "wire" is free again (monotonic seconds)
    passed = 0
    try:
        while True:
            data = await reader.read(chunk)
            if not data:
                break
            if cut is not None and passed + len(data) > cut[0]:
                writer.write(data[:cut[0] - passed])
                cut[1]()
                break
            passed += len(data)
            await asyncio.sleep(delay)
            if rate:
                now = time.monotonic()
                free_at = max(now, free_at) + len(data) / rate
                await asyncio.sleep(free_at - now)
            writer.write(data)
            count(len(data))
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:  # noqa: BLE001 (already closed)
            pass


async def _serve(listen_port, target_host, target_port, delay, chunk, rate, counters, stats_port=None,
                 ready=None, cut_percent=0.0, cut_within=4096):
    def up(n):
        counters.up += n

    def down(n):
        counters.down += n

    async def handle(client_reader, client_writer):
        counters.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        up_cut = down_cut = None
        if cut_percent and random.random() * 100 < cut_percent:
            def close_both():
                counters.cuts += 1
                for side in (client_writer, upstream_writer):
                    side.transport.abort()
            cut = (random.randrange(max(1, cut_within)), close_both)
            if random.random() < 0.5:
                up_cut = cut
            else:
                down_cut = cut
        await asyncio.gather(_pipe(client_reader, upstream_writer, delay, chunk, rate, up, up_cut),
                             _pipe(upstream_reader, client_writer, delay, chunk, rate, down, down_cut))

    async def stats(_reader, writer):
        writer.write(("%d %d %d %d\n" % counters.totals()).encode())
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port, backlog=1024)
    if stats_port:
        await asyncio.start_server(stats, "127.0.0.1", stats_port)
    if ready is not None:
        ready.set()
    async with server:
        await server.serve_forever()


def start(listen_port, target_host, target_port, delay_ms, chunk=65536, rate_mbps=0, stats_port=None):
    """Runs the proxy in a daemon thread; returns it once it listens (`thread.counters`)."""
    ready = threading.Event()
    counters = Counters()
    rate = rate_mbps * 1_000_000
    thread = threading.Thread(
        target=lambda: asyncio.run(_serve(listen_port, target_host, target_port, delay_ms / 1000, chunk,
                                          rate, counters, stats_port, ready)),
        daemon=True)
    thread.counters = counters
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
    parser.add_argument("--rate-mbps", type=float, default=0.0,
                        help="megabytes per second per connection and direction (0: unlimited)")
    parser.add_argument("--cut-percent", type=float, default=0.0,
                        help="share of connections cut at random (after a random number of bytes)")
    parser.add_argument("--cut-within", type=int, default=4096,
                        help="a cut connection is cut before this many bytes of its direction")
    parser.add_argument("--stats-port", type=int, default=0,
                        help="a port answering `UP DOWN CONNECTIONS CUTS` (so far)")
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    asyncio.run(_serve(args.listen, host, int(port), args.delay_ms / 1000, args.chunk,
                       args.rate_mbps * 1_000_000, Counters(), args.stats_port,
                       cut_percent=args.cut_percent, cut_within=args.cut_within))


if __name__ == "__main__":
    sys.exit(main())
