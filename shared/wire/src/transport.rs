//! Opening a git transport to a remote with gitstate's rules: credentials set up front (no 401
//! round trip), a connect timeout and an I/O timeout on every connection, `TCP_NODELAY` for
//! `git://`, and a guard against gix turning a shallow fetch into a full one over protocol v1.
//! Also maps transport failures to [`WireError`] kinds without ever showing a credential.

use std::borrow::Cow;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gitstate_url::{redact_in_text, Credentials, NetworkGuard, RepoUrl};
use gix::bstr::{BStr, BString, ByteSlice};
use gix::protocol::transport::client::blocking_io::{
    file, http, ExtendedBufRead, ReadlineBufRead, RequestWriter, SetServiceResponse, Transport,
};
use gix::protocol::transport::client::{
    self as client, Capabilities, MessageKind, TransportWithoutIO, WriteMode,
};
use gix::protocol::transport::{Protocol, Service};
use gix::url::Scheme;

use super::error::WireError;
use super::kept::Kept;
use super::limits::{AnswerLimits, AnswerRefused, Limited, Pace, Paced, DEFAULT_MAX_ANSWER_BYTES};
use super::ssh::SshTransport;

/// Where a remote is and how to talk to it. The URL never carries credentials.
#[derive(Clone)]
pub struct Endpoint {
    /// The remote URL without user name or password.
    pub url: gix::Url,
    /// The URL as shown in messages (no credentials).
    pub display: String,
    /// Basic-auth pair for HTTP(S).
    pub credentials: Option<Credentials>,
    /// Connect timeout, and the longest a single read or write may stall.
    pub timeout: Duration,
    /// Which addresses may be connected to, and whether redirects are followed.
    pub network: NetworkGuard,
    /// How much and how long the remote may send per answer.
    pub limits: AnswerLimits,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.display)
            .field("credentials", &self.credentials)
            .field("timeout", &self.timeout)
            .field("network", &self.network)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Endpoint {
    /// Parses `raw` with the one URL model ([`RepoUrl`]); a user name and password embedded in
    /// it are moved out of the URL and used as credentials unless `credentials` are given.
    pub fn parse(
        raw: &str,
        credentials: Option<Credentials>,
        timeout: Duration,
    ) -> Result<Self, WireError> {
        let url = RepoUrl::parse(raw).map_err(|e| {
            WireError::Internal(format!(
                "'{}' is not a usable git repository URL: {e}",
                redact_in_text(raw)
            ))
        })?;
        Self::new(&url, credentials, timeout, NetworkGuard::TRUSTED)
    }

    /// The endpoint for an already parsed URL: the transport is given exactly
    /// [`RepoUrl::transport_url`] (normalised, no escapes, no password). An http(s) URL's own
    /// user name and password are the credentials unless `credentials` are given.
    pub fn new(
        url: &RepoUrl,
        credentials: Option<Credentials>,
        timeout: Duration,
        network: NetworkGuard,
    ) -> Result<Self, WireError> {
        let embedded = match url.userinfo() {
            Some(info) if url.scheme().carries_basic_auth() => {
                info.password.as_ref().map(|password| Credentials {
                    username: info.user.clone(),
                    password: password.clone(),
                })
            }
            _ => None,
        };
        let transport_url = url.transport_url();
        let parsed = gix::url::parse(transport_url.as_bytes().as_bstr()).map_err(|_| {
            WireError::Internal(format!(
                "'{}' is not a git repository URL gix reads",
                url.display()
            ))
        })?;
        Ok(Endpoint {
            url: parsed,
            display: url.display(),
            credentials: credentials.or(embedded),
            timeout,
            network,
            limits: AnswerLimits {
                max_bytes: DEFAULT_MAX_ANSWER_BYTES,
                within: timeout,
            },
        })
    }

    /// Removes every trace of the password from `message` (a last line of defence: messages are
    /// built from URLs without credentials already).
    pub fn scrub(&self, message: &str) -> String {
        let mut out = redact_in_text(message);
        if let Some(c) = &self.credentials {
            if !c.password.is_empty() {
                out = out.replace(&c.password, "***");
            }
        }
        out
    }
}

