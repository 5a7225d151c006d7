//! The browser rules (docs/SECURITY.md, "a web page in the operator's browser"), as one
//! middleware in front of every route:
//!
//! 1. **DNS rebinding.** On a loopback listener, a request whose `Host` is not `localhost`, a
//!    loopback address (`127.0.0.0/8`, `[::1]`) or a name the operator allowed
//!    (`allowed_hosts`) is refused: a web page whose name an attacker re-pointed at 127.0.0.1
//!    reaches the server with the attacker's name as `Host`. When names are configured, the
//!    rule applies to every listener.
//! 2. **Cross-site requests that change something** (any method but GET, HEAD, OPTIONS: POST,
//!    PUT, DELETE, LOCK, UNLOCK, and the `/lock/` alias) are refused when they carry an
//!    `Origin` header (browsers send it; Terraform and OpenTofu never do), a
//!    `Sec-Fetch-Site` of `cross-site` or `same-site`, or a content type an HTML form can send
//!    without asking the server first (`application/x-www-form-urlencoded`,
//!    `multipart/form-data`, `text/plain`). Terraform and OpenTofu send `application/json`
//!    with every body, and no content type without one.
//!
//! Every refusal is a 403 with one sentence, before anything is read or opened.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Which requests reach the router (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestGuard {
    /// `Some(names)`: the `Host` must be a loopback name or address, or one of `names`
    /// (lower case, without a trailing dot). `None`: any `Host` (a public listener, Lambda).
    hosts: Option<Vec<String>>,
}

impl RequestGuard {
    /// No `Host` rule: for listeners reached by a public name (Lambda, a server behind a load
    /// balancer). The cross-site rules always apply.
    pub fn any_host() -> RequestGuard {
        RequestGuard { hosts: None }
    }

    /// The guard of a server listening on `local`: the `Host` rule when `local` is a loopback
    /// address or when `allowed_hosts` names hosts.
    pub fn for_listener(local: SocketAddr, allowed_hosts: &[String]) -> RequestGuard {
        let names = normalize_hosts(allowed_hosts);
        if local.ip().to_canonical().is_loopback() || !names.is_empty() {
            RequestGuard { hosts: Some(names) }
        } else {
            RequestGuard::any_host()
        }
    }

    /// The guard of an endpoint whose listener is not ours (Lambda): the `Host` rule only when
    /// `allowed_hosts` names hosts (e.g. the Function URL's name or a custom domain).
    pub fn for_names(allowed_hosts: &[String]) -> RequestGuard {
        let names = normalize_hosts(allowed_hosts);
        if names.is_empty() {
            RequestGuard::any_host()
        } else {
            RequestGuard { hosts: Some(names) }
        }
    }

    /// Why `method` with `headers` is refused, or `None` when it may pass.
    pub fn refusal(&self, method: &Method, headers: &HeaderMap) -> Option<String> {
        if let Some(allowed) = &self.hosts {
            if let Some(why) = host_refusal(headers, allowed) {
                return Some(why);
            }
        }
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return None;
        }
        if headers.contains_key(header::ORIGIN) {
            return Some(format!(
                "a {method} that carries an Origin header comes from a web page, and web pages may not change states here; Terraform and OpenTofu send no Origin header"
            ));
        }
        let fetch_site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase());
        if let Some(site @ ("cross-site" | "same-site")) = fetch_site.as_deref() {
            return Some(format!(
                "a {method} with Sec-Fetch-Site: {site} comes from another web site, and web pages may not change states here"
            ));
        }
        let media_type = headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            });
        if let Some(
            form @ ("application/x-www-form-urlencoded" | "multipart/form-data" | "text/plain"),
        ) = media_type.as_deref()
        {
            return Some(format!(
                "a {method} with Content-Type {form} is what an HTML form on any web site can send, so it is refused; send the state or LockInfo as application/json, as Terraform and OpenTofu do"
            ));
        }
        None
    }
}

fn normalize_hosts(hosts: &[String]) -> Vec<String> {
    hosts
        .iter()
        .map(|h| normalize_host(h))
        .filter(|h| !h.is_empty())
        .collect()
}

/// `host` in lower case, without a port or a trailing dot; brackets of an IPv6 literal kept
/// off (`[::1]:80` → `::1`).
fn normalize_host(host: &str) -> String {
    let host = host.trim();
    let bare = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        match host.rsplit_once(':') {
            Some((name, port))
                if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                name
            }
            _ => host,
        }
    };
    bare.trim_end_matches('.').to_ascii_lowercase()
}

/// Why the `Host` header is refused on a guarded listener, or `None`. A request without one
/// (HTTP/1.0) passes: browsers always send it.
fn host_refusal(headers: &HeaderMap, allowed: &[String]) -> Option<String> {
    let raw = headers.get(header::HOST)?;
    let Ok(raw) = raw.to_str() else {
        return Some("the Host header is not readable text".to_owned());
    };
    let host = normalize_host(raw);
    let loopback = host == "localhost"
        || host
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback());
    if loopback || allowed.contains(&host) {
        return None;
    }
    Some(format!(
        "this server listens on loopback and answers only to localhost, loopback addresses and the names in allowed_hosts, not to Host {:?} (a web page using DNS rebinding would send its own name); add the name with --allowed-host or GITSTATE_ALLOWED_HOSTS if you use it",
        gitstate_core::text::escape_controls(raw)
    ))
}

