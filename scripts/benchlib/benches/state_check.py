"""What checking a state body costs: `gitstate_statefile::read` on Terraform-shaped states,
and `statefile::check` with the catalog's facts (a POST's one pass when there is a catalog).

Builds and runs `cargo run --release -p gitstate-statefile --example statefile_speed`, which reads
states of --resources `aws_instance` resources (each ~800 bytes pretty-printed) enough times for
about 200 MB each and reports the medians. The CPU a whole POST costs is `scripts/bench cpu`.

Usage: scripts/bench state-check [--resources 1,2000,40000]
Prints a markdown table.
"""
import subprocess

from benchlib import support as s


def add_arguments(parser):
    """--resources."""
    parser.add_argument("--resources", type=s.int_list, default=[1, 2000, 40000])


def run(args):
    """Runs the example and prints its lines as a table."""
    out = subprocess.run(
        ["cargo", "run", "--quiet", "--release", "-p", "gitstate-statefile", "--example",
         "statefile_speed", "--"] + [str(n) for n in args.resources],
        cwd=s.ROOT, check=True, capture_output=True, text=True).stdout
    print("| resources | bytes | reads | median ms / read | MB/s | median ms / read with the catalog's facts |")
    print("|---|---|---|---|---|---|")
    for resources, line in zip(args.resources, out.split("\n")):
        size, reads, ms, rate, with_facts = line.split()
        print(f"| {resources} | {size} | {reads} | {ms} | {rate} | {with_facts} |")
    return 0