/// Opens a transport to `endpoint` asking for protocol `version`. Nothing is sent yet, except
/// for `git://` where the TCP connection is made here.
pub fn connect(endpoint: &Endpoint, version: Protocol) -> Result<ShallowSafe, WireError> {
    let url = endpoint.url.clone();
    let mut transport: Box<dyn Transport + Send> = match url.scheme {
        Scheme::Git => Box::new(connect_git(endpoint, version)?),
        Scheme::File => Box::new(
            file::connect(url.path.clone(), version, false)
                .map_err(|e| WireError::Internal(format!("file transport: {e}")))?,
        ),
        Scheme::Http | Scheme::Https => {
            let options = http_options(endpoint);
            let kept = kept_client(endpoint, &options)
                .map_err(|e| WireError::Internal(format!("configuring HTTP: {e}")))?;
            let mut t = http::Transport::new_http(kept, url, version, false);
            t.configure(&options)
                .map_err(|e| WireError::Internal(format!("configuring HTTP: {e}")))?;
            Box::new(t)
        }
        Scheme::Ssh => {
            // ssh resolves the name itself: check what it resolves to now (the guard is on only
            // for ad-hoc URLs, which reach ssh only when an operator's pattern gave them the
            // deployment's key).
            if endpoint.network.refuse_internal {
                let host = endpoint.url.host().unwrap_or_default().to_owned();
                let port = endpoint.url.port.unwrap_or(22);
                guarded_addresses(endpoint, &host, port)?;
            }
            // Git's conventions for choosing the ssh program (keys and agents are ssh's business).
            let command = std::env::var_os("GIT_SSH_COMMAND").or_else(|| std::env::var_os("GIT_SSH"));
            // gitstate runs ssh itself: every read and write has a watchdog (see `super::ssh`).
            Box::new(
                SshTransport::new(
                    url,
                    ssh_command_with_timeouts(command, endpoint.timeout),
                    version,
                    endpoint.limits.within,
                )
                .map_err(|e| {
                    WireError::Internal(endpoint.scrub(&format!("ssh transport: {e}")))
                })?,
            )
        }
        other => {
            return Err(WireError::Internal(format!(
                "the URL scheme '{other}' is not supported; use https://, http://, ssh://, git:// or file://"
            )))
        }
    };
    if let Some(c) = &endpoint.credentials {
        if matches!(endpoint.url.scheme, Scheme::Http | Scheme::Https) {
            transport
                .set_identity(gix::sec::identity::Account {
                    username: c.username.clone(),
                    password: c.password.clone(),
                    oauth_refresh_token: None,
                })
                .map_err(|e| WireError::Internal(endpoint.scrub(&e.to_string())))?;
        }
    }
    Ok(ShallowSafe {
        inner: transport,
        timeout: endpoint.timeout,
        limits: endpoint.limits,
    })
}

/// The ssh command with OpenSSH's own timeouts added, so a host that accepts the connection and
/// says nothing, or stops answering mid-transfer, ends the attempt: `ConnectTimeout` (which also
/// bounds the banner exchange) and keep-alives that give up after two silent intervals. ssh uses
/// the first value given for an option, so a user's own `-o ConnectTimeout=` in
/// `GIT_SSH_COMMAND` still wins. Other ssh programs (plink, wrappers) are left as they are.
fn ssh_command_with_timeouts(
    command: Option<std::ffi::OsString>,
    timeout: Duration,
) -> std::ffi::OsString {
    let command = command.unwrap_or_else(|| "ssh".into());
    let text = command.to_string_lossy().into_owned();
    let program = text.split_whitespace().next().unwrap_or("");
    let is_openssh = std::path::Path::new(program)
        .file_name()
        .is_some_and(|name| name == "ssh");
    if !is_openssh {
        return command;
    }
    let seconds = timeout.as_secs().max(1);
    let interval = (seconds / 2).max(1);
    format!(
        "{text} -o ConnectTimeout={seconds} -o ServerAliveInterval={interval} -o ServerAliveCountMax=2"
    )
    .into()
}

/// A client for requests to `endpoint` with `options` (built by [`http_options`]), kept between
/// sessions ([`Kept`]): one per repository URL and client settings, never per credential.
pub fn kept_client(endpoint: &Endpoint, options: &http::Options) -> Result<Kept, String> {
    let base = endpoint.url.to_bstring().to_string();
    let settings = format!(
        "{:?} {:?} {:?} {:?}",
        endpoint.url.scheme, endpoint.timeout, endpoint.network, options.follow_redirects
    );
    Kept::new(&base, &settings, options)
}

