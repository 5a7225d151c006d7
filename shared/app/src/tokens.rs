//! Team-mode callers: tokens whose SHA-256 hashes (`sha256:<hex>`) are configured, checked in
//! constant time; and named users with a password hash, as `htpasswd` writes them
//! (`NAME:$2y$…` bcrypt, for passwords people choose) or `NAME:sha256:<hex>` (for random tokens).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gitstate_core::{Rights, Scope};
use sha2::{Digest, Sha256};

use crate::config::TokenConfig;
use subtle::ConstantTimeEq;

/// Decodes `sha256:<64 hex digits>`; the error names the rule, never the value.
pub fn parse_hash(text: &str) -> Result<[u8; 32], String> {
    let hex = text.strip_prefix("sha256:").ok_or_else(|| {
        "a token hash must look like sha256:<64 hex digits> (printf %s TOKEN | sha256sum)"
            .to_owned()
    })?;
    if hex.len() != 64 {
        return Err("a token hash must have 64 hex digits after 'sha256:'".into());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| "a token hash may hold only hex digits after 'sha256:'".to_owned())?;
    }
    Ok(out)
}

/// The team tokens of `auth`: the `token_hashes` entries (`sha256:<hex>`, optionally followed by
/// `;access=RIGHTS` and `;paths=PATTERN,PATTERN`) and the `token { … }` blocks, each decoded with
/// its [`Scope`]. A list given in one variable or flag is split at its commas before it gets
/// here, so a piece that does not start with `sha256:` continues the previous entry's `paths`.
/// Errors name the rule, never a hash.
pub fn parse_tokens(
    entries: &[String],
    blocks: &[TokenConfig],
) -> Result<Vec<([u8; 32], Scope)>, String> {
    let mut joined: Vec<String> = Vec::new();
    for piece in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        match joined.last_mut() {
            Some(last) if !piece.starts_with("sha256:") => {
                last.push(',');
                last.push_str(piece);
            }
            _ => joined.push(piece.to_owned()),
        }
    }
    let mut tokens = joined
        .iter()
        .map(|entry| parse_entry(entry))
        .collect::<Result<Vec<_>, _>>()?;
    for block in blocks {
        let rights = match &block.access {
            Some(access) => access.parse()?,
            None => Rights::ReadWrite,
        };
        tokens.push((parse_hash(&block.hash)?, Scope::new(rights, &block.paths)?));
    }
    // A token listed twice would get whichever scope comes first (the first match wins): refuse
    // the configuration rather than guess which one the operator meant.
    for (i, (hash, _)) in tokens.iter().enumerate() {
        if let Some(j) = tokens[..i].iter().position(|(other, _)| other == hash) {
            return Err(format!(
                "team tokens {} and {} (counting token_hashes first, then token blocks) have the same hash: list each token once, with the scope it should have",
                j + 1,
                i + 1
            ));
        }
    }
    Ok(tokens)
}

/// A certificate subject as attributes: `TYPE=value` pairs split at the commas that are not
/// escaped (RFC 4514: `\,` stays in the value), types compared without regard to case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectPattern(Vec<(String, String)>);

impl SubjectPattern {
    /// Parses `CN=team-a,O=acme`; `Err` names the rule.
    pub fn parse(text: &str) -> Result<SubjectPattern, String> {
        let mut pairs = Vec::new();
        let (mut part, mut escaped) = (String::new(), false);
        for c in text.chars().chain([',']) {
            if c == ',' && !escaped {
                let (kind, value) = part.trim().split_once('=').ok_or_else(|| {
                    format!(
                        "certificate subject '{text}': each part reads TYPE=value, e.g. CN=team-a"
                    )
                })?;
                if kind.trim().is_empty() || value.trim().is_empty() {
                    return Err(format!(
                        "certificate subject '{text}': a part has an empty type or value"
                    ));
                }
                pairs.push((kind.trim().to_ascii_uppercase(), value.trim().to_owned()));
                part.clear();
            } else {
                part.push(c);
            }
            escaped = c == '\\' && !escaped;
        }
        Ok(SubjectPattern(pairs))
    }

