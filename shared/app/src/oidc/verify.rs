//! The check of one OIDC token, through a standard JOSE library (`jsonwebtoken`): its issuer is
//! configured, its algorithm is RS256, ES256 or EdDSA (never `none`, never an HMAC: a public
//! key is no secret), its key is in the issuer's JWKS by `kid`, its signature holds, `iss` and
//! `aud` are exactly the configured ones, `exp` is present and not past, `nbf` and `iat` are not
//! in the future (a minute of leeway for clocks), its life is within the issuer's maximum, and a
//! rule maps its claims to a caller. Every refusal says what failed in the token, never the
//! token, nor anything of the configuration (the audience, which issuers and keys are
//! configured, a rule's claims, an issuer's limits): a token whose signature is not established
//! (an unknown issuer or key, a forged signature) gets one sentence whatever the reason. The
//! whole reason goes to the log (INFO, inside the request's span), never a part of the token.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use gitstate_core::Scope;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::claim_rules::Rule;
use super::jwks::Keys;

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
    Some(check(issuers, token, &alg).map_err(|(failure, _)| failure.refuse()))
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
    Some(
        match check(issuers, token, &alg) {
            Err((_, Some(issuer))) if issuer.keys.refresh().await => check(issuers, token, &alg),
            other => other,
        }
        .map_err(|(failure, _)| failure.refuse()),
    )
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

/// The one sentence of every token whose signature is not established: an unknown issuer, an
/// unknown key, a key of another kind, a signature that does not hold. Telling them apart
/// would tell a stranger which issuers and keys are configured.
const UNVERIFIED: &str = "its signature cannot be verified (its issuer and its key must be known here, and the signature must hold)";

/// Why a token was refused: what its caller is told (what failed in the token, nothing of the
/// configuration), and what the log says (the issuer, `sub`, the check, the configured value).
struct Failure {
    told: String,
    logged: String,
    /// The issuer the token names (configured or not) and its `sub`, for the log.
    iss: String,
    sub: String,
}

impl Failure {
    /// Logs the refusal (inside the request's span) and gives the caller's sentence.
    fn refuse(self) -> Refused {
        tracing::info!(
            issuer = %self.iss,
            sub = %self.sub,
            reason = %self.logged,
            "an OIDC token is refused"
        );
        Refused(format!("the OIDC token is refused: {}", self.told))
    }
}

/// The check; a refusal comes with the issuer whose keys lacked the token's key (fetching them
/// again may help).
fn check<'i>(
    issuers: &'i [Issuer],
    token: &str,
    alg: &str,
) -> Result<Verified, (Failure, Option<&'i Issuer>)> {
    let unverified = jsonwebtoken::dangerous::insecure_decode::<Value>(token)
        .ok()
        .map(|data| data.claims);
    let text = |name: &str| {
        let claim = unverified.as_ref().and_then(|c| c.get(name));
        printable(claim.and_then(Value::as_str).unwrap_or(""))
    };
    let (iss, sub) = (text("iss"), text("sub"));
    let failure = |told: &str, logged: String| Failure {
        told: told.to_owned(),
        logged,
        iss: iss.clone(),
        sub: sub.clone(),
    };
    let header = match jsonwebtoken::decode_header(token) {
        Ok(header) if ACCEPTED.contains(&header.alg) => header,
        _ => {
            let told = format!(
                "its algorithm '{}' is not accepted (RS256, ES256 or EdDSA)",
                printable(alg)
            );
            return Err((failure(&told, told.clone()), None));
        }
    };
    let Some(unverified) = unverified.as_ref() else {
        let told = "its claims are not a JSON object";
        return Err((failure(told, told.into()), None));
    };
    let Some(issuer) = named(
        issuers,
        unverified.get("iss").and_then(Value::as_str).unwrap_or(""),
    ) else {
        return Err((
            failure(UNVERIFIED, "its issuer is not configured".into()),
            None,
        ));
    };
    let Some(jwk) = issuer.keys.find(header.kid.as_deref()) else {
        let logged = match &header.kid {
            Some(kid) => format!(
                "its key '{}' is not in the issuer's key set",
                printable(kid)
            ),
            None => {
                "it names no key (kid) and the issuer's key set does not hold exactly one".into()
            }
        };
        return Err((failure(UNVERIFIED, logged), Some(issuer)));
    };
    let refused = |told: &str, logged: String| Err((failure(told, logged), None));
    let Ok(key) = DecodingKey::from_jwk(&jwk) else {
        return refused(
            UNVERIFIED,
            "its key in the issuer's key set is not usable".into(),
        );
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
        Err(e) => {
            let (told, logged) = reason(e.kind(), &issuer.audience, unverified);
            return refused(told, logged);
        }
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
        let told = "its 'exp' is not a number of seconds";
        return refused(told, told.into());
    };
    let iat = claims.get("iat").and_then(Value::as_u64);
    if iat.is_some_and(|iat| iat > now + leeway.as_secs()) {
        let told = "it was issued in the future (iat)";
        return refused(told, told.into());
    }
    let life = exp.saturating_sub(iat.unwrap_or(now));
    if life > max_life.as_secs() + leeway.as_secs() {
        return refused(
            "its life (exp - iat) is longer than this deployment admits",
            format!(
                "it lives {life} s, longer than this issuer's max_token_life of {} s",
                max_life.as_secs()
            ),
        );
    }
    let expired = exp + leeway.as_secs() < now;
    if expired && exp + max_run.as_secs() < now {
        let told = "it has expired (exp)";
        return refused(
            told,
            format!("it expired {} s ago, beyond max_run", now - exp),
        );
    }
    let Some(rule) = issuer.rules.iter().find(|rule| rule.matches(&claims)) else {
        let told = "no rule of its issuer admits its claims";
        return refused(told, told.into());
    };
    Ok(Verified {
        name: rule.name.clone(),
        scope: rule.scope.clone(),
        expired,
    })
}

/// What a failed verification means: what the caller is told, and what the log says. Every
/// failure before the signature held is [`UNVERIFIED`] to the caller.
fn reason(kind: &ErrorKind, audience: &str, unverified: &Value) -> (&'static str, String) {
    let told = match kind {
        ErrorKind::ExpiredSignature => "it has expired (exp)",
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)",
        ErrorKind::InvalidAudience => "it is not made for this deployment (aud)",
        ErrorKind::InvalidIssuer => "its issuer does not match (iss)",
        ErrorKind::MissingRequiredClaim(claim) => match claim.as_str() {
            "aud" => "it has no 'aud' claim",
            "iss" => "it has no 'iss' claim",
            _ => "it has no 'exp' claim",
        },
        _ => UNVERIFIED,
    };
    let logged = match kind {
        ErrorKind::InvalidAudience => format!(
            "its aud {} is not the configured audience '{audience}'",
            printable(
                &unverified
                    .get("aud")
                    .map(Value::to_string)
                    .unwrap_or_default()
            )
        ),
        other => format!("{told} ({other:?})"),
    };
    (told, logged)
}

/// Caller-chosen text in a sentence: at most 200 characters, control characters replaced.
fn printable(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}
