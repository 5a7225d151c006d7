//! The send-pack side of the git protocol (gix has none): read receive-pack's ref advertisement,
//! send `<old> <new> <ref>` commands with capabilities, then a pack, and parse `report-status`.
//!
//! Every update is compare-and-swap on the server: receive-pack refuses a command whose old id is
//! not the ref's current value (the all-zero id meaning "must not exist"). Nothing here forces.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use gix::protocol::transport::client::blocking_io::Transport;
use gix::protocol::transport::client::{MessageKind, WriteMode};
use gix::protocol::transport::packetline::PacketLineRef;
use gix::protocol::transport::{Protocol, Service};
use gix::url::Scheme;
use gix::ObjectId;

use super::error::WireError;
use super::pktline::{self, Packet};
use super::transport::{classify, classify_client, connect, Endpoint, ShallowSafe};

/// One ref update: move `name` from `old` to `new` (all-zero `old`: create; all-zero `new`:
/// delete).
#[derive(Debug, Clone)]
pub struct RefUpdate {
    /// Full ref name.
    pub name: String,
    /// The id the ref must have now.
    pub old: ObjectId,
    /// The id to set.
    pub new: ObjectId,
}

/// What the server answered for one ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefResult {
    /// `ok <ref>`.
    Ok,
    /// `ng <ref> <reason>`.
    Rejected(String),
}

/// The server's `report-status`.
#[derive(Debug, Clone)]
pub struct Report {
    /// `unpack ok`, or the unpack error.
    pub unpack: Result<(), String>,
    /// Per-ref results in the server's order.
    pub refs: Vec<(String, RefResult)>,
    /// Side-band 2 text (the server's own explanations, e.g. "is at X but expected Y").
    pub messages: String,
}

impl Report {
    /// The result for `name`; a ref the server did not mention counts as rejected.
    pub fn result(&self, name: &str) -> RefResult {
        self.refs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| RefResult::Rejected("not reported by the server".into()))
    }
}

/// Reasons receive-pack gives when a compare-and-swap lost (the words differ across versions and
/// servers; some come from hooks of hosting services).
const CAS_REASONS: &[&str] = &[
    "failed to update ref",
    "failed to lock",
    "reference already exists",
    "already exists",
    "stale info",
    "fetch first",
    "non-fast-forward",
    "cannot lock ref",
    "atomic transaction failed",
    "incorrect old value",
    "is at ",
];

/// The most a push report (with the server's side-band messages) may hold: a push updates at
/// most a few refs, so anything near this is not a report.
const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// The most lines a push report without side-band may have.
const MAX_REPORT_LINES: usize = 10_000;

/// True when `reason` (from `ng`) means the ref was not at the expected id.
pub fn is_cas_failure(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    CAS_REASONS.iter().any(|r| reason.contains(r))
}

/// True when `reason` means the push changed nothing and may simply be sent again: a lost
/// compare-and-swap, or git's race between two pushes of byte-identical packs (two processes
/// folding the same writes in the same second build the same commits), which fails the later
/// one with "unable to migrate objects to permanent storage".
pub fn is_retryable(reason: &str) -> bool {
    is_cas_failure(reason)
        || reason
            .to_ascii_lowercase()
            .contains("unable to migrate objects")
}

/// What receive-pack offered in the last advertisement of each HTTP(S) remote this process read,
/// by URL, for the remotes whose receive-pack is known to compare every old id itself: a push
/// without an advertisement ([`super::onepost`]) goes only there, and asks only for what the
/// server offers.
static OFFERS: Mutex<Option<HashMap<String, Vec<String>>>> = Mutex::new(None);

/// Whether a receive-pack that says it is `agent` refuses every update whose old id is not the
/// ref's value, the all-zero id of a create included: git's own (`git/…`, which GitHub, GitLab,
/// Gitea and `git http-backend` run) and JGit's. Dulwich, for one, creates over an existing ref.
fn checks_old_ids(agent: Option<&str>) -> bool {
    agent.is_some_and(|a| a.starts_with("git/") || a.starts_with("JGit/"))
}

