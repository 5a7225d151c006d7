"""The benchmark harness behind scripts/bench: `support` holds what every benchmark shares
(ports, child processes, git servers, gitstate servers, moto, the latency proxy, HTTP, timing,
statistics, tables); `benches` holds one module per benchmark (`add_arguments`, `run`)."""
