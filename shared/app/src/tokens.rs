//! Team-mode callers: tokens whose SHA-256 hashes (`sha256:<hex>`) are configured, checked in
//! constant time; client certificate subjects; and the memory of credentials checked a moment
//! ago ([`Recent`]). Named users with a password are `users.rs`.

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
    same_digest(hash, &digest(token))
}

/// True when two digests are equal, compared in constant time.
pub fn same_digest(hash: &[u8; 32], digest: &[u8; 32]) -> bool {
    bool::from(digest.ct_eq(hash))
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

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