/// Whether `endpoint`'s receive-pack, as this process last read it, takes an update whose old
/// and new ids are the same as "this ref is still at that id", verified in the same `atomic`
/// transaction as the other updates: git's own (checked against git 2.47), offering `atomic`.
pub(crate) fn asserts_unchanged_refs(endpoint: &Endpoint) -> bool {
    known_offers(endpoint).is_some_and(|offers| {
        offers.iter().any(|c| c.starts_with("agent=git/")) && offers.iter().any(|c| c == "atomic")
    })
}

fn remember_offers(endpoint: &Endpoint, agent: Option<&str>, capabilities: &[String]) {
    if let Ok(mut offers) = OFFERS.lock() {
        let offers = offers.get_or_insert_with(HashMap::new);
        let url = endpoint.url.to_bstring().to_string();
        let http = matches!(endpoint.url.scheme, Scheme::Http | Scheme::Https);
        if http && checks_old_ids(agent) {
            // The agent with its value, for what only git's own receive-pack is known to do.
            let mut remembered = capabilities.to_vec();
            remembered.extend(agent.map(|agent| format!("agent={agent}")));
            offers.insert(url, remembered);
        } else {
            offers.remove(&url);
        }
    }
}

/// The capabilities `endpoint`'s receive-pack offered when this process last read its
/// advertisement; `None` when it never did, or when a push without one may not go there.
pub(crate) fn known_offers(endpoint: &Endpoint) -> Option<Vec<String>> {
    OFFERS
        .lock()
        .ok()?
        .as_ref()?
        .get(&endpoint.url.to_bstring().to_string())
        .cloned()
}

/// An open receive-pack session after the ref advertisement.
pub struct ReceivePack {
    transport: ShallowSafe,
    endpoint: Endpoint,
    refs: HashMap<String, ObjectId>,
    capabilities: Vec<String>,
    /// When the advertisement was asked for: it shows every ref update answered before.
    asked: Instant,
}

impl ReceivePack {
    /// Connects and reads the advertisement (the authorization check for writes).
    pub fn connect(endpoint: &Endpoint) -> Result<Self, WireError> {
        let asked = Instant::now();
        // receive-pack has no protocol v2.
        let mut transport = connect(endpoint, Protocol::V1)?;
        super::fetchpack::round_trip("receive-pack", "advertisement");
        let handshake = gix::protocol::handshake(
            &mut transport,
            Service::ReceivePack,
            |_| Ok(None),
            Vec::new(),
            &mut gix::progress::Discard,
        )
        .map_err(|e| classify(endpoint, "reading the refs of", &e))?;
        let mut refs = HashMap::new();
        for r in handshake.refs.unwrap_or_default() {
            let (name, id, _) = r.unpack();
            if let Some(id) = id {
                if !id.is_null() {
                    refs.insert(name.to_string(), id.to_owned());
                }
            }
        }
        let capabilities: Vec<String> = handshake
            .capabilities
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        let agent = handshake
            .capabilities
            .iter()
            .find(|c| c.name() == "agent")
            .and_then(|c| c.value().map(|v| v.to_string()));
        remember_offers(endpoint, agent.as_deref(), &capabilities);
        Ok(ReceivePack {
            transport,
            endpoint: endpoint.clone(),
            refs,
            capabilities,
            asked,
        })
    }

    /// When the advertisement was asked for: every push answered before then is in it.
    pub fn asked(&self) -> Instant {
        self.asked
    }

    /// The advertised id of `name`, if the ref exists.
    pub fn tip(&self, name: &str) -> Option<ObjectId> {
        self.refs.get(name).copied()
    }

    /// Whether the server offers `capability` (e.g. `atomic`).
    pub fn offers(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }

