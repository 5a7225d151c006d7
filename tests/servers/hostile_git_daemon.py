#!/usr/bin/env python3
"""A git:// server that answers as a hostile or broken one would, to prove gitstate's limits on
what a remote may send (docs/SECURITY.md, "A malicious git remote").

Every connection's request line (`git-upload-pack /x.git\\0host=…\\0`) is read, then:

  drip        a legal advertisement, one byte every --interval seconds, never ending (the refs
              repeat). A socket read timeout never fires: a byte always comes before it.
  flood       a legal advertisement that never ends: ref lines as fast as the socket takes them.
  pack-flood  a legal advertisement of one branch; then, after the client's wants (and its
              `deepen`, answered with a `shallow` line), a pack on side-band 1 whose header
              promises a million objects (tiny valid blobs, 11 MB in all) and keeps sending entries (a
              header of 2^31 objects gix refuses by itself: it cannot allocate the index).
  zip-bomb    a legal advertisement of one branch whose tip is a real commit; then (as for
              pack-flood) a valid, complete pack of that commit, its tree and one blob of
              --bomb-mib MiB of zeros (256 by default), which zlib compresses about 1000:1. The
              pack is made once at start, streaming (the blob is never held in memory).

When the client goes away, one line `closed MODE after N bytes` is printed (flushed), so a test
sees that gitstate gave up on the answer rather than leaving a worker reading it.

    hostile_git_daemon.py --port PORT --mode drip|flood|pack-flood|zip-bomb [--interval 0.2]
                          [--bomb-mib 256]

Python standard library only; binds 127.0.0.1.
"""

import argparse
import hashlib
import socket
import struct
import sys
import threading
import time
import zlib

TIP = "1" * 40


def pkt(data: bytes) -> bytes:
    return b"%04x" % (len(data) + 4) + data


def read_pkt(conn) -> bytes | None:
    """One pkt-line's payload; None for a flush; raises EOFError when the client is gone."""
    head = read_exact(conn, 4)
    size = int(head, 16)
    if size == 0:
        return None
    return read_exact(conn, size - 4)


def read_exact(conn, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def ref_lines():
    yield pkt(f"{TIP} refs/heads/main\0shallow no-progress\n".encode())
    n = 0
    while True:
        yield pkt(f"{TIP} refs/heads/locks/flood/{n:09d}\n".encode())
        n += 1


def blob_entry() -> bytes:
    # Object type 3 (blob), size 1: one header byte, then the zlib stream of b"x".
    return bytes([0x31]) + zlib.compress(b"x")


def entry_header(kind: int, size: int) -> bytes:
    """A pack entry's type and inflated size (git's variable-length encoding)."""
    out = bytearray([(kind << 4) | (size & 0x0F)])
    size >>= 4
    while size:
        out[-1] |= 0x80
        out.append(size & 0x7F)
        size >>= 7
    return bytes(out)


def zip_bomb_pack(mib: int) -> tuple[str, bytes]:
    """(commit id, pack): a commit whose tree holds `a.tfstate`, a blob of `mib` MiB of zeros."""
    size = mib * 1024 * 1024
    chunk = bytes(1024 * 1024)
    blob_id = hashlib.sha1(b"blob %d\0" % size)
    deflate = zlib.compressobj(9)
    compressed = []
    for _ in range(mib):
        blob_id.update(chunk)
        compressed.append(deflate.compress(chunk))
    compressed.append(deflate.flush())
    blob = entry_header(3, size) + b"".join(compressed)
    tree_body = b"100644 a.tfstate\0" + blob_id.digest()
    tree_id = hashlib.sha1(b"tree %d\0" % len(tree_body) + tree_body).hexdigest()
    commit_body = (
        f"tree {tree_id}\nauthor A <a@example.com> 0 +0000\n"
        "committer A <a@example.com> 0 +0000\n\nbomb\n"
    ).encode()
    commit_id = hashlib.sha1(b"commit %d\0" % len(commit_body) + commit_body).hexdigest()
    pack = b"PACK" + struct.pack(">II", 2, 3)
    pack += entry_header(1, len(commit_body)) + zlib.compress(commit_body)
    pack += entry_header(2, len(tree_body)) + zlib.compress(tree_body)
    pack += blob
    return commit_id, pack + hashlib.sha1(pack).digest()


BOMB = None  # (commit id, pack) in zip-bomb mode


def serve(conn, mode: str, interval: float) -> None:
    sent = 0
    try:
        read_pkt(conn)  # the request line
        if mode == "drip":
            for line in ref_lines():
                for byte in line:
                    conn.sendall(bytes([byte]))
                    sent += 1
                    time.sleep(interval)
        elif mode == "flood":
            batch = b""
            for line in ref_lines():
                batch += line
                if len(batch) >= 65536:
                    conn.sendall(batch)
                    sent += len(batch)
                    batch = b""
        elif mode in ("pack-flood", "zip-bomb"):
            tip = BOMB[0] if mode == "zip-bomb" else TIP
            caps = "multi_ack_detailed side-band-64k shallow no-progress"
            advert = pkt(f"{tip} refs/heads/main\0{caps}\n".encode()) + b"0000"
            conn.sendall(advert)
            sent += len(advert)
            while read_pkt(conn) is not None:  # wants, deepen
                pass
            conn.sendall(pkt(f"shallow {tip}\n".encode()) + b"0000")
            while True:  # rounds of haves (each ends with a flush: no common commit), then done
                line = read_pkt(conn)
                if line is None:
                    conn.sendall(pkt(b"NAK\n"))
                elif line.strip() == b"done":
                    break
            conn.sendall(pkt(b"NAK\n"))
            if mode == "zip-bomb":
                pack = BOMB[1]
                for at in range(0, len(pack), 65515):
                    band = pkt(b"\x01" + pack[at : at + 65515])
                    conn.sendall(band)
                    sent += len(band)
                conn.sendall(b"0000")
                # Wait for the client to hang up.
                while conn.recv(65536):
                    pass
                return
            # The pack on side-band channel 1, in pkt-lines of at most 65520 bytes.
            conn.sendall(pkt(b"\x01PACK" + struct.pack(">II", 2, 1_000_000)))
            entry = blob_entry()
            band = pkt(b"\x01" + entry * (65000 // len(entry)))
            while True:
                conn.sendall(band)
                sent += len(band)
    except (EOFError, OSError):
        pass
    finally:
        print(f"closed {mode} after {sent} bytes", flush=True)
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--mode", choices=["drip", "flood", "pack-flood", "zip-bomb"], required=True
    )
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--bomb-mib", type=int, default=256)
    args = parser.parse_args()
    if args.mode == "zip-bomb":
        global BOMB
        BOMB = zip_bomb_pack(args.bomb_mib)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", args.port))
    server.listen(16)
    print(f"listening on {args.port} ({args.mode})", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn, args.mode, args.interval), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
