//! Error answers (DESIGN §2), rendered here and nowhere else. A caller reads one sentence saying
//! what failed, in its terms, and what to do; a 5xx answer also carries the request id (equal to
//! its `x-request-id` header). The cause (the whole error chain: a git server's or a key service's
//! own text, paths of this machine, library names) goes to the log inside the request's span, never
//! into an answer.

use std::future::Future;
use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use gitstate_core::{BackendError, CatalogError, RegistryError, SealError, StoreError};

/// Seconds a client is told to wait before retrying a 503.
const RETRY_AFTER_SECONDS: &str = "2";

/// The header that carries a request's id (set on every answer by `handlers::request_context`).
pub const REQUEST_ID_HEADER: &str = "x-request-id";

tokio::task_local! {
    /// The id of the request being answered, for the answer's body.
    static REQUEST_ID: Arc<str>;
}

/// Runs `answer` (a request's whole handling) with `id` as the id its error answers carry.
pub(crate) async fn with_request_id<F: Future>(id: Arc<str>, answer: F) -> F::Output {
    REQUEST_ID.scope(id, answer).await
}

/// The id of the request being answered, when one is (inside [`with_request_id`]).
fn current_request_id() -> Option<Arc<str>> {
    REQUEST_ID.try_with(Arc::clone).ok()
}

/// `error` and each of its sources, joined by `: ` (for the log).
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    text
}

/// What a failure's sentence ends with: what the caller can do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// The sentence says it all (what to fix, or what the stored state needs).
    Nothing,
    /// The condition passes: retry in a moment (503, with `Retry-After`).
    Retry,
    /// The reason is in the server's log under the request id (the git server's own answer, a
    /// key service's refusal).
    SeeLog,
    /// Something is broken on the server: tell its operator, naming the request id.
    TellOperator,
}

/// A failure whose cause stays in the server's log: the caller reads `sentence` and `advice`.
#[derive(Debug)]
pub struct Failure {
    /// The answer's status.
    pub status: StatusCode,
    /// What failed, in the caller's terms: gitstate's own words, no cause chain.
    pub sentence: String,
    /// What the caller can do.
    pub advice: Advice,
    /// The whole cause, for the log only.
    pub cause: String,
    /// A bug (logged at ERROR), rather than a condition of the world (WARN for a 5xx).
    pub bug: bool,
}

/// An error answer: a status and one clear sentence, or the holder's LockInfo for 423.
#[derive(Debug)]
pub enum ApiError {
    /// A status with a sentence that is all there is to say (gitstate's own words, nothing
    /// behind them), rendered as `{"error": "..."}` (a 5xx with its `request_id`).
    Message(StatusCode, String),
    /// A failure whose cause is logged and never answered.
    Failed(Failure),
    /// 423 with the lock holder's LockInfo exactly as stored.
    Locked(Bytes),
    /// 409 to a LOCK where no state could ever be written (DESIGN §3): the sentence as `error`
    /// and as `Info`, since Terraform and OpenTofu read a LOCK's 409 body as the holder's
    /// LockInfo and show its fields ("Error acquiring the state lock … Info: …"), never `error`.
    Unwritable(String),
}