    /// The advertised refs whose names start with `prefix`.
    pub fn refs_under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, ObjectId)> {
        self.refs
            .iter()
            .filter(move |(name, _)| name.starts_with(prefix))
            .map(|(name, id)| (name.as_str(), *id))
    }

    /// Sends `updates` and, unless every update is a delete, `pack`; returns the server's report.
    pub fn push(mut self, updates: &[RefUpdate], pack: &[u8]) -> Result<Report, WireError> {
        let (request, side_band) = push_request(&self.endpoint, &self.capabilities, updates, pack)?;
        let endpoint = self.endpoint.clone();
        let writer = self
            .transport
            .request(WriteMode::Binary, MessageKind::Flush, false)
            .map_err(|e| classify_client(&endpoint, "pushing to", e))?;
        let (mut raw, mut reader) = writer.into_parts();
        raw.write_all(&request)
            .and_then(|_| raw.flush())
            .map_err(|e| classify_client(&endpoint, "pushing to", e.into()))?;
        // Ends the HTTP request body; for stream transports the server knows the pack's length.
        drop(raw);
        reader.reset(Protocol::V1);
        read_report(&endpoint, side_band, || match reader.readline() {
            None => Ok(None),
            Some(line) => {
                let line = line
                    .map_err(|e| {
                        classify_client(&endpoint, "reading the push result from", e.into())
                    })?
                    .map_err(|e| {
                        WireError::Remote(endpoint.scrub(&format!(
                            "{} sent a malformed push result: {e}",
                            endpoint.display
                        )))
                    })?;
                Ok(match line {
                    PacketLineRef::Data(data) => Some(data.to_vec()),
                    _ => None,
                })
            }
        })
    }
}

/// The body of a push: `<old> <new> <ref>` commands, the first with the capabilities gitstate
/// uses of those the server `offers`, a flush, and `pack` unless every update is a delete.
/// Also whether the answer comes in side-band. Counts the push in the metrics.
pub(crate) fn push_request(
    endpoint: &Endpoint,
    offers: &[String],
    updates: &[RefUpdate],
    pack: &[u8],
) -> Result<(Vec<u8>, bool), WireError> {
    let offered = |capability: &str| offers.iter().any(|c| c == capability);
    let remote = |what: String| WireError::Remote(endpoint.scrub(&what));
    if updates.is_empty() {
        return Err(WireError::Internal("a push without ref updates".into()));
    }
    if !offered("report-status") {
        return Err(remote(format!(
            "{} does not offer report-status; cannot verify a push",
            endpoint.display
        )));
    }
    let all_deletes = updates.iter().all(|u| u.new.is_null());
    if updates.iter().any(|u| u.new.is_null()) && !offered("delete-refs") {
        return Err(remote(format!(
            "{} does not allow deleting refs (delete-refs)",
            endpoint.display
        )));
    }
    let mut capabilities = vec!["report-status".to_string()];
    for optional in ["delete-refs", "atomic", "side-band-64k", "quiet"] {
        if offered(optional) {
            capabilities.push(optional.into());
        }
    }
    if offered("object-format") {
        capabilities.push("object-format=sha1".into());
    }
    capabilities.push(concat!("agent=gitstate/", env!("CARGO_PKG_VERSION")).into());
    let side_band = offered("side-band-64k");

    let mut request = Vec::new();
    for (i, u) in updates.iter().enumerate() {
        let mut line = format!("{} {} {}", u.old, u.new, u.name).into_bytes();
        if i == 0 {
            line.push(0);
            line.extend_from_slice(capabilities.join(" ").as_bytes());
        }
        line.push(b'\n');
        pktline::encode(&line, &mut request).map_err(WireError::Internal)?;
    }
    request.extend_from_slice(pktline::FLUSH);
    if !all_deletes {
        request.extend_from_slice(pack);
    }
    super::fetchpack::round_trip("receive-pack", "push");
    metrics::counter!(crate::metrics::GIT_PUSHES).increment(1);
    if !all_deletes {
        metrics::counter!(crate::metrics::GIT_PUSHED_BYTES).increment(pack.len() as u64);
    }
    Ok((request, side_band))
}

