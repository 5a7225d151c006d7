//! Client certificates as callers (mTLS, `auth { certificate { … } }`, DESIGN §6): each TLS
//! connection remembers the subject of the client certificate its handshake verified, and a
//! request on it that carries no `Authorization` of its own is given the credentials of the
//! team caller that subject maps to (the registry's [`StoreRegistry::certificate_caller`]). A
//! request with its own credentials is checked on those; an unmapped certificate is only the
//! connection's gate.

use std::sync::Arc;

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::IncomingStream;
use base64::Engine;
use gitstate_core::StoreRegistry;
use zeroize::Zeroizing;

use crate::tls::TlsListener;

/// The verified client certificate's subject attributes (`None`: no certificate).
#[derive(Debug, Clone, Default)]
pub struct ClientSubject(Option<Arc<Vec<(String, String)>>>);

impl Connected<IncomingStream<'_, TlsListener>> for ClientSubject {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        let (_, session) = stream.io().get_ref();
        let subject = session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| gitstate_app::tokens::subject_attributes(leaf))
            .map(Arc::new);
        ClientSubject(subject)
    }
}

/// Middleware: a request without credentials on a connection whose certificate maps to a
/// caller gets that caller's credentials.
pub async fn certificate_caller(
    State(registry): State<Arc<dyn StoreRegistry>>,
    ConnectInfo(subject): ConnectInfo<ClientSubject>,
    mut request: Request,
    next: Next,
) -> Response {
    if !request.headers().contains_key(header::AUTHORIZATION) {
        let credentials = subject
            .0
            .as_deref()
            .and_then(|subject| registry.certificate_caller(subject));
        if let Some(credentials) = credentials {
            let pair = Zeroizing::new(format!("{}:{}", credentials.username, credentials.password));
            let value = Zeroizing::new(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair.as_bytes())
            ));
            if let Ok(mut value) = HeaderValue::from_str(&value) {
                value.set_sensitive(true);
                request.headers_mut().insert(header::AUTHORIZATION, value);
            }
        }
    }
    next.run(request).await
}