impl ApiError {
    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::Message(StatusCode::BAD_REQUEST, message.into())
    }

    /// `status` with `sentence` and `advice` for the caller, `cause` for the log.
    pub fn failed(
        status: StatusCode,
        sentence: impl Into<String>,
        advice: Advice,
        cause: impl Into<String>,
    ) -> Self {
        ApiError::Failed(Failure {
            status,
            sentence: sentence.into(),
            advice,
            cause: cause.into(),
            bug: false,
        })
    }

    /// A 500 for a bug: `sentence` says what failed, the caller is asked to tell the operator,
    /// and `cause` is logged at ERROR.
    pub fn bug(sentence: impl Into<String>, cause: impl Into<String>) -> Self {
        ApiError::Failed(Failure {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            sentence: sentence.into(),
            advice: Advice::TellOperator,
            cause: cause.into(),
            bug: true,
        })
    }

    /// The status code this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Message(status, _) => *status,
            ApiError::Failed(failure) => failure.status,
            ApiError::Locked(_) => StatusCode::LOCKED,
            ApiError::Unwritable(_) => StatusCode::CONFLICT,
        }
    }

    /// What the caller reads, for the request `id`.
    pub fn sentence(&self, id: &str) -> String {
        match self {
            ApiError::Message(_, sentence) | ApiError::Unwritable(sentence) => sentence.clone(),
            ApiError::Failed(Failure {
                sentence, advice, ..
            }) => {
                match advice {
                    Advice::Nothing => sentence.clone(),
                    Advice::Retry => {
                        format!("{sentence}; retry in a moment")
                    }
                    Advice::SeeLog => {
                        format!("{sentence}; the reason is in gitstate's log under request id {id}")
                    }
                    Advice::TellOperator => {
                        format!("{sentence}; tell the operator of this gitstate, naming request id {id}")
                    }
                }
            }
            ApiError::Locked(_) => "the state is locked by another client".to_owned(),
        }
    }

    /// What the log gets beyond the answer: the cause, or the sentence of a 5xx `Message`.
    pub fn cause(&self) -> Option<&str> {
        match self {
            ApiError::Failed(failure) => Some(&failure.cause),
            ApiError::Message(status, sentence) if status.is_server_error() => Some(sentence),
            _ => None,
        }
    }

    /// Logs what this answer leaves out, inside the request's span (its id): a bug at ERROR, a
    /// 5xx at WARN (someone should look), a 4xx's cause at INFO. The access line alone says only
    /// the status.
    fn log(&self) {
        let status = self.status();
        let Some(cause) = self.cause() else { return };
        let bug = matches!(self, ApiError::Failed(Failure { bug: true, .. }));
        let status = status.as_u16();
        if bug {
            tracing::error!(status, error = %cause, "answered with an error");
        } else if status >= 500 {
            tracing::warn!(status, error = %cause, "answered with an error");
        } else {
            tracing::info!(status, error = %cause, "answered with an error");
        }
    }

    /// The sentence of a failure shown inside a page rather than as the answer (a part of the web
    /// page that could not be made), its cause logged as an answer's would be.
    pub(crate) fn into_sentence(self) -> String {
        self.log();
        let id = current_request_id().unwrap_or_else(|| Arc::from("(none)"));
        self.sentence(&id)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let cause = e.to_string();
        let failed =
            |status, sentence: &str, advice| ApiError::failed(status, sentence, advice, &cause);
        match e {
            StoreError::Stale => failed(
                StatusCode::SERVICE_UNAVAILABLE,
                "the state changed on the git server while this request was writing it, and nothing was written",
                Advice::Retry,
            ),
            StoreError::Unavailable(_) => failed(
                StatusCode::SERVICE_UNAVAILABLE,
                "the git server of this repository could not be reached or did not answer in time",
                Advice::Retry,
            ),
            // gitstate's own sentence: what ran out.
            StoreError::Busy(sentence) => {
                ApiError::failed(StatusCode::SERVICE_UNAVAILABLE, sentence, Advice::Retry, &cause)
            }
            StoreError::Unauthorized(_) => failed(
                StatusCode::UNAUTHORIZED,
                "the git server asked for credentials, or did not accept the ones this request was made with",
                Advice::Nothing,
            ),
            StoreError::Forbidden(_) => failed(
                StatusCode::FORBIDDEN,
                "the git server refused access to this repository with the credentials this request was made with",
                Advice::Nothing,
            ),
            // The deployment's address policy, in its own words.
            StoreError::Refused(_) => ApiError::Message(StatusCode::FORBIDDEN, cause),
            StoreError::Remote(_) => failed(
                StatusCode::BAD_GATEWAY,
                "the git server failed to answer this request",
                Advice::SeeLog,
            ),
            // gitstate's own sentence naming the path.
            StoreError::Conflict(sentence) => ApiError::Message(StatusCode::CONFLICT, sentence),
            StoreError::Internal(_) => ApiError::bug(
                "gitstate could not read or write this repository's files on the server",
                cause,
            ),
        }
    }
}

impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        match e {
            BackendError::BadRequest(m) => ApiError::Message(StatusCode::BAD_REQUEST, m),
            BackendError::Unauthenticated(m) => ApiError::Message(StatusCode::UNAUTHORIZED, m),
            BackendError::NotFound(m) => ApiError::Message(StatusCode::NOT_FOUND, m),
            BackendError::Conflict(m) | BackendError::NotLocked(m) => {
                ApiError::Message(StatusCode::CONFLICT, m)
            }
            BackendError::Locked(holder) => ApiError::Locked(holder),
            e @ BackendError::TooLarge { .. } => {
                ApiError::Message(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
            }
            // gitstate's own sentence: what ran out, and that Terraform retries.
            e @ BackendError::Busy { .. } => {
                ApiError::Message(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
            BackendError::Store(e) => e.into(),
            BackendError::Seal(e) => e.into(),
        }
    }
}

impl From<SealError> for ApiError {
    fn from(e: SealError) -> Self {
        let cause = e.to_string();
        match e {
            SealError::Unavailable { key, .. } => ApiError::failed(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the key service of {key} could not be reached, so the state could be neither opened nor sealed, and nothing was written"),
                Advice::Retry,
                cause,
            ),
            SealError::BadInput(sentence) => ApiError::Message(StatusCode::BAD_REQUEST, sentence),
            // What is stored cannot be served: a server-side condition that no retry of the
            // same request changes (the next full write from Terraform replaces it). The
            // sentence names the keys or the setting it needs.
            SealError::NoKey { sentence, why } => {
                let advice = match why {
                    Some(_) => Advice::SeeLog,
                    None => Advice::Nothing,
                };
                ApiError::failed(StatusCode::INTERNAL_SERVER_ERROR, sentence, advice, cause)
            }
            SealError::Tampered(_) => ApiError::failed(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the stored state fails its integrity check (it was changed outside gitstate, or it is corrupt), so it is not served; restore an earlier version (gitstate restore) or write the state again",
                Advice::Nothing,
                cause,
            ),
            SealError::Misplaced(sentence) | SealError::NotSealedHere(sentence) => {
                ApiError::Message(StatusCode::INTERNAL_SERVER_ERROR, sentence)
            }
            SealError::Internal(_) => {
                ApiError::bug("gitstate could not encrypt or decrypt this state", cause)
            }
        }
    }
}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        // DynamoDB unreachable, throttled or refusing: the catalog is a service like the git
        // server; the client may retry.
        ApiError::failed(
            StatusCode::SERVICE_UNAVAILABLE,
            "the catalog could not be read",
            Advice::Retry,
            e.to_string(),
        )
    }
}

impl From<gitstate_core::scope::Refusal> for ApiError {
    fn from(refusal: gitstate_core::scope::Refusal) -> Self {
        ApiError::Message(StatusCode::FORBIDDEN, refusal.0)
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::UnknownRepository(_) => {
                ApiError::Message(StatusCode::NOT_FOUND, e.to_string())
            }
            RegistryError::Unauthenticated(m) => ApiError::Message(StatusCode::UNAUTHORIZED, m),
            RegistryError::NotAllowed(m) => ApiError::Message(StatusCode::FORBIDDEN, m),
            RegistryError::BadAddress(m) => ApiError::Message(StatusCode::BAD_REQUEST, m),
            RegistryError::Busy(cause) => ApiError::failed(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many password checks are under way on this server",
                Advice::Retry,
                cause,
            ),
            RegistryError::Store(e) => e.into(),
        }
    }
}

/// The id an answer carries: the request's own, or outside one (a router without
/// `request_context`) a fresh one that the answer names in its header as well (`true`).
fn answer_id() -> (Arc<str>, bool) {
    match current_request_id() {
        Some(id) => (id, false),
        None => (Arc::from(uuid::Uuid::new_v4().to_string()), true),
    }
}