/// Reads receive-pack's answer to a push: `next_line` gives each data pkt-line until the first
/// flush (`None`). With side-band, band 1 carries the report, band 2 the server's messages and
/// band 3 an abort.
pub(crate) fn read_report(
    endpoint: &Endpoint,
    side_band: bool,
    mut next_line: impl FnMut() -> Result<Option<Vec<u8>>, WireError>,
) -> Result<Report, WireError> {
    let mut report_bytes = Vec::new();
    let mut plain_lines: Vec<Vec<u8>> = Vec::new();
    let mut messages = String::new();
    while let Some(data) = next_line()? {
        if !side_band {
            if plain_lines.len() > MAX_REPORT_LINES {
                return Err(WireError::Remote(format!(
                    "{} sent a push report of more than {MAX_REPORT_LINES} lines",
                    endpoint.display
                )));
            }
            plain_lines.push(data);
            continue;
        }
        if report_bytes.len() + messages.len() > MAX_REPORT_BYTES {
            return Err(WireError::Remote(format!(
                "{} sent a push report of more than {MAX_REPORT_BYTES} bytes",
                endpoint.display
            )));
        }
        match data.split_first() {
            Some((1, rest)) => report_bytes.extend_from_slice(rest),
            Some((2, rest)) => messages.push_str(&String::from_utf8_lossy(rest)),
            Some((3, rest)) => {
                return Err(WireError::Remote(endpoint.scrub(&format!(
                    "{} aborted the push: {}",
                    endpoint.display,
                    String::from_utf8_lossy(rest).trim()
                ))))
            }
            _ => {}
        }
    }
    if plain_lines.is_empty() && report_bytes.is_empty() && messages.is_empty() {
        // Not a word after the pack: the connection ended (a server that refuses a push says
        // why). Whether the push was made, only the next advertisement tells.
        return Err(WireError::Unavailable(format!(
            "{} closed the connection before it sent the push result (the push may have been made or not)",
            endpoint.display
        )));
    }
    if side_band {
        let packets = pktline::split(&report_bytes).map_err(|e| {
            WireError::Remote(format!(
                "{} sent a malformed push report: {e}",
                endpoint.display
            ))
        })?;
        for p in packets {
            match p {
                Packet::Data(d) => plain_lines.push(d.to_vec()),
                Packet::Flush => break,
                Packet::Special => {}
            }
        }
    }
    parse_report(&plain_lines, messages)
        .map_err(|e| WireError::Remote(endpoint.scrub(&format!("{}: {e}", endpoint.display))))
}

