//! The check of one OIDC token, through a standard JOSE library (`jsonwebtoken`): its issuer is
//! configured, its algorithm is RS256, ES256 or EdDSA (never `none`, never an HMAC: a public
//! key is no secret), its key is in the issuer's JWKS by `kid`, its signature holds, `iss` and
//! `aud` are exactly the configured ones, `exp` is present and not past, `nbf` and `iat` are not
//! in the future (a minute of leeway for clocks), its life is within the issuer's maximum, and a
//! rule maps its claims to a caller. Every refusal says what failed, never the token.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use gitstate_core::Scope;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::keys::Keys;
use super::rules::Rule;

/// The algorithms a token may be signed with.
const ACCEPTED: [Algorithm; 3] = [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

/// A verified token's caller.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The matching rule's name.
    pub name: String,
    /// The matching rule's scope.
    pub scope: Scope,
    /// It has expired, within the issuer's `max_run`: it may only finish the run whose lock it
    /// took (the backend checks that).
    pub expired: bool,
}

/// Why a token was refused: one sentence, without the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// One configured issuer.
#[derive(Debug)]
pub(crate) struct Issuer {
    issuer: String,
    audience: String,
    limits: Limits,
    keys: Keys,
    rules: Vec<Rule>,
}

/// An issuer's time limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The longest life a token may claim (`exp` − `iat`).
    pub(crate) max_life: Duration,
    /// How long after its `exp` a token may still finish the run whose lock it took.
    pub(crate) max_run: Duration,
    /// Clock skew allowed on `exp`, `nbf` and `iat`.
    pub(crate) leeway: Duration,
}

impl Issuer {
    pub(crate) fn new(
        issuer: String,
        audience: String,
        limits: Limits,
        keys: Keys,
        rules: Vec<Rule>,
    ) -> Issuer {
        Issuer {
            issuer,
            audience,
            limits,
            keys,
            rules,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.issuer
    }
}

/// Checks `token` against `issuers` with the keys at hand (no network call): `None` when it is
/// not shaped as a JWT (three base64url parts, the first a JSON object naming an `alg`), so the
/// caller may be a team token or a user.
pub(crate) fn verify(issuers: &[Issuer], token: &str) -> Option<Result<Verified, Refused>> {
    let alg = jwt_alg(token)?;
    Some(check(issuers, token, &alg).map_err(|(refused, _)| refused))
}

/// [`verify`], fetching the issuer's keys first when they are old, and again when the token's
/// key is not among them (each at most as often as `keys.rs` allows).
pub(crate) async fn verify_fetching(
    issuers: &[Issuer],
    token: &str,
) -> Option<Result<Verified, Refused>> {
    let alg = jwt_alg(token)?;
    if let Some(issuer) = issuer_of(issuers, token) {
        if issuer.keys.stale() {
            issuer.keys.refresh().await;
        }
    }
    Some(match check(issuers, token, &alg) {
        Err((_, Some(issuer))) if issuer.keys.refresh().await => {
            check(issuers, token, &alg).map_err(|(refused, _)| refused)
        }
        other => other.map_err(|(refused, _)| refused),
    })
}

/// The issuer `token` names in `iss`, read unverified, only to choose (the verification
/// requires it exactly).
fn issuer_of<'i>(issuers: &'i [Issuer], token: &str) -> Option<&'i Issuer> {
    let claims = jsonwebtoken::dangerous::insecure_decode::<Value>(token)
        .ok()?
        .claims;
    named(issuers, claims.get("iss").and_then(Value::as_str)?)
}

/// The configured issuer whose name is exactly `iss`.
fn named<'i>(issuers: &'i [Issuer], iss: &str) -> Option<&'i Issuer> {
    issuers.iter().find(|i| i.issuer == iss)
}

/// The `alg` a JWT-shaped `token` names.
fn jwt_alg(token: &str) -> Option<String> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()?;
    let header: Value = serde_json::from_slice(&bytes).ok()?;
    Some(header.get("alg")?.as_str()?.to_owned())
}