/// The headers every error answer of `status` carries: its own request id when `own`,
/// `Retry-After` on a 503, `WWW-Authenticate` on a 401.
fn finish(mut response: Response, status: StatusCode, id: &str, own: bool) -> Response {
    let headers = response.headers_mut();
    if own {
        if let Ok(value) = HeaderValue::from_str(id) {
            headers.insert(REQUEST_ID_HEADER, value);
        }
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        headers.insert(
            header::RETRY_AFTER,
            HeaderValue::from_static(RETRY_AFTER_SECONDS),
        );
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"gitstate\""),
        );
    }
    response
}

/// The media type of the workspace API's documents (JSON:API).
pub(crate) const JSON_API: &str = "application/vnd.api+json";

impl ApiError {
    /// The same answer in the workspace API's error shape (JSON:API, DESIGN §10):
    /// `{"errors": [{"status", "title", "detail"}]}`, the detail the one sentence any answer has,
    /// and a 5xx's `request_id` beside `errors`. The lock of another holder (a 423 on the http
    /// protocol) is the API's 409, its sentence naming the holder.
    pub(crate) fn into_jsonapi_response(self) -> Response {
        let status = match self.status() {
            StatusCode::LOCKED => StatusCode::CONFLICT,
            status => status,
        };
        self.log();
        let (id, own) = answer_id();
        let detail = match &self {
            ApiError::Locked(holder) => {
                let info = gitstate_core::LockInfo::stored(holder);
                format!(
                    "the state is locked by {} (lock ID {}); wait for it, or remove it with `terraform force-unlock`",
                    gitstate_core::text::escape_controls(&info.who),
                    gitstate_core::text::escape_controls(&info.id)
                )
            }
            other => other.sentence(&id),
        };
        let error = serde_json::json!({
            "status": status.as_str(),
            "title": status.canonical_reason().unwrap_or("error").to_lowercase(),
            "detail": detail,
        });
        let body = match status.is_server_error() {
            true => serde_json::json!({ "errors": [error], "request_id": &*id }),
            false => serde_json::json!({ "errors": [error] }),
        };
        let response =
            (status, [(header::CONTENT_TYPE, JSON_API)], body.to_string()).into_response();
        finish(response, status, &id, own)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        self.log();
        let (id, own) = answer_id();
        let response = match self {
            ApiError::Locked(holder) => {
                (status, [(header::CONTENT_TYPE, "application/json")], holder).into_response()
            }
            ApiError::Unwritable(sentence) => {
                let body = serde_json::json!({ "error": &sentence, "Info": &sentence });
                (status, axum::Json(body)).into_response()
            }
            failure => {
                let sentence = failure.sentence(&id);
                let body = match status.is_server_error() {
                    true => serde_json::json!({ "error": sentence, "request_id": &*id }),
                    false => serde_json::json!({ "error": sentence }),
                };
                (status, axum::Json(body)).into_response()
            }
        };
        finish(response, status, &id, own)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gitstate_tests::not_one_sentence;

    /// A cause as the layers below write them: a library's chain with a type name, a Rust path,
    /// an OS error, a path of this machine, a URL, the git server's own words.
    const CHAIN: &str = "Could not prepare reference edit: The lock for resource '/var/lib/gitstate/default.git/refs/heads/locks/prod' could not be obtained: NotADirectory { path: \"/var/lib/gitstate\" } (os error 20) in gix_ref::file::transaction\nCaused by: remote: fatal: https://git.example/org/states.git said no";

    /// What may never reach an answer: the parts of [`CHAIN`].
    const INTERNALS: [&str; 9] = [
        "/var/lib/gitstate",
        "NotADirectory",
        "os error",
        "gix",
        "::",
        "Caused by",
        "git.example",
        "remote:",
        "fatal",
    ];

    /// `error` answered inside the request `id`: status, headers and the JSON body.
    async fn answer(error: ApiError) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let response = with_request_id(Arc::from("req-1"), async { error.into_response() }).await;
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, 1 << 16).await.unwrap();
        let json = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&body)));
        (parts.status, parts.headers, json)
    }

    /// The store's errors that answer a 5xx, each carrying [`CHAIN`] where it carries a cause.
    fn store_errors() -> Vec<(&'static str, StoreError)> {
        vec![
            ("StoreError::Stale", StoreError::Stale),
            (
                "StoreError::Unavailable",
                StoreError::Unavailable(CHAIN.into()),
            ),
            ("StoreError::Remote", StoreError::Remote(CHAIN.into())),
            ("StoreError::Internal", StoreError::Internal(CHAIN.into())),
            (
                "StoreError::Busy",
                StoreError::Busy(
                    "the write of prod waited 3.0 s for its turn to be pushed and its time ran out"
                        .into(),
                ),
            ),
        ]
    }

    /// The sealer's errors that answer a 5xx, as [`store_errors`].
    fn seal_errors() -> Vec<(&'static str, SealError)> {
        vec![
            (
                "SealError::Unavailable",
                SealError::Unavailable {
                    key: "kms key arn:aws:kms:eu-west-1:111122223333:key/k".into(),
                    why: CHAIN.into(),
                },
            ),
            (
                "SealError::NoKey (keys that failed)",
                SealError::NoKey {
                    sentence: "cannot decrypt the stored state with kms key arn:aws:kms:eu-west-1:111122223333:key/k, so it is not served".into(),
                    why: Some(CHAIN.into()),
                },
            ),
            (
                "SealError::NoKey (no key)",
                SealError::NoKey {
                    sentence: "the stored state at default/prod.tfstate is encrypted (a sops document) and this server has no key to open it, so it is not served; it needs one of the keys age:age1qqqq".into(),
                    why: None,
                },
            ),
            ("SealError::Tampered", SealError::Tampered(CHAIN.into())),
            (
                "SealError::Misplaced",
                SealError::Misplaced("the stored state at default/b.tfstate was sealed for default/a.tfstate (sops metadata); it was copied here from another place, and gitstate never serves one place's state at another".into()),
            ),
            (
                "SealError::NotSealedHere",
                SealError::NotSealedHere("the stored state at default/p.tfstate is not encrypted, and encryption is enforced, so it is not served".into()),
            ),
            ("SealError::Internal", SealError::Internal(CHAIN.into())),
        ]
    }

    /// Every error that can answer a 5xx, each carrying [`CHAIN`] where it carries a cause.
    fn server_errors() -> Vec<(&'static str, ApiError)> {
        let mut errors: Vec<(&'static str, ApiError)> = Vec::new();
        for (name, e) in store_errors() {
            errors.push((name, RegistryError::Store(e.clone()).into()));
            errors.push((name, BackendError::Store(e.clone()).into()));
            errors.push((name, e.into()));
        }
        for (name, e) in seal_errors() {
            errors.push((name, BackendError::Seal(e.clone()).into()));
            errors.push((name, e.into()));
        }
        errors.push((
            "BackendError::Busy",
            BackendError::Busy {
                why: "other writers kept moving the state branch until this write's time ran out"
                    .into(),
                attempts: 4,
                waited_ms: 2500,
            }
            .into(),
        ));
        errors.push(("CatalogError", CatalogError(CHAIN.into()).into()));
        errors.push((
            "RegistryError::Busy",
            RegistryError::Busy(CHAIN.into()).into(),
        ));
        errors.push(("ApiError::bug", ApiError::bug("gitstate hit a bug", CHAIN)));
        errors
    }

    /// Goal 7 of issue 55: a 5xx answer is `{"error": one sentence, "request_id": the id}`, and
    /// nothing of its cause (the chain stays for the log).
    #[tokio::test]
    async fn every_5xx_is_one_sentence_and_the_request_id_and_its_cause_only_logged() {
        for (name, error) in server_errors() {
            let cause = error.cause().map(str::to_owned);
            let (status, headers, json) = answer(error).await;
            assert!(status.is_server_error(), "{name}: {status}");
            let keys: Vec<&String> = json.as_object().expect("an object").keys().collect();
            assert_eq!(keys, ["error", "request_id"], "{name}: {json}");
            assert_eq!(json["request_id"], "req-1", "{name}: {json}");
            let sentence = json["error"].as_str().expect("a sentence");
            if let Some(why) = not_one_sentence(sentence) {
                panic!("{name}: not one sentence, {why}: {sentence:?}");
            }
            for internal in INTERNALS {
                assert!(
                    !sentence.contains(internal),
                    "{name}: {internal:?} in {sentence:?}"
                );
            }
            assert!(cause.is_some(), "{name}: nothing is logged");
            if status == StatusCode::SERVICE_UNAVAILABLE {
                assert_eq!(headers["retry-after"], "2", "{name}");
                assert!(sentence.contains("retry"), "{name}: {sentence}");
            }
            if status == StatusCode::BAD_GATEWAY {
                assert!(
                    sentence.contains("git server")
                        && sentence.contains("log under request id req-1"),
                    "{name}: {sentence}"
                );
            }
        }
    }

    /// What the answers leave out is what the log gets: the whole error.
    #[test]
    fn the_logged_cause_is_the_whole_error() {
        let errors = store_errors()
            .into_iter()
            .map(|(name, e)| (name, e.to_string(), ApiError::from(e)))
            .chain(
                seal_errors()
                    .into_iter()
                    .map(|(name, e)| (name, e.to_string(), ApiError::from(e))),
            )
            .chain([(
                "CatalogError",
                CHAIN.to_owned(),
                CatalogError(CHAIN.into()).into(),
            )]);
        for (name, whole, error) in errors {
            assert!(
                error.cause().is_some_and(|c| c.contains(&whole)),
                "{name}: {error:?}"
            );
        }
    }

    /// A 500 for a stored state this deployment cannot open still names what it needs, and a
    /// 503 of a key service names the key (its public id).
    #[tokio::test]
    async fn what_a_user_needs_stays_in_the_sentence() {
        let (_, _, json) = answer(
            SealError::NoKey {
                sentence: "the stored file at default/x is not JSON (7 bytes), so it is not served as a state; if terraform-backend-git wrote it with TF_BACKEND_HTTP_ENCRYPTION_PROVIDER=aes, it needs that passphrase (TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE)".into(),
                why: None,
            }
            .into(),
        )
        .await;
        let sentence = json["error"].as_str().unwrap();
        assert!(
            sentence.contains("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE"),
            "{sentence}"
        );
        assert!(not_one_sentence(sentence).is_none(), "{sentence}");
        let (_, _, json) = answer(
            SealError::Unavailable {
                key: "kms key arn:aws:kms:eu-west-1:111122223333:key/k".into(),
                why: chain_of_kms(),
            }
            .into(),
        )
        .await;
        let sentence = json["error"].as_str().unwrap();
        assert!(
            sentence.contains("kms key arn:aws:kms:eu-west-1:111122223333:key/k"),
            "{sentence}"
        );
        assert!(!sentence.contains("ThrottlingException"), "{sentence}");
    }

    fn chain_of_kms() -> String {
        "Decrypt failed: ThrottlingException Rate exceeded".into()
    }

    /// A 4xx whose cause is a git server's words (a refused credential) answers gitstate's
    /// sentence without them, and no request id (4xx answers are as they were).
    #[tokio::test]
    async fn a_4xx_with_a_cause_answers_a_sentence_without_it() {
        for (error, status) in [
            (
                ApiError::from(StoreError::Unauthorized(CHAIN.into())),
                StatusCode::UNAUTHORIZED,
            ),
            (
                ApiError::from(StoreError::Forbidden(CHAIN.into())),
                StatusCode::FORBIDDEN,
            ),
        ] {
            let (answered, headers, json) = answer(error).await;
            assert_eq!(answered, status);
            let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["error"], "{json}");
            let sentence = json["error"].as_str().unwrap();
            assert!(not_one_sentence(sentence).is_none(), "{sentence}");
            for internal in INTERNALS {
                assert!(!sentence.contains(internal), "{internal:?} in {sentence:?}");
            }
            if status == StatusCode::UNAUTHORIZED {
                assert!(headers.contains_key("www-authenticate"));
            }
        }
    }
}
