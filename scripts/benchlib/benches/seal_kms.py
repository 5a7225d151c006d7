"""What a fresh data key per write costs (issue 15): warm KMS POSTs of two binaries side by side.

Warm POST latency through `gitstate serve` with a KMS key on moto, for two gitstate binaries side
by side (e.g. before: the stored data key reused, no KMS call on a warm write; after: one KMS
Encrypt per write per key), requests interleaved so both see the same machine noise; plus moto's
own KMS Encrypt latency, measured directly, and the same POST with an age recipient (a local
wrap) for reference.

Usage: scripts/bench seal-kms --before BIN --after BIN [--runs 200] [--size 10240]
Needs moto (scripts/install-test-deps.sh puts it in $GITSTATE_TOOLS/moto-5.2.5).
Prints markdown rows for docs/BENCHMARKS.md.
"""
import base64
import os
import shutil
import tempfile
import time

from benchlib import support as s
from benchlib.benches import encryption as enc


def add_arguments(parser):
    """--before, --after, --runs, --size."""
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size", type=int, default=10240)


def direct_encrypt(endpoint, arn, runs):
    """Milliseconds of moto's Encrypt of a 32-byte data key, from Python (no gitstate involved)."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        s.kms(endpoint, "TrentService.Encrypt", {
            "KeyId": arn, "Plaintext": base64.b64encode(os.urandom(32)).decode(),
            "EncryptionContext": {"gitstate_repository": "default", "gitstate_path": "bench.tfstate"}})
        samples.append(s.ms_since(start))
    return samples


def run(args):
    """The direct Encrypt, the four servers' interleaved POSTs, then the rows."""
    root = tempfile.mkdtemp(prefix="gitstate-bench-seal-kms-")
    moto, servers = None, {}
    try:
        moto, endpoint = s.start_moto()
        arn = s.moto_kms_key(endpoint)
        aws = s.moto_env(endpoint)
        direct = direct_encrypt(endpoint, arn, args.runs)
        for name, binary, flags in [
            ("before, KMS", args.before, ["--kms-arn", arn]),
            ("after, KMS", args.after, ["--kms-arn", arn]),
            ("before, age", args.before, ["--age-recipient", enc.AGE_RECIPIENT]),
            ("after, age", args.after, ["--age-recipient", enc.AGE_RECIPIENT]),
        ]:
            server, _ = enc.serve_encrypted(binary, root, ["--encryption-mode", "all", *flags], aws)
            client = server.client()
            client.request("POST", "/state/default/bench.tfstate", enc.state_body(1, args.size))
            servers[name] = (server, client, [])

        bodies = [enc.state_body(serial, args.size) for serial in range(2, args.runs + 2)]
        for body in bodies:
            for _, client, samples in servers.values():
                start = time.perf_counter()
                client.request("POST", "/state/default/bench.tfstate", body)
                samples.append(s.ms_since(start))
    finally:
        for server, _, _ in servers.values():
            server.stop()
        s.stop(moto, timeout=10)
        shutil.rmtree(root, ignore_errors=True)

    s.table_header(f"measurement ({len(bodies[0]):,}-byte state, {args.runs} runs, interleaved)",
                   "median (min–max) ms")
    print(f"| moto KMS Encrypt of a data key, direct from Python | {s.cell(direct)} |")
    for name, (_, _, samples) in servers.items():
        print(f"| warm POST, {name} | {s.cell(samples)} |")