    /// Whether a certificate whose subject has the attributes `subject` (`TYPE=value`, as
    /// x509 prints them) holds every attribute of the pattern.
    pub fn matches(&self, subject: &[(String, String)]) -> bool {
        self.0.iter().all(|(kind, value)| {
            subject
                .iter()
                .any(|(k, v)| k.eq_ignore_ascii_case(kind) && v == value)
        })
    }
}

/// The subject of the DER certificate `der` as `TYPE=value` attributes (types by their short
/// names, values with RFC 4514 escaping, as [`SubjectPattern`] reads them); `None` when it does
/// not parse. Only certificates the TLS layer verified are read.
pub fn subject_attributes(der: &[u8]) -> Option<Vec<(String, String)>> {
    use x509_cert::der::Decode;
    let certificate = x509_cert::Certificate::from_der(der).ok()?;
    let attributes = certificate
        .tbs_certificate
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .filter_map(|attribute| {
            let text = attribute.to_string();
            let (kind, value) = text.split_once('=')?;
            Some((kind.to_owned(), value.to_owned()))
        })
        .collect();
    Some(attributes)
}

/// One `sha256:<hex>[;access=RIGHTS][;paths=P,P]` entry.
fn parse_entry(entry: &str) -> Result<([u8; 32], Scope), String> {
    let mut parts = entry.split(';');
    let hash = parse_hash(parts.next().unwrap_or_default().trim())?;
    let (mut rights, mut paths) = (None, None);
    for part in parts {
        let (key, value) = part.split_once('=').ok_or_else(|| {
            "a token's scope reads sha256:<hex>;access=read-only;paths=teams/a/** (each part KEY=VALUE)".to_owned()
        })?;
        let value = value.trim();
        match key.trim() {
            "access" if rights.is_none() => rights = Some(value.parse::<Rights>()?),
            "paths" if paths.is_none() => {
                paths = Some(
                    value
                        .split(',')
                        .map(|p| p.trim().to_owned())
                        .collect::<Vec<_>>(),
                )
            }
            "access" | "paths" => return Err(format!("a token's '{}' is given twice", key.trim())),
            other => {
                return Err(format!(
                    "a token's scope has no '{other}'; it takes access=… and paths=…"
                ))
            }
        }
    }
    let scope = Scope::new(rights.unwrap_or_default(), &paths.unwrap_or_default())?;
    Ok((hash, scope))
}

/// The `sha256:<hex>` form of `token`'s hash, as configured for team mode (the wrapper configures
/// its per-run token this way).
pub fn hash_of(token: &str) -> String {
    digest(token)
        .iter()
        .fold(String::from("sha256:"), |mut out, b| {
            out.push_str(&format!("{b:02x}"));
            out
        })
}

/// The SHA-256 of `token`, as a configured hash decodes ([`parse_hash`]).
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// True when `token` hashes to `hash`, compared in constant time.
pub fn matches(hash: &[u8; 32], token: &str) -> bool {
    let digest = Sha256::digest(token.as_bytes());
    bool::from(digest.as_slice().ct_eq(hash))
}

/// How a user's password is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Secret {
    /// `sha256:<hex>`: for random tokens, where a fast hash is enough.
    Sha256([u8; 32]),
    /// `$2a$`, `$2b$` or `$2y$` bcrypt (`htpasswd -nB NAME`, which asks for the password): for passwords people
    /// choose.
    Bcrypt(String),
}

/// The configured team users (`NAME:HASH`), and the verifications that succeeded recently.
#[derive(Debug, Default)]
pub struct Users {
    users: HashMap<String, Secret>,
    /// SHA-256 of (name, password, hash) of recent successful bcrypt checks: bcrypt is slow on
    /// purpose (tens of milliseconds), and a Terraform run sends several requests.
    verified: Recent,
}