/// Parses `report-status` lines (`unpack …`, then `ok <ref>` / `ng <ref> <reason>`).
fn parse_report(lines: &[Vec<u8>], messages: String) -> Result<Report, String> {
    let mut lines = lines.iter().map(|l| {
        String::from_utf8_lossy(l)
            .trim_end_matches('\n')
            .to_string()
    });
    let unpack_line = lines.next().ok_or_else(|| {
        let hint = messages.trim();
        if hint.is_empty() {
            "the server sent no push report".to_string()
        } else {
            format!("the server sent no push report: {hint}")
        }
    })?;
    let unpack = match unpack_line.strip_prefix("unpack ") {
        Some("ok") => Ok(()),
        Some(err) => Err(err.to_string()),
        None => return Err(format!("unexpected push report line {unpack_line:?}")),
    };
    let mut refs = Vec::new();
    for line in lines {
        if let Some(name) = line.strip_prefix("ok ") {
            refs.push((name.to_string(), RefResult::Ok));
        } else if let Some(rest) = line.strip_prefix("ng ") {
            let (name, reason) = rest.split_once(' ').unwrap_or((rest, "rejected"));
            refs.push((name.to_string(), RefResult::Rejected(reason.to_string())));
        }
        // Other lines (e.g. `option …` of report-status-v2) carry nothing we need.
    }
    Ok(Report {
        unpack,
        refs,
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a (malicious) server reports, parsing gives a report or an error, and a ref
        /// it does not name `ok` is never taken as pushed.
        #[test]
        fn any_report_parses_or_fails_and_never_invents_success(
            lines in proptest::collection::vec(
                prop_oneof![
                    Just(b"unpack ok\n".to_vec()),
                    Just(b"ok refs/heads/other\n".to_vec()),
                    Just(b"ng refs/heads/main\n".to_vec()),
                    Just(b"ng refs/heads/main is at 1 but expected 2\n".to_vec()),
                    proptest::collection::vec(any::<u8>(), 0..40),
                ],
                0..8,
            )
        ) {
            if let Ok(report) = parse_report(&lines, String::new()) {
                let named_ok = lines.iter().skip(1).any(|l| l.trim_ascii_end() == b"ok refs/heads/main");
                if !named_ok {
                    prop_assert_ne!(report.result("refs/heads/main"), RefResult::Ok);
                }
            }
        }
    }

    #[test]
    fn parses_reports() {
        let lines: Vec<Vec<u8>> = vec![
            b"unpack ok\n".to_vec(),
            b"ok refs/heads/main\n".to_vec(),
            b"ng refs/heads/locks/a failed to update ref\n".to_vec(),
        ];
        let r = parse_report(&lines, String::new()).unwrap();
        assert_eq!(r.unpack, Ok(()));
        assert_eq!(r.result("refs/heads/main"), RefResult::Ok);
        assert_eq!(
            r.result("refs/heads/locks/a"),
            RefResult::Rejected("failed to update ref".into())
        );
        assert!(matches!(r.result("x"), RefResult::Rejected(_)));
        let r = parse_report(
            &[b"unpack index-pack abnormal exit".to_vec()],
            String::new(),
        )
        .unwrap();
        assert_eq!(r.unpack, Err("index-pack abnormal exit".into()));
        assert!(parse_report(&[], "fatal: x".into())
            .unwrap_err()
            .contains("fatal: x"));
    }

    #[test]
    fn an_answer_that_ends_before_any_report_is_a_broken_connection_not_an_error_of_the_server() {
        let endpoint =
            Endpoint::parse("http://host/x.git", None, std::time::Duration::from_secs(1)).unwrap();
        for side_band in [false, true] {
            let ended = read_report(&endpoint, side_band, || Ok(None)).unwrap_err();
            assert!(
                matches!(&ended, WireError::Unavailable(why) if why.contains("before it sent the push result")),
                "{ended:?}"
            );
        }
        // A server that says why it refused is heard: its words are the error.
        let mut lines = vec![b"\x02fatal: hook declined\n".to_vec()].into_iter();
        let refused = read_report(&endpoint, true, || Ok(lines.next())).unwrap_err();
        assert!(
            matches!(&refused, WireError::Remote(why) if why.contains("hook declined")),
            "{refused:?}"
        );
    }

    #[test]
    fn only_receive_packs_known_to_compare_old_ids_get_pushes_without_an_advertisement() {
        for agent in ["git/2.47.3", "git/github-3f2e1d", "JGit/6.10.0"] {
            assert!(checks_old_ids(Some(agent)), "{agent}");
        }
        for agent in [
            None,
            Some("dulwich/1.2.21"),
            Some("gitstate/0.1"),
            Some("Git/2"),
        ] {
            assert!(!checks_old_ids(agent), "{agent:?}");
        }
    }

    #[test]
    fn recognises_cas_failures() {
        for r in [
            "failed to update ref",
            "stale info",
            "fetch first",
            "non-fast-forward",
            "reference already exists",
        ] {
            assert!(is_cas_failure(r), "{r}");
        }
        assert!(!is_cas_failure("missing necessary objects"));
        assert!(!is_cas_failure("hook declined"));
    }
}

/// Property-based fuzzing of what the server sends back (bounded in CI; longer runs:
/// `PROPTEST_CASES=200000 cargo test -p gitstate-git fuzz_`).
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::pktline;
    use proptest::prelude::*;

    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        #[test]
        fn fuzz_pktline_split_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = pktline::split(&bytes);
        }

        #[test]
        fn fuzz_pktline_round_trips(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..200), 0..8)) {
            let mut wire = Vec::new();
            for p in &payloads {
                pktline::encode(p, &mut wire).unwrap();
            }
            let packets = pktline::split(&wire).unwrap();
            prop_assert_eq!(packets.len(), payloads.len());
        }

        #[test]
        fn fuzz_report_status_never_panics(
            lines in proptest::collection::vec(
                prop_oneof![
                    "unpack [a-z ]{0,12}",
                    "ok refs/heads/[a-z/]{0,12}",
                    "ng refs/heads/[a-z/]{0,12}( [a-z ]{0,16})?",
                    ".{0,30}",
                ],
                0..6,
            ),
            messages in ".{0,40}",
        ) {
            let raw: Vec<Vec<u8>> = lines.iter().map(|l| l.as_bytes().to_vec()).collect();
            if let Ok(report) = parse_report(&raw, messages) {
                // every ref the report names has a verdict, and an unnamed one is "rejected"
                let _ = report.result("refs/heads/main");
                prop_assert!(lines.first().is_some_and(|l| l.starts_with("unpack ")));
            }
        }
    }
}
