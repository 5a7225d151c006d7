"""One module per benchmark, each with a docstring (its first line is its summary in
`scripts/bench --help`), `add_arguments(parser)` and `run(args)`."""

# subcommand name -> module under benchlib.benches, in the order `scripts/bench --help` lists them
BENCHES = {
    "http": "http",
    "cpu": "cpu",
    "state-check": "state_check",
    "cold-read": "cold_read",
    "scaling": "scaling",
    "many-states": "many_states",
    "write-queue": "write_queue",
    "cycles": "cycles",
    "wire-bytes": "wire_bytes",
    "freeze": "freeze",
    "large-state": "large_state",
    "embedded-lock": "embedded_lock",
    "junk-flood": "junk_flood",
    "lock-requests": "lock_requests",
    "workspaces": "workspaces",
    "cache-budget": "cache_budget",
    "encryption": "encryption",
    "seal-kms": "seal_kms",
    "catalog": "catalog",
    "catalog-index": "catalog_index",
    "catalog-rebuild": "catalog_rebuild",
    "catalog-write": "catalog_write",
    "terraform": "terraform",
    "lambda-init": "lambda_init",
    "lambda-warm": "lambda_warm",
}
