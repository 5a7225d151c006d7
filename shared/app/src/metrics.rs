//! The metrics exporters (docs/METRICS.md), each installed once per process as the `metrics`
//! facade's recorder: Prometheus for `gitstate serve` and `gitstate wrap`, rendered at
//! `/_/metrics` (behind the API's auth, see [`gitstate_http`]); CloudWatch Embedded Metric Format
//! for Lambda, one JSON line on stdout after each invocation, which CloudWatch Logs turns into
//! metrics without an agent. The operator commands install none, so their facade calls cost
//! nothing.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_cloudwatch_embedded::Collector;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Histogram buckets of every `*_seconds` series: 1 ms to 60 s.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of the histograms that count writes (a push's commits, the remote's queue): up to
/// the most writes one push carries (64).
const WRITES_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// How often the exporter's histograms are folded in when nobody scrapes (bounds their memory).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static EXPORTER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's exporter, installed on first use. `None` when another recorder was installed
/// first (logged; the server serves without metrics then).
pub fn prometheus() -> Option<PrometheusHandle> {
    EXPORTER
        .get_or_init(|| match install() {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::warn!(error = %e, "the metrics exporter could not be installed; /_/metrics answers 404");
                None
            }
        })
        .clone()
}

/// What `/_/metrics` renders: the exporter's text.
pub fn render(handle: PrometheusHandle) -> gitstate_http::MetricsRender {
    Arc::new(move || handle.render())
}

fn install() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full(gitstate_core::metrics::BATCH_COMMITS.into()),
            WRITES_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(gitstate_core::metrics::QUEUE_PENDING.into()),
            WRITES_BUCKETS,
        )?
        .install_recorder()?;
    gitstate_core::metrics::describe();
    let upkeep = handle.clone();
    let spawned = std::thread::Builder::new()
        .name("gitstate-metrics".into())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_EVERY);
            upkeep.run_upkeep();
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "the metrics upkeep thread could not start; histograms are folded in at each scrape only");
    }
    Ok(handle)
}

/// The CloudWatch namespace of the Lambda's metrics.
pub const EMF_NAMESPACE: &str = "gitstate";

static EMF: OnceLock<Option<&'static Collector>> = OnceLock::new();

/// The Lambda's exporter, installed on first use. `None` when another recorder was installed
/// first (logged; the function runs without metrics then).
pub fn emf() -> Option<&'static Collector> {
    *EMF.get_or_init(|| {
        let mut builder = metrics_cloudwatch_embedded::Builder::new()
            .cloudwatch_namespace(EMF_NAMESPACE);
        // Every series carries the function's name, so stacks sharing an account stay apart
        // (the template's alarms select it).
        if let Ok(name) = std::env::var("AWS_LAMBDA_FUNCTION_NAME") {
            builder = builder.with_dimension("FunctionName", name);
        }
        match builder.init() {
            Ok(collector) => {
                gitstate_core::metrics::describe();
                Some(collector)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the EMF metrics exporter could not be installed; no metrics are written");
                None
            }
        }
    })
}

/// Writes what `collector` recorded since the last call as one EMF document on stdout (whole,
/// under stdout's lock, so log lines never interleave with it).
pub fn flush_emf(collector: &Collector) {
    let stdout = std::io::stdout();
    if let Err(e) = collector.flush(stdout.lock()) {
        tracing::warn!(error = %e, "the EMF metrics could not be written");
    }
}