/// The check; a refusal comes with the issuer whose keys lacked the token's key (fetching them
/// again may help).
fn check<'i>(
    issuers: &'i [Issuer],
    token: &str,
    alg: &str,
) -> Result<Verified, (Refused, Option<&'i Issuer>)> {
    let refuse = |why: String| Err((Refused(format!("the OIDC token is refused: {why}")), None));
    let header = match jsonwebtoken::decode_header(token) {
        Ok(header) if ACCEPTED.contains(&header.alg) => header,
        _ => {
            return refuse(format!(
                "algorithm '{}' is not accepted (RS256, ES256 or EdDSA)",
                printable(alg)
            ))
        }
    };
    let Ok(unverified) = jsonwebtoken::dangerous::insecure_decode::<Value>(token) else {
        return refuse("its claims are not a JSON object".into());
    };
    let unverified = unverified.claims;
    let iss = unverified.get("iss").and_then(Value::as_str).unwrap_or("");
    let Some(issuer) = named(issuers, iss) else {
        return refuse(format!(
            "its issuer '{}' is not configured here",
            printable(iss)
        ));
    };
    let sub = unverified.get("sub").and_then(Value::as_str).unwrap_or("");
    let sentence = |why: String| {
        Refused(format!(
            "the OIDC token of issuer {} (sub '{}') is refused: {why}",
            issuer.issuer,
            printable(sub)
        ))
    };
    let refused = |why: String| Err((sentence(why), None));
    let Some(jwk) = issuer.keys.find(header.kid.as_deref()) else {
        let why = match &header.kid {
            Some(kid) => format!(
                "its key '{}' is not in the issuer's key set",
                printable(kid)
            ),
            None => "it names no key (kid) and the issuer has several".into(),
        };
        return Err((sentence(why), Some(issuer)));
    };
    let Ok(key) = DecodingKey::from_jwk(&jwk) else {
        return refused("its key in the issuer's key set is not usable".into());
    };
    let mut validation = Validation::new(header.alg);
    validation.set_issuer(&[&issuer.issuer]);
    validation.set_audience(&[&issuer.audience]);
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    validation.leeway = issuer.limits.leeway.as_secs();
    validation.validate_nbf = true;
    // `exp` is required, and checked below: past it, a token may still finish its own run.
    validation.validate_exp = false;
    let claims = match jsonwebtoken::decode::<Value>(token, &key, &validation) {
        Ok(data) => data.claims,
        Err(e) => return refused(reason(e.kind(), &issuer.audience)),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let Limits {
        max_life,
        max_run,
        leeway,
    } = issuer.limits;
    let Some(exp) = claims.get("exp").and_then(Value::as_u64) else {
        return refused("its 'exp' is not a number of seconds".into());
    };
    let iat = claims.get("iat").and_then(Value::as_u64);
    if iat.is_some_and(|iat| iat > now + leeway.as_secs()) {
        return refused("it was issued in the future (iat)".into());
    }
    let life = exp.saturating_sub(iat.unwrap_or(now));
    if life > max_life.as_secs() + leeway.as_secs() {
        return refused(format!(
            "it lives {} s, longer than this issuer's max_token_life of {} s",
            life,
            max_life.as_secs()
        ));
    }
    let expired = exp + leeway.as_secs() < now;
    if expired && exp + max_run.as_secs() < now {
        return refused("it has expired (exp)".into());
    }
    let Some(rule) = issuer.rules.iter().find(|rule| rule.matches(&claims)) else {
        return refused("no rule of this issuer matches its claims".into());
    };
    Ok(Verified {
        name: rule.name.clone(),
        scope: rule.scope.clone(),
        expired,
    })
}

/// What a failed verification means, in the words of the refusal.
fn reason(kind: &ErrorKind, audience: &str) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "it has expired (exp)".into(),
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => format!("it is not for this audience ('{audience}')"),
        ErrorKind::InvalidIssuer => "its issuer does not match".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("it has no '{claim}' claim"),
        ErrorKind::InvalidAlgorithm => "its algorithm does not match its key".into(),
        ErrorKind::InvalidSignature => "its signature does not hold".into(),
        _ => "it is malformed".into(),
    }
}

/// Caller-chosen text in a sentence: at most 200 characters, control characters replaced.
fn printable(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}