/// Credentials checked a moment ago, by a key of their own (a digest, never the secret), for
/// a bounded time and number: a later check of the same request answers from here.
#[derive(Debug)]
pub(crate) struct Recent {
    kept_for: Duration,
    checked: Mutex<HashMap<[u8; 32], Instant>>,
}

impl Default for Recent {
    fn default() -> Self {
        Recent::new(VERIFIED_FOR)
    }
}

impl Recent {
    pub(crate) fn new(kept_for: Duration) -> Recent {
        Recent {
            kept_for,
            checked: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `key` was checked less than the kept time ago.
    pub(crate) fn contains(&self, key: &[u8; 32]) -> bool {
        self.checked
            .lock()
            .map(|checked| {
                checked
                    .get(key)
                    .is_some_and(|at| at.elapsed() < self.kept_for)
            })
            .unwrap_or(false)
    }

    /// Remembers `key` as checked now (at most [`VERIFIED_MAX`] keys).
    pub(crate) fn insert(&self, key: [u8; 32]) {
        if let Ok(mut checked) = self.checked.lock() {
            if checked.len() >= VERIFIED_MAX {
                checked.retain(|_, at| at.elapsed() < self.kept_for);
                if checked.len() >= VERIFIED_MAX {
                    checked.clear();
                }
            }
            checked.insert(key, Instant::now());
        }
    }
}

/// How long a successful bcrypt check is remembered.
const VERIFIED_FOR: Duration = Duration::from_secs(300);
/// Most remembered checks.
const VERIFIED_MAX: usize = 1024;

impl Users {
    /// Parses `NAME:HASH` entries; errors name the entry by its user name, never the hash.
    pub fn parse(entries: &[String]) -> Result<Users, String> {
        let mut users = HashMap::new();
        for entry in entries {
            let (name, hash) = entry.split_once(':').ok_or_else(|| {
                "a team user must look like NAME:HASH, e.g. the output of `htpasswd -nB NAME` (it asks for the password)".to_owned()
            })?;
            if name.is_empty() {
                return Err("a team user has an empty name".into());
            }
            let secret = if hash.starts_with("sha256:") {
                Secret::Sha256(parse_hash(hash).map_err(|e| format!("user {name}: {e}"))?)
            } else if ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p))
                && hash.len() == 60
            {
                Secret::Bcrypt(hash.to_owned())
            } else {
                return Err(format!(
                    "user {name}: the password hash must be bcrypt ($2y$…, from `htpasswd -nB`) or sha256:<64 hex digits>"
                ));
            };
            if users.insert(name.to_owned(), secret).is_some() {
                return Err(format!("user {name} is configured twice"));
            }
        }
        Ok(Users {
            users,
            verified: Recent::default(),
        })
    }

    /// Whether no user is configured.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `name` is a configured user whose password is `password`. A bcrypt check runs on
    /// this thread: async code calls [`Users::verify`] instead, which runs it on a blocking
    /// thread; once that succeeded, this answers from memory.
    pub fn admits(&self, name: &str, password: &str) -> bool {
        match self.users.get(name) {
            Some(Secret::Sha256(hash)) => matches(hash, password),
            Some(Secret::Bcrypt(hash)) => {
                let key = remembered_key(name, password, hash);
                if self.verified.contains(&key) {
                    return true;
                }
                let ok = bcrypt::verify(password, hash).unwrap_or(false);
                if ok {
                    self.verified.insert(key);
                }
                ok
            }
            None => {
                // The same work for an unknown name, so timing does not tell which names exist.
                let _ = bcrypt::verify(password, UNKNOWN_USER_HASH);
                false
            }
        }
    }