/// HTTP options: connect timeout, abort when the transfer stalls, overall request timeout.
pub fn http_options(endpoint: &Endpoint) -> http::Options {
    let timeout = endpoint.timeout;
    let https = endpoint.url.scheme == Scheme::Https;
    let guard = endpoint.network;
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(move |builder| {
            // Every transport builds a new client, and a client left to itself loads the
            // system's root certificates from disk (hundreds of files): measured, 60 % of a
            // warm GET's CPU. The roots are read once per process instead, and a plain-HTTP
            // remote gets none.
            let roots = if https {
                native_roots().to_vec()
            } else {
                Vec::new()
            };
            let builder = builder.timeout(timeout).tls_certs_only(roots).http1_only();
            // Every address a name resolves to is checked when connecting, and only checked
            // addresses are connected to: DNS cannot turn an admitted name into an internal
            // address between the policy's check and the connection.
            Ok(if guard.refuse_internal {
                builder.dns_resolver(Arc::new(GuardedResolver { guard }))
            } else {
                builder
            })
        })),
        configure_request: None,
    };
    let backend: Arc<Mutex<dyn std::any::Any + Send + Sync>> = Arc::new(Mutex::new(backend));
    http::Options {
        connect_timeout: Some(timeout),
        low_speed_limit_bytes_per_second: 1,
        low_speed_time_seconds: timeout.as_secs().max(1),
        user_agent: Some(concat!("gitstate/", env!("CARGO_PKG_VERSION")).into()),
        follow_redirects: if guard.follow_redirects {
            http::options::FollowRedirects::Initial
        } else {
            http::options::FollowRedirects::None
        },
        backend: Some(backend),
        ..Default::default()
    }
}

/// A name resolved by the system, keeping only the addresses `guard` admits.
struct GuardedResolver {
    guard: NetworkGuard,
}

/// The error a resolver gives when every address of a name was refused (found again by
/// [`classify`], which answers [`WireError::Refused`]).
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves only to addresses the deployment refuses: {rule}")]
struct AddressRefused {
    host: String,
    rule: &'static str,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (admitted, refused): (Vec<_>, Vec<_>) =
                found.into_iter().partition(|a| guard.check(a.ip()).is_ok());
            if admitted.is_empty() {
                let rule = refused
                    .first()
                    .and_then(|a| guard.check(a.ip()).err())
                    .unwrap_or("it has no address");
                return Err(Box::new(AddressRefused { host, rule }) as _);
            }
            let addrs: reqwest::dns::Addrs = Box::new(admitted.into_iter());
            Ok(addrs)
        })
    }
}

/// The addresses of `host:port` that `endpoint`'s guard admits; an error when there are none.
fn guarded_addresses(
    endpoint: &Endpoint,
    host: &str,
    port: u16,
) -> Result<Vec<std::net::SocketAddr>, WireError> {
    let found: Vec<std::net::SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| WireError::Unavailable(format!("cannot resolve {}: {e}", endpoint.display)))?
        .collect();
    let mut refused = None;
    let admitted: Vec<std::net::SocketAddr> = found
        .into_iter()
        .filter(|a| match endpoint.network.check(a.ip()) {
            Ok(()) => true,
            Err(rule) => {
                refused = Some(rule);
                false
            }
        })
        .collect();
    match (admitted.is_empty(), refused) {
        (false, _) => Ok(admitted),
        (true, Some(rule)) => Err(WireError::Refused(format!(
            "{} resolves only to addresses the deployment refuses: {rule}",
            endpoint.display
        ))),
        (true, None) => Err(WireError::Unavailable(format!(
            "{} does not resolve to an address",
            endpoint.display
        ))),
    }
}

