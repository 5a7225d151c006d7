//! The metrics exporters (docs/METRICS.md), each installed once per process as the `metrics`
//! facade's recorder: Prometheus for `gitstate serve` and `gitstate wrap`, rendered at
//! `/_/metrics` (behind the API's auth, see [`gitstate_http`]); CloudWatch Embedded Metric Format
//! for Lambda, one JSON line on stdout after each invocation, which CloudWatch Logs turns into
//! metrics without an agent. The operator commands install none, so their facade calls cost
//! nothing.
//!
//! Each exporter is a cargo feature of this crate (`prometheus`, `emf`; both by default): the
//! Lambda function is built with `emf` only, the command line with `prometheus`. Without its
//! feature, an exporter is `None` and its type has no values.

#[cfg(feature = "prometheus")]
use std::sync::Arc;
use std::sync::OnceLock;
#[cfg(feature = "prometheus")]
use std::time::Duration;

#[cfg(feature = "emf")]
use metrics_cloudwatch_embedded::Collector;
#[cfg(feature = "prometheus")]
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// The Prometheus exporter's handle.
#[cfg(feature = "prometheus")]
pub type Prometheus = metrics_exporter_prometheus::PrometheusHandle;
/// The Prometheus exporter's handle (this build has no exporter).
#[cfg(not(feature = "prometheus"))]
#[derive(Clone)]
pub enum Prometheus {}

/// The EMF exporter.
#[cfg(feature = "emf")]
pub type Emf = &'static Collector;
/// The EMF exporter (this build has none).
#[cfg(not(feature = "emf"))]
#[derive(Clone, Copy)]
pub enum Emf {}

/// Histogram buckets of every `*_seconds` series: 1 ms to 60 s.
#[cfg(feature = "prometheus")]
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of the histograms that count writes (a push's commits, the remote's queue): up to
/// the most writes one push carries (64).
#[cfg(feature = "prometheus")]
const WRITES_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// How often the exporter's histograms are folded in when nobody scrapes (bounds their memory).
#[cfg(feature = "prometheus")]
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static EXPORTER: OnceLock<Option<Prometheus>> = OnceLock::new();

/// The process's exporter, installed on first use. `None` when another recorder was installed
/// first (logged; the server serves without metrics then), or in a build without it.
pub fn prometheus() -> Option<Prometheus> {
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
#[cfg(feature = "prometheus")]
pub fn render(handle: &Prometheus) -> gitstate_http::MetricsRender {
    let handle = handle.clone();
    Arc::new(move || handle.render())
}

/// What `/_/metrics` renders (never called: this build has no exporter).
#[cfg(not(feature = "prometheus"))]
pub fn render(handle: &Prometheus) -> gitstate_http::MetricsRender {
    match *handle {}
}

#[cfg(not(feature = "prometheus"))]
fn install() -> Result<Prometheus, &'static str> {
    Err("this build has no Prometheus exporter")
}

#[cfg(feature = "prometheus")]
fn install() -> Result<Prometheus, metrics_exporter_prometheus::BuildError> {
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
    gitstate_wire::metrics::describe();
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

#[cfg(feature = "emf")]
static EMF: OnceLock<Option<Emf>> = OnceLock::new();

/// The Lambda's exporter (this build has none).
#[cfg(not(feature = "emf"))]
pub fn emf() -> Option<Emf> {
    None
}

/// Writes the EMF document (never called: this build has no EMF exporter).
#[cfg(not(feature = "emf"))]
pub fn flush_emf(collector: Emf) {
    match collector {}
}

/// The Lambda's exporter, installed on first use. `None` when another recorder was installed
/// first (logged; the function runs without metrics then).
#[cfg(feature = "emf")]
pub fn emf() -> Option<Emf> {
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
                gitstate_wire::metrics::describe();
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
#[cfg(feature = "emf")]
pub fn flush_emf(collector: &Collector) {
    let stdout = std::io::stdout();
    if let Err(e) = collector.flush(stdout.lock()) {
        tracing::warn!(error = %e, "the EMF metrics could not be written");
    }
}
