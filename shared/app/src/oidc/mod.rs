//! Callers that prove who they are with their workload's OIDC token (DESIGN §6, "OIDC callers"):
//! a Kubernetes projected service-account token, a GitHub Actions or GitLab CI ID token, sent
//! as the backend's password (any user name) or as `Authorization: Bearer`. No static secret
//! to create, store or rotate.
//!
//! One `auth { oidc { … } }` block per issuer: its `issuer` and `audience` (both matched
//! exactly), its keys (`jwks_file`, read again when it changes; removed or unusable, it admits
//! nothing), the longest life a token may have, and rules that map a token's claims to a caller
//! (`name`, `access`, `paths`, exactly as a scoped token's). `verify.rs` checks a token (the one
//! parser: a standard JOSE library, only RS256, ES256 and EdDSA; a refusal tells what failed in
//! the token, the log tells why), `keys.rs` holds an issuer's keys, `rules.rs` matches claims
//! and refuses, at start, rules a stranger could match.

mod claim_rules;
mod jwks;
mod verify;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use gitstate_core::{Rights, Scope};
use serde::Deserialize;

use crate::blocks::one_or_more;
/// How often a `jwks_file` is looked at, at most (tests wait this long after changing one).
#[cfg(test)]
pub(crate) use jwks::FILE_RECHECK;
pub use verify::{Refused, Verified};

/// A token may claim a life (`exp` − `iat`) this long at most, unless `max_token_life` says
/// otherwise: a projected token is valid until its `exp` (there is no revocation check).
pub const DEFAULT_MAX_TOKEN_LIFE: Duration = Duration::from_secs(24 * 3600);
/// How long after its `exp` a token may still finish the run whose lock it took, unless
/// `max_run` says otherwise.
pub const DEFAULT_MAX_RUN: Duration = Duration::from_secs(3600);
/// Clock skew allowed on `exp`, `nbf` and `iat`, unless `clock_skew` says otherwise.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// One `auth { oidc { … } }` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer, exactly as tokens name it in `iss` (`https://token.actions.githubusercontent.com`).
    pub issuer: String,
    /// The audience tokens must name in `aud` (e.g. `gitstate`).
    pub audience: String,
    /// The issuer's keys as a JWKS document on disk (a cluster whose issuer cannot be reached
    /// from here): read again when it changes (removed, unreadable or emptied: no token of the
    /// issuer is admitted); no outbound call is made. Without it the keys are fetched from the
    /// issuer's discovery document.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// The longest life a token may have (`exp` − `iat`), e.g. `"1h"`; default 24 h.
    #[serde(default)]
    pub max_token_life: Option<String>,
    /// How long after its `exp` a token may still finish the run whose lock it took (its
    /// writes under that lock's ID, and its UNLOCK), e.g. `"2h"`; default 1 h.
    #[serde(default)]
    pub max_run: Option<String>,
    /// Clock skew allowed on `exp`, `nbf` and `iat`; default 60 s.
    #[serde(default)]
    pub clock_skew: Option<String>,
    /// Claim rules, the first that matches wins (`rule { claims = { sub = "…" } name = "…" }`).
    #[serde(default, rename = "rule", deserialize_with = "one_or_more")]
    pub rules: Vec<RuleConfig>,
}

/// One `rule { … }` of an `oidc` block: the claims a token must carry, and the caller it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// String claims and the pattern each must match: exact, or with `*` for any run of
    /// characters except `:` (`system:serviceaccount:team-a:*`) and `**` for any run
    /// (`repo:acme/infra:**`). A dotted name reaches into objects (`kubernetes.io.namespace`).
    /// Not every pattern may be only `*`; under GitHub's and GitLab.com's issuers one claim
    /// must be an owner's id, exactly (`rules.rs`).
    pub claims: BTreeMap<String, String>,
    /// The caller's name: the writer in commit messages and the commits' author.
    pub name: String,
    /// `read-write` (the default), `read-only` or `outputs-only`, as for a token.
    #[serde(default)]
    pub access: Option<String>,
    /// State path patterns it may use, as for a token; empty: every path.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// The configured issuers, checked once at start.
#[derive(Debug, Default)]
pub struct Issuers {
    issuers: Vec<verify::Issuer>,
}

impl Issuers {
    /// The issuers `configs` describe; a sentence naming the issuer and the key when one is
    /// wrong (no keys, an unreadable JWKS, a rule without claims or name, a rule that matches
    /// every token or leaves a shared issuer's owner unpinned, a bad scope).
    pub fn from_config(configs: &[OidcConfig]) -> Result<Issuers, String> {
        let mut issuers = Vec::new();
        for config in configs {
            if issuers
                .iter()
                .any(|i: &verify::Issuer| i.name() == config.issuer)
            {
                return Err(format!(
                    "auth.oidc: issuer '{}' is configured twice; give each issuer one block",
                    config.issuer
                ));
            }
            issuers
                .push(issuer(config).map_err(|e| format!("auth.oidc '{}': {e}", config.issuer))?);
        }
        Ok(Issuers { issuers })
    }

    /// Whether any issuer is configured.
    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }

    /// Checks `token`: `None` when it is not a JWT at all (a team token, a password), else the
    /// caller it is or why it is refused. A JWT is refused with the same sentence whether or
    /// not any issuer is configured: an answer never tells which issuers are.
    pub fn verify(&self, token: &str) -> Option<Result<Verified, Refused>> {
        verify::verify(&self.issuers, token)
    }

    /// [`Issuers::verify`], fetching an issuer's keys when they are old or lack the token's key
    /// (bounded: `keys.rs`).
    pub async fn verify_fetching(&self, token: &str) -> Option<Result<Verified, Refused>> {
        verify::verify_fetching(&self.issuers, token).await
    }
}

fn issuer(config: &OidcConfig) -> Result<verify::Issuer, String> {
    if !config.issuer.starts_with("https://") {
        return Err("the issuer must be an https:// URL, as tokens name it in 'iss'".into());
    }
    if config.audience.is_empty() {
        return Err("an audience is needed (tokens must be made for this deployment)".into());
    }
    let duration = |name: &str, value: &Option<String>, default: Duration| match value {
        Some(text) => humantime::parse_duration(text).map_err(|e| format!("{name} '{text}': {e}")),
        None => Ok(default),
    };
    let limits = verify::Limits {
        max_life: duration(
            "max_token_life",
            &config.max_token_life,
            DEFAULT_MAX_TOKEN_LIFE,
        )?,
        max_run: duration("max_run", &config.max_run, DEFAULT_MAX_RUN)?,
        leeway: duration("clock_skew", &config.clock_skew, DEFAULT_CLOCK_SKEW)?,
    };
    if config.rules.is_empty() {
        return Err("at least one rule { claims = {…} name = \"…\" } is needed: a token that matches no rule is refused".into());
    }
    let rules = config
        .rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let rights = match &rule.access {
                Some(access) => access.parse::<Rights>()?,
                None => Rights::ReadWrite,
            };
            let scope = Scope::new(rights, &rule.paths)?;
            claim_rules::Rule::new(&config.issuer, &rule.claims, &rule.name, scope)
                .map_err(|e| format!("rule {} ('{}'): {e}", i + 1, rule.name))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let keys = match &config.jwks_file {
        Some(file) => jwks::Keys::File(jwks::KeyFile::open(&config.issuer, file)?),
        None => jwks::Keys::Issuer(jwks::Fetched::new(&config.issuer)?),
    };
    Ok(verify::Issuer::new(
        config.issuer.clone(),
        config.audience.clone(),
        limits,
        keys,
        rules,
    ))
}

#[cfg(test)]
mod tests;