/// The system's trusted root certificates (`SSL_CERT_FILE`, `SSL_CERT_DIR` or the platform's
/// store, as rustls-native-certs finds them), read on first use and kept for the process.
fn native_roots() -> &'static [reqwest::Certificate] {
    static ROOTS: std::sync::OnceLock<Vec<reqwest::Certificate>> = std::sync::OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::warn!(%error, "a root certificate store could not be read");
        }
        let roots: Vec<reqwest::Certificate> = found
            .certs
            .iter()
            .filter_map(|der| reqwest::Certificate::from_der(der).ok())
            .collect();
        if roots.is_empty() {
            tracing::warn!("no trusted root certificates were found: HTTPS remotes will be refused (set SSL_CERT_FILE)");
        }
        roots
    })
}

fn connect_git(
    endpoint: &Endpoint,
    version: Protocol,
) -> Result<client::git::blocking_io::Connection<Paced<TcpStream>, Paced<TcpStream>>, WireError> {
    let host = endpoint
        .url
        .host()
        .ok_or_else(|| WireError::Internal(format!("{} has no host", endpoint.display)))?
        .to_owned();
    let port = endpoint.url.port.unwrap_or(9418);
    let unavailable = |e: std::io::Error| {
        WireError::Unavailable(format!("cannot connect to {}: {e}", endpoint.display))
    };
    let addr = guarded_addresses(endpoint, &host, port)?[0];
    let stream = TcpStream::connect_timeout(&addr, endpoint.timeout).map_err(unavailable)?;
    // Many small pkt-line writes: without TCP_NODELAY each round trip waits for delayed ACKs.
    stream.set_nodelay(true).map_err(unavailable)?;
    stream
        .set_read_timeout(Some(endpoint.timeout))
        .map_err(unavailable)?;
    stream
        .set_write_timeout(Some(endpoint.timeout))
        .map_err(unavailable)?;
    let reader = stream.try_clone().map_err(unavailable)?;
    // The read timeout bounds one stall; the pace bounds a whole answer (a server dripping a
    // byte just before each timeout never stalls).
    let pace = Pace::new(endpoint.limits.within);
    Ok(client::git::blocking_io::Connection::new(
        pace.reader(reader),
        pace.writer(stream),
        version,
        endpoint.url.path.clone(),
        Some((host, endpoint.url.port)),
        client::git::ConnectMode::Daemon,
        false,
    ))
}

/// A transport that normalises what protocol v0/v1 servers advertise before gix reads it:
///
/// - `deepen-relative` is hidden. gix echoes every advertised fetch capability in its first
///   `want` line over v0/v1, including `deepen-relative`, which turns `deepen 1` into "one more
///   than what you have" and, with no shallow file yet, into a full-history fetch.
/// - `symref=` capabilities are dropped. gitstate names every ref it wants and never follows a
///   symbolic ref, and gix-protocol 0.68 panics (`unreachable!` in `handshake/refs/shared.rs`)
///   on a legal advertisement whose `symref=HEAD:refs/heads/master` has no `HEAD` ref line (an
///   unborn HEAD, as dulwich advertises it). See docs/DECISIONS.md.
///
/// Protocol v2 negotiates features explicitly and is left untouched.
///
/// Every answer (the advertisement, and the answer to each request) is read through a
/// [`Limited`] reader: within the timeout and the endpoint's size limits.
pub struct ShallowSafe {
    inner: Box<dyn Transport + Send>,
    timeout: Duration,
    limits: AnswerLimits,
}

impl ShallowSafe {
    /// The I/O timeout this transport was opened with.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// Capabilities gitstate hides from gix over protocol v0/v1 (see [`ShallowSafe`]).
fn hidden_v1_capability(name: &BStr) -> bool {
    name == "deepen-relative" || name == "symref"
}

/// `capabilities` without the [hidden](hidden_v1_capability) ones; `None` when nothing is hidden.
fn normalised_v1(capabilities: &Capabilities) -> Option<Capabilities> {
    if !capabilities.iter().any(|c| hidden_v1_capability(c.name())) {
        return None;
    }
    let mut data = BString::from("\0");
    let mut first = true;
    for capability in capabilities.iter() {
        if hidden_v1_capability(capability.name()) {
            continue;
        }
        if !first {
            data.push(b' ');
        }
        first = false;
        data.extend_from_slice(capability.name());
        if let Some(value) = capability.value() {
            data.push(b'=');
            data.extend_from_slice(value);
        }
    }
    Capabilities::from_bytes(&data).ok().map(|(c, _)| c)
}

impl TransportWithoutIO for ShallowSafe {
    fn set_identity(&mut self, identity: client::Account) -> Result<(), client::Error> {
        self.inner.set_identity(identity)
    }