/// The middleware: refuses with 403 what [`RequestGuard::refusal`] refuses.
pub async fn guard(
    State(guard): State<Arc<RequestGuard>>,
    request: Request,
    next: Next,
) -> Response {
    match guard.refusal(request.method(), request.headers()) {
        Some(why) => {
            tracing::info!(reason = %why, "request refused by the browser rules");
            ApiError::Message(StatusCode::FORBIDDEN, why).into_response()
        }
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::any;
    use axum::Router;
    use tower::ServiceExt;

    fn app(guard: RequestGuard) -> Router {
        Router::new()
            .route("/{*rest}", any(|| async { "reached" }))
            .layer(axum::middleware::from_fn_with_state(
                Arc::new(guard),
                super::guard,
            ))
    }

    async fn status(app: &Router, method: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut request = Request::builder()
            .method(method)
            .uri("/state/default/prod.tfstate");
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn loopback() -> RequestGuard {
        RequestGuard::for_listener(
            "127.0.0.1:6061".parse().unwrap(),
            &["States.Example.".into()],
        )
    }

    #[tokio::test]
    async fn terraform_requests_pass() {
        let app = app(loopback());
        for method in ["GET", "HEAD", "POST", "PUT", "DELETE", "LOCK", "UNLOCK"] {
            let (code, body) = status(
                &app,
                method,
                &[
                    ("host", "127.0.0.1:6061"),
                    ("content-type", "application/json"),
                    ("content-md5", "1B2M2Y8AsgTpgAmY7PhCfg=="),
                    ("user-agent", "Go-http-client/1.1"),
                ],
            )
            .await;
            assert_eq!(code, 200, "{method}: {body}");
        }
        // Force-unlock and DELETE carry no body and no content type.
        assert_eq!(
            status(&app, "UNLOCK", &[("host", "localhost:6061")])
                .await
                .0,
            200
        );
    }

    #[tokio::test]
    async fn rebinding_hosts_are_refused_on_loopback() {
        let app = app(loopback());
        for host in [
            "localhost",
            "LOCALHOST:6061",
            "localhost.:6061",
            "127.0.0.1",
            "127.9.8.7:1",
            "[::1]:6061",
            "[::ffff:127.0.0.1]:6061",
            "states.example",
            "states.example.:6061",
        ] {
            assert_eq!(
                status(&app, "GET", &[("host", host)]).await.0,
                200,
                "{host}"
            );
        }
        for host in [
            "attacker.example",
            "attacker.example:6061",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "10.0.0.1",
            "[::2]:6061",
            "0.0.0.0:6061",
            "states.example.evil",
        ] {
            let (code, body) = status(&app, "GET", &[("host", host)]).await;
            assert_eq!(code, 403, "{host}");
            assert!(body.contains("allowed_hosts"), "{body}");
        }
        // Without a Host header (HTTP/1.0, never a browser) the request passes.
        assert_eq!(status(&app, "GET", &[]).await.0, 200);
    }

    #[tokio::test]
    async fn public_listeners_take_any_host_unless_names_are_configured() {
        let open = app(RequestGuard::for_listener(
            "0.0.0.0:80".parse().unwrap(),
            &[],
        ));
        assert_eq!(
            status(&open, "GET", &[("host", "gitstate.example")])
                .await
                .0,
            200
        );
        let named = app(RequestGuard::for_listener(
            "0.0.0.0:80".parse().unwrap(),
            &["gitstate.example".into()],
        ));
        assert_eq!(
            status(&named, "GET", &[("host", "gitstate.example")])
                .await
                .0,
            200
        );
        assert_eq!(
            status(&named, "GET", &[("host", "other.example")]).await.0,
            403
        );
        assert_eq!(RequestGuard::any_host(), RequestGuard::default());
        assert_eq!(RequestGuard::for_names(&[]), RequestGuard::any_host());
        let lambda = app(RequestGuard::for_names(&[
            "abc.lambda-url.eu-west-1.on.aws".into(),
        ]));
        assert_eq!(
            status(
                &lambda,
                "GET",
                &[("host", "abc.lambda-url.eu-west-1.on.aws")]
            )
            .await
            .0,
            200
        );
        assert_eq!(
            status(&lambda, "GET", &[("host", "evil.example")]).await.0,
            403
        );
    }

    #[tokio::test]
    async fn cross_site_changes_are_refused() {
        let app = app(RequestGuard::any_host());
        for method in ["POST", "PUT", "DELETE", "LOCK", "UNLOCK"] {
            for headers in [
                &[("origin", "https://attacker.example")][..],
                &[("origin", "null")],
                &[("origin", "http://127.0.0.1:6061")],
                &[("sec-fetch-site", "cross-site")],
                &[("sec-fetch-site", "same-site")],
                &[("content-type", "text/plain")],
                &[("content-type", "text/plain;charset=UTF-8")],
                &[("content-type", "Application/X-WWW-Form-Urlencoded")],
                &[("content-type", "multipart/form-data; boundary=x")],
            ] {
                let (code, body) = status(&app, method, headers).await;
                assert_eq!(code, 403, "{method} {headers:?}: {body}");
                assert!(body.contains(method), "{body}");
            }
        }
        // Reads are not changes: an Origin on GET passes (a cross-site page cannot read the
        // answer, and on loopback the Host rule stops rebinding).
        assert_eq!(
            status(&app, "GET", &[("origin", "https://a.example")])
                .await
                .0,
            200
        );
        assert_eq!(
            status(&app, "POST", &[("sec-fetch-site", "same-origin")])
                .await
                .0,
            200
        );
    }

    #[test]
    fn hosts_are_normalized() {
        assert_eq!(normalize_host("Example.COM.:443"), "example.com");
        assert_eq!(normalize_host("[::1]:80"), "::1");
        assert_eq!(normalize_host("::1"), "::1");
        assert_eq!(normalize_host("localhost"), "localhost");
    }
}