    /// [`Users::admits`] for async code: bcrypt (slow on purpose, tens of milliseconds) runs
    /// with `tokio::task::spawn_blocking`, never on the async worker threads, so a flood of
    /// wrong passwords cannot stall the requests of everyone else.
    pub async fn verify(&self, name: &str, password: &str) -> bool {
        let hash = match self.users.get(name) {
            Some(Secret::Sha256(hash)) => return matches(hash, password),
            Some(Secret::Bcrypt(hash)) => hash.clone(),
            None => UNKNOWN_USER_HASH.to_owned(),
        };
        let known = self.users.contains_key(name);
        let key = remembered_key(name, password, &hash);
        if known && self.verified.contains(&key) {
            return true;
        }
        let password = zeroize::Zeroizing::new(password.to_owned());
        let checked = tokio::task::spawn_blocking(move || {
            bcrypt::verify(password.as_str(), &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        let ok = known && checked;
        if ok {
            self.verified.insert(key);
        }
        ok
    }
}

/// The memory key of a successful bcrypt check: SHA-256 of name, password and hash.
fn remembered_key(name: &str, password: &str, hash: &str) -> [u8; 32] {
    Sha256::new()
        .chain_update(name.as_bytes())
        .chain_update([0])
        .chain_update(password.as_bytes())
        .chain_update([0])
        .chain_update(hash.as_bytes())
        .finalize()
        .into()
}

/// A bcrypt hash (cost 10) no password matches in practice; verified for unknown names.
const UNKNOWN_USER_HASH: &str = "$2b$10$aaaaaaaaaaaaaaaaaaaaaOzQyCqQ7VxHXzG1bq8mEC1nmQ9lzKwAa";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_and_matches() {
        let real = format!("sha256:{}", hex(&Sha256::digest(b"s3cret")));
        let hash = parse_hash(&real).unwrap();
        assert!(matches(&hash, "s3cret"));
        assert!(!matches(&hash, "s3cret "));
        assert!(!matches(&hash, ""));
        assert!(parse_hash("md5:abc").is_err());
        assert!(parse_hash("sha256:xyz").is_err());
        assert!(parse_hash(&format!("sha256:{}", "g".repeat(64))).is_err());
        assert_eq!(hash_of("s3cret"), real);
    }

    /// The same token twice, with two scopes, stops the start (issue 50): the first, widest
    /// scope would otherwise win silently. The sentence names positions, never a hash.
    #[test]
    fn a_token_listed_twice_is_refused() {
        let hash = hash_of("t");
        let twice = parse_tokens(&[hash.clone(), format!("{hash};access=read-only")], &[])
            .expect_err("the same token twice");
        assert!(twice.contains("tokens 1 and 2"), "{twice}");
        assert!(!twice.contains(&hash[7..]), "{twice}");
        let block = TokenConfig {
            hash: hash.clone(),
            access: Some("outputs-only".into()),
            paths: Vec::new(),
        };
        assert!(
            parse_tokens(&[hash], &[block]).is_err(),
            "a list entry and a block"
        );
        assert!(parse_tokens(&[hash_of("a"), hash_of("b")], &[]).is_ok());
    }

    #[test]
    fn token_entries_carry_a_scope_and_a_split_list_is_joined_again() {
        let (a, b) = (hash_of("token-a"), hash_of("token-b"));
        // As clap hands over `--token-hash 'A;access=outputs-only;paths=teams/a/**,teams/c/*'`
        // and a second hash from the same comma-separated variable.
        let entries = [
            format!("{a};access=outputs-only;paths=teams/a/**"),
            "teams/c/*".to_owned(),
            b.clone(),
        ];
        let block = TokenConfig {
            hash: hash_of("token-c"),
            access: Some("read-only".into()),
            paths: Vec::new(),
        };
        let tokens = parse_tokens(&entries, &[block]).expect("tokens");
        assert_eq!(tokens.len(), 3);
        let scope = &tokens[0].1;
        assert_eq!(scope.rights(), Rights::OutputsOnly);
        assert_eq!(scope.to_string(), "outputs-only on teams/a/**, teams/c/*");
        assert!(matches(&tokens[0].0, "token-a"));
        assert!(!tokens[1].1.is_limited());
        assert_eq!(tokens[2].1.to_string(), "read-only on every state");
        for (bad, why) in [
            (format!("{a};access=admin"), "unknown"),
            (format!("{a};paths=a/../b"), ".."),
            (format!("{a};owner=x"), "no 'owner'"),
            (format!("{a};access=read-only;access=read-write"), "twice"),
            (format!("{a};read-only"), "KEY=VALUE"),
            ("teams/a/**".to_owned(), "sha256:"),
        ] {
            let err = parse_tokens(std::slice::from_ref(&bad), &[]).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(
                !err.contains(&a[7..]),
                "the hash reached the message: {err}"
            );
        }
    }

    #[test]
    fn subjects_match_by_their_attributes_whatever_the_order() {
        let attrs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        let pattern = SubjectPattern::parse("cn=team-a, O=Acme\\, Inc.").expect("a subject");
        assert!(pattern.matches(&attrs(&[
            ("O", "Acme\\, Inc."),
            ("CN", "team-a"),
            ("C", "DE")
        ])));
        assert!(
            !pattern.matches(&attrs(&[("CN", "team-a")])),
            "O is required"
        );
        assert!(!pattern.matches(&attrs(&[("CN", "team-ab"), ("O", "Acme\\, Inc.")])));
        for bad in ["team-a", "CN=", "=x", "CN=a,,O=b"] {
            assert!(SubjectPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn users_with_bcrypt_and_sha256() {
        let bcrypt_hash = bcrypt::hash("correct horse", 4).unwrap();
        let users = Users::parse(&[
            format!("alice:{bcrypt_hash}"),
            format!("ci:{}", hash_of("tok-123")),
        ])
        .unwrap();
        assert!(users.admits("alice", "correct horse"));
        assert!(users.admits("alice", "correct horse"), "remembered");
        assert!(!users.admits("alice", "wrong"));
        assert!(!users.admits("bob", "correct horse"));
        assert!(users.admits("ci", "tok-123"));
        assert!(!users.admits("alice", "tok-123"));
        for bad in ["alice", ":$2y$", "alice:md5:x", "alice:$2y$10$short"] {
            let e = Users::parse(&[bad.to_owned()]).unwrap_err();
            assert!(!e.contains("$2y$10$short"), "{e}");
        }
        assert!(Users::parse(&[format!("a:{bcrypt_hash}"), format!("a:{bcrypt_hash}")]).is_err());
        // Unknown names cost a real bcrypt check too.
        assert!(matches!(bcrypt::verify("x", UNKNOWN_USER_HASH), Ok(false)));
    }

    /// bcrypt runs on a blocking thread: on a runtime with a single worker thread, a ticker keeps
    /// ticking while a slow check (cost 10: tens of milliseconds optimised, about a second in a debug build) is under way. Run on the
    /// worker, the check would hold it and the ticker would not tick at all.
    #[test]
    fn bcrypt_runs_off_the_async_workers() {
        let slow = bcrypt::hash("correct horse", 10).unwrap();
        let users = std::sync::Arc::new(Users::parse(&[format!("alice:{slow}")]).unwrap());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (ticks, ok, wrong) = runtime.block_on(async {
            let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counter = ticks.clone();
            let ticker = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
            tokio::task::yield_now().await;
            let wrong = users.verify("alice", "wrong").await;
            let during = ticks.load(std::sync::atomic::Ordering::Relaxed);
            let ok = users.verify("alice", "correct horse").await;
            ticker.abort();
            (during, ok, wrong)
        });
        assert!(ok, "the right password was refused");
        assert!(!wrong, "a wrong password was admitted");
        assert!(
            ticks >= 3,
            "the async worker was blocked during bcrypt (the ticker ticked {ticks} times)"
        );
        // Remembered now: the synchronous check answers from memory.
        assert!(users.admits("alice", "correct horse"));
    }

    #[test]
    fn verify_refuses_unknown_names_after_a_real_check() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let users =
            Users::parse(&[format!("alice:{hash}"), format!("ci:{}", hash_of("tok"))]).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            assert!(users.verify("alice", "pw").await);
            assert!(!users.verify("bob", "pw").await);
            assert!(!users.verify("alice", "nope").await);
            assert!(users.verify("ci", "tok").await);
            assert!(!users.verify("ci", "nope").await);
        });
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