    fn to_url(&self) -> Cow<'_, BStr> {
        self.inner.to_url()
    }

    fn supported_protocol_versions(&self) -> &[Protocol] {
        self.inner.supported_protocol_versions()
    }

    fn connection_persists_across_multiple_requests(&self) -> bool {
        self.inner.connection_persists_across_multiple_requests()
    }

    fn configure(&mut self, config: &dyn std::any::Any) -> gix::error::Result {
        self.inner.configure(config)
    }
}

impl Transport for ShallowSafe {
    fn handshake<'a>(
        &mut self,
        service: Service,
        extra_parameters: &'a [(&'a str, Option<&'a str>)],
    ) -> Result<SetServiceResponse<'_>, client::Error> {
        let limits = self.limits.for_advertisement();
        let mut response = self.inner.handshake(service, extra_parameters)?;
        response.refs = response
            .refs
            .take()
            .map(|refs| Box::new(Limited::new(refs, limits)) as Box<dyn ReadlineBufRead + '_>);
        if matches!(response.actual_protocol, Protocol::V0 | Protocol::V1) {
            if let Some(normalised) = normalised_v1(&response.capabilities) {
                response.capabilities = normalised;
            }
        }
        Ok(response)
    }

    fn request(
        &mut self,
        write_mode: WriteMode,
        on_into_read: MessageKind,
        trace: bool,
    ) -> Result<RequestWriter<'_>, client::Error> {
        let limits = self.limits;
        let (writer, reader) = self
            .inner
            .request(write_mode, on_into_read, trace)?
            .into_parts();
        let reader: Box<dyn ExtendedBufRead<'_> + Unpin + '_> =
            Box::new(Limited::new(reader, limits));
        Ok(RequestWriter::new_from_bufread(
            writer,
            reader,
            write_mode,
            on_into_read,
            trace,
        ))
    }
}

/// How [`classify`] ends the sentence of a request whose connection was closed before the git
/// server answered anything ([`super::kept::closed_before_answer`]).
const CLOSED_BEFORE_ANSWER: &str = "the connection was closed before the git server answered";

/// Whether `unavailable`, the text of an `Unavailable` error, says its request's connection was
/// closed before the git server answered anything (see [`classify`]): a read may go again on a
/// new connection.
pub fn closed_before_answer(unavailable: &str) -> bool {
    unavailable.ends_with(CLOSED_BEFORE_ANSWER)
}

/// Maps a failure of a network operation to a [`WireError`] kind: 401 → `Unauthorized`,
/// 403 → `Forbidden`, unreachable or timed out → `Unavailable`, anything else the server said →
/// `Remote`. `what` says what was being done. The message never holds credentials.
pub fn classify(endpoint: &Endpoint, what: &str, error: &gix::Error) -> WireError {
    let text = endpoint.scrub(&format!("{what} {}: {}", endpoint.display, chain(error)));
    if error
        .downcast_any_ref::<client::AuthenticationRequired>()
        .is_some()
        || error.is_unauthenticated()
    {
        // gix's own wording here is about credential helpers, which gitstate does not use.
        let how = match (&endpoint.credentials, &endpoint.url.scheme) {
            (_, Scheme::Ssh) => "the ssh key was not accepted",
            (Some(_), _) => "the credentials were not accepted",
            (None, _) => "it requires credentials and none were given",
        };
        return WireError::Unauthorized(format!("{what} {}: {how}", endpoint.display));
    }
    for e in error.iter_errors() {
        if let Some(refused) = find_source::<AddressRefused>(e) {
            return WireError::Refused(refused.to_string());
        }
        if super::kept::closed_before_answer(e) {
            // The server never answered (the request may not have reached it): not its error.
            return WireError::Unavailable(format!(
                "{what} {}: {CLOSED_BEFORE_ANSWER}",
                endpoint.display
            ));
        }
        if let Some(e) = e.downcast_ref::<reqwest::Error>() {
            if e.is_timeout() || e.is_connect() {
                return WireError::Unavailable(text);
            }
            if e.is_request() && e.status().is_none() {
                // reqwest's "error sending request": the request failed before any answer was
                // heard (a kept connection reset while it was written, issue 48).
                return WireError::Unavailable(format!(
                    "{what} {}: {CLOSED_BEFORE_ANSWER}",
                    endpoint.display
                ));
            }
            if e.is_body() && e.status().is_none() {
                // A request or answer body cut off (the connection reset or closed while it was
                // sent or read, e.g. "send failed because receiver is gone"): the link broke,
                // the server did not answer with an error (issue 58's 502).
                return WireError::Unavailable(text);
            }
            if e.status() == Some(reqwest::StatusCode::FORBIDDEN) {
                return WireError::Forbidden(text);
            }
            if e.status() == Some(reqwest::StatusCode::UNAUTHORIZED) {
                return WireError::Unauthorized(text);
            }
        }
        if let Some(classified) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| classify_io(endpoint, what, &text, io))
        {
            return classified;
        }
    }
    if error.is_resource_exhausted() {
        // gix refused an allocation beyond `gitoxide.objects.allocLimit`: an object inflating
        // to more (a zip bomb), or a pack announcing more objects than its index could hold.
        return WireError::Remote(format!(
            "{what} {}: the git server sent a pack with an object (or an object count) that would take more than {} bytes of memory, the most this deployment allows (6 × max_state_bytes + 64 MiB)",
            endpoint.display,
            super::limits::max_object_bytes()
        ));
    }
    if error.is_permission_denied() {
        return WireError::Forbidden(text);
    }
    if error.is_unsupported() && text.contains("Could not decode object ID") {
        return WireError::Remote(format!(
            "{text} (the repository may use SHA-256 object ids, which gitstate does not support)"
        ));
    }
    WireError::Remote(text)
}

