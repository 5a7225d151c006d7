//! gitstate's HTTP layer: the Terraform/OpenTofu `http` backend protocol (DESIGN §2) as one axum
//! router. It parses requests, calls [`gitstate_core::Backend`] on a store from the
//! [`StoreRegistry`], and maps results to status codes. It knows nothing of git.
//!
//! The same router is served by the standalone server (`axum::serve`) and by Lambda.

mod address;
mod error;
mod handlers;
mod inspect;
mod ui;

use std::sync::Arc;

use axum::routing::{any, get};
use axum::Router;
use gitstate_core::{Backend, Catalog, StoreRegistry};

pub use address::Address;
pub use error::ApiError;

/// What every request handler shares.
#[derive(Clone)]
pub struct AppState {
    /// Repository names (and allowed ad-hoc URLs) → stores.
    pub registry: Arc<dyn StoreRegistry>,
    /// Protocol policy (retries, maximum state size).
    pub backend: Backend,
    /// The catalog told about every successful change, off the request's path (`None`: off).
    pub catalog: Option<Arc<dyn Catalog>>,
}

/// Builds the router: `/state/{repo}/{path}`, `/lock/{repo}/{path}`, the query-style address on
/// `/`, `/_/health`, and the read-only operational endpoints under `/_/` (states, history,
/// locks, catalog).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/_/health", get(handlers::health))
        .route("/_/states/{repo}", get(inspect::states))
        .route("/_/history/{repo}/{*path}", get(inspect::history))
        .route("/_/locks/{repo}", get(inspect::locks))
        .route("/_/catalog/states", get(inspect::catalog_states))
        .route(
            "/_/catalog/audit/{repo}/{*path}",
            get(inspect::catalog_audit),
        )
        .route("/_/catalog/find", get(inspect::catalog_find))
        .route("/_/catalog/duplicates", get(inspect::catalog_duplicates))
        .route("/_/ui", get(ui::index))
        .route("/_/ui/{repo}/{*path}", get(ui::state))
        .route("/state/{*rest}", any(handlers::path_style))
        .route("/lock/{*rest}", any(handlers::path_style))
        .route("/", any(handlers::query_style))
        .fallback(handlers::not_found)
        .layer(axum::middleware::from_fn(handlers::request_context))
        .with_state(state)
}