/// [`classify`] for an I/O error in the chain: an answer the limits refused, or the network
/// failing (`Unavailable`, with `text`); `None` for any other.
fn classify_io(
    endpoint: &Endpoint,
    what: &str,
    text: &str,
    e: &std::io::Error,
) -> Option<WireError> {
    use std::io::ErrorKind::*;
    let refused = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<AnswerRefused>());
    match refused {
        Some(refused @ AnswerRefused::TooLarge { .. }) => Some(WireError::Remote(format!(
            "{what} {}: {refused}",
            endpoint.display
        ))),
        Some(refused @ AnswerRefused::TooSlow { .. }) => Some(WireError::Unavailable(format!(
            "{what} {}: {refused}",
            endpoint.display
        ))),
        None if matches!(
            e.kind(),
            ConnectionRefused
                | ConnectionReset
                | TimedOut
                | WouldBlock
                | NotConnected
                | AddrNotAvailable
                | HostUnreachable
                | NetworkUnreachable
                | BrokenPipe
                | UnexpectedEof
        ) =>
        {
            Some(WireError::Unavailable(text.to_owned()))
        }
        None => None,
    }
}

/// The first error of type `T` in `error`'s chain of sources.
fn find_source<'a, T: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// Same as [`classify`] for a bare transport error.
pub fn classify_client(endpoint: &Endpoint, what: &str, error: client::Error) -> WireError {
    classify(endpoint, what, &gix::Error::from_error(error))
}

/// The messages of an error and its causes, on one line.
fn chain(error: &gix::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for e in error.iter_errors() {
        let s = e.to_string();
        if !s.is_empty() && !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_embedded_credentials_out_of_the_url() {
        let e = Endpoint::parse(
            "https://bob:s3cret@host/x.git",
            None,
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(e.display, "https://host/x.git");
        assert_eq!(e.credentials.as_ref().unwrap().password, "s3cret");
        assert_eq!(e.scrub("pw s3cret"), "pw ***");
    }

    #[test]
    fn filters_deepen_relative_and_symrefs() {
        let (caps, _) = Capabilities::from_bytes(
            b"\0multi_ack shallow deepen-relative symref=HEAD:refs/heads/master agent=git/2.4",
        )
        .unwrap();
        let filtered = normalised_v1(&caps).unwrap();
        assert!(!filtered.contains("deepen-relative"));
        assert!(!filtered.contains("symref"));
        assert!(filtered.contains("shallow"));
        assert_eq!(
            filtered.capability("agent").unwrap().value().unwrap(),
            "git/2.4"
        );
    }
}
