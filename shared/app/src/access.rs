//! Who may use this deployment (DESIGN §6, docs/SECURITY.md). Only team mode decides here: a
//! caller must present a team token or a configured user's password. Server mode admits every
//! caller that reached it (its network boundary decides: loopback, IAM); pass-through leaves the
//! decision to the git server, per repository, and so refuses what spans repositories.

use gitstate_core::{Authenticated, RegistryError, Rights, Scope};
use gitstate_url::Credentials;

use crate::config::{AuthConfig, AuthMode, CertificateConfig, ConfigError};
use crate::oidc::Issuers;
use crate::tokens::{self, SubjectPattern};
use crate::users::Users;

/// How long [`Access::admit`] takes an OIDC token [`Access::authenticate`] admitted without
/// checking it again (the two run in the same request).
const OIDC_ADMITTED_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// The deployment's caller check.
#[derive(Debug)]
pub struct Access {
    mode: AuthMode,
    /// Team mode: decoded token hashes, each with the scope it grants.
    tokens: Vec<([u8; 32], Scope)>,
    /// Team mode: named users with password hashes.
    users: Users,
    /// Team mode: client certificate subjects that are callers, each with the credentials the
    /// request is given (its name, and a random token of this process whose hash is among
    /// `tokens` with the mapping's scope).
    certificates: Vec<(SubjectPattern, Credentials)>,
    /// Team mode: OIDC issuers whose tokens are callers (`auth.oidc`).
    oidc: Issuers,
    /// The deployment's run key: it marks the OIDC tokens admitted ([`crate::run_key`]).
    run_key: crate::run_key::RunKey,
    /// Digests of OIDC tokens [`Access::authenticate`] admitted a moment ago: the
    /// [`Access::admit`] of the same request answers from here instead of checking the
    /// signature again.
    oidc_admitted: tokens::Recent,
}

impl Access {
    /// The check `auth` configures. Team mode without a token or user is a configuration error.
    pub fn from_config(auth: &AuthConfig) -> Result<Access, ConfigError> {
        if auth.mode != AuthMode::Team {
            if !auth.certificates.is_empty() {
                return Err(ConfigError::BadValue(
                    "auth.certificate maps client certificates to team callers; it needs auth mode \"team\"".into(),
                ));
            }
            if !auth.oidc.is_empty() {
                return Err(ConfigError::BadValue(
                    "auth.oidc maps OIDC tokens to team callers; it needs auth mode \"team\""
                        .into(),
                ));
            }
            // The workspace API seals its locks by the caller's credential in every mode
            // (DESIGN §10): the configured key, so that every process checks them alike.
            let run_key =
                crate::run_key::load(auth.run_key.as_ref(), auth.run_key_file.as_deref(), false)
                    .map_err(ConfigError::BadValue)?;
            return Ok(Access {
                mode: auth.mode,
                tokens: Vec::new(),
                users: Users::default(),
                certificates: Vec::new(),
                oidc: Issuers::default(),
                run_key,
                oidc_admitted: tokens::Recent::new(OIDC_ADMITTED_FOR),
            });
        }
        let oidc = Issuers::from_config(&auth.oidc).map_err(ConfigError::BadValue)?;
        let mut tokens = tokens::parse_tokens(&auth.token_hashes, &auth.tokens)
            .map_err(ConfigError::BadValue)?;
        let users = Users::parse(&auth.users).map_err(ConfigError::BadValue)?;
        let certificates = auth
            .certificates
            .iter()
            .map(|mapping| {
                let (pattern, credentials, scope) = certificate_caller(mapping)?;
                tokens.push((tokens::digest(&credentials.password), scope));
                Ok((pattern, credentials))
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(ConfigError::BadValue)?;
        if tokens.is_empty() && users.is_empty() && oidc.is_empty() {
            return Err(ConfigError::BadValue(
                "auth mode \"team\" needs at least one token hash (auth.token_hashes, --token-hash or GITSTATE_TOKEN_HASHES), user (auth.users, --user or GITSTATE_USERS) or OIDC issuer (auth.oidc)".into(),
            ));
        }
        let run_key = crate::run_key::load(
            auth.run_key.as_ref(),
            auth.run_key_file.as_deref(),
            !oidc.is_empty(),
        )
        .map_err(ConfigError::BadValue)?;
        Ok(Access {
            mode: auth.mode,
            tokens,
            users,
            certificates,
            oidc,
            run_key,
            oidc_admitted: tokens::Recent::new(OIDC_ADMITTED_FOR),
        })
    }

    /// The credentials of the caller a verified client certificate with these subject
    /// attributes is (`auth.certificate`), when one maps it.
    pub fn certificate_caller(&self, subject: &[(String, String)]) -> Option<Credentials> {
        self.certificates
            .iter()
            .find(|(pattern, _)| pattern.matches(subject))
            .map(|(_, credentials)| credentials.clone())
    }

    /// Whether callers' credentials go to the git server instead of being checked here.
    pub fn is_passthrough(&self) -> bool {
        self.mode == AuthMode::Passthrough
    }

    /// Team mode: the caller, and the scope of the token it presents as its password (`None`:
    /// not a token, perhaps a user). `None` outside team mode (nothing to check).
    fn team_caller<'a>(
        &self,
        caller: Option<&'a Credentials>,
    ) -> Option<Result<(&'a Credentials, Option<Scope>), RegistryError>> {
        if self.mode != AuthMode::Team {
            return None;
        }
        Some(match caller {
            None => Err(refusal("this deployment requires credentials")),
            Some(caller) => Ok((caller, {
                let digest = tokens::digest(&caller.password);
                self.tokens
                    .iter()
                    .find(|(hash, _)| tokens::same_digest(hash, &digest))
                    .map(|(_, scope)| scope.clone())
            })),
        })
    }

    /// Checks `caller` before a request opens anything, with bcrypt on a blocking thread (see
    /// [`Users::verify`]); a later [`Access::admit`] of the same caller answers from memory.
    /// Returns the scope of the caller's token (users, and every caller outside team mode, have
    /// the full one), and for an OIDC token the caller its rule names.
    pub async fn authenticate(
        &self,
        caller: Option<&Credentials>,
    ) -> Result<Authenticated, RegistryError> {
        let Some(checked) = self.team_caller(caller) else {
            return Ok(Authenticated::default());
        };
        match checked? {
            (_, Some(scope)) => Ok(Authenticated::scoped(scope)),
            (caller, None) => {
                if let Some(verified) = self.oidc.verify_fetching(&caller.password).await {
                    let verified =
                        verified.map_err(|e| RegistryError::Unauthenticated(e.to_string()))?;
                    self.oidc_admitted.insert(tokens::digest(&caller.password));
                    return Ok(Authenticated {
                        scope: verified.scope,
                        name: Some(verified.name),
                        token: Some(gitstate_core::LockToken {
                            mark: self.run_key.mark(&caller.password),
                            expired: verified.expired,
                        }),
                        holder: None,
                    });
                }
                match self.users.verify(&caller.username, &caller.password).await {
                    Ok(true) => Ok(Authenticated::default()),
                    Ok(false) => Err(refusal("the credentials are not valid")),
                    Err(saturated) => Err(RegistryError::Busy(saturated.to_string())),
                }
            }
        }
    }

    /// The mark of the credential `caller` presented under the run key (its password or token,
    /// whatever its kind): the workspace API's lock holder ([`Authenticated::holder`]).
    pub fn holder(&self, caller: &Credentials) -> gitstate_core::Mark {
        self.run_key.mark(&caller.password)
    }

    /// The same check, synchronous: what [`Access::authenticate`] admitted is remembered, so
    /// this answers from memory (it never hashes a password: a request is authenticated first).
    pub fn admit(&self, caller: Option<&Credentials>) -> Result<(), RegistryError> {
        let Some(checked) = self.team_caller(caller) else {
            return Ok(());
        };
        let (caller, token) = checked?;
        let oidc = || {
            self.oidc_admitted
                .contains(&tokens::digest(&caller.password))
                || matches!(self.oidc.verify(&caller.password), Some(Ok(_)))
        };
        if token.is_some() || oidc() || self.users.admits(&caller.username, &caller.password) {
            Ok(())
        } else {
            Err(refusal("the credentials are not valid"))
        }
    }

    /// Whether `caller` may read what spans every repository (the catalog, the repository list).
    pub fn admit_operator(&self, caller: Option<&Credentials>) -> Result<(), RegistryError> {
        if self.is_passthrough() {
            return Err(RegistryError::NotAllowed(
                "this deployment passes each caller's credentials to the git server, which decides per repository; what spans repositories (the catalog, the repository list) is not served here: query the catalog with `gitstate catalog` and AWS credentials".into(),
            ));
        }
        self.admit(caller)
    }
}

/// One `auth.certificate` mapping: its subject, the credentials its requests carry (the name,
/// and a fresh random token that never leaves the process), and its scope.
fn certificate_caller(
    mapping: &CertificateConfig,
) -> Result<(SubjectPattern, Credentials, Scope), String> {
    let pattern = SubjectPattern::parse(&mapping.subject)?;
    if mapping.name.is_empty()
        || mapping.name.contains(':')
        || mapping.name.chars().any(char::is_control)
    {
        return Err(format!(
            "certificate subject '{}': its name must be non-empty, without ':' or control characters",
            mapping.subject
        ));
    }
    let rights = match &mapping.access {
        Some(access) => access.parse()?,
        None => Rights::ReadWrite,
    };
    let scope = Scope::new(rights, &mapping.paths)?;
    let token: String = rand::random::<[u8; 32]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let credentials = Credentials {
        username: mapping.name.clone(),
        password: token,
    };
    Ok((pattern, credentials, scope))
}

/// A team-mode refusal (401) saying what to send.
fn refusal(why: &str) -> RegistryError {
    RegistryError::Unauthenticated(format!(
        "{why}: send a team token as the backend's password, or a configured user's name and password"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team() -> Access {
        Access::from_config(&AuthConfig {
            mode: AuthMode::Team,
            token_hashes: vec![tokens::hash_of("team-token")],
            users: Vec::new(),
            tokens: Vec::new(),
            certificates: Vec::new(),
            oidc: Vec::new(),
            ..AuthConfig::default()
        })
        .expect("a team configuration")
    }

    fn caller(password: &str) -> Credentials {
        Credentials {
            username: "anyone".into(),
            password: password.into(),
        }
    }

    #[tokio::test]
    async fn team_mode_admits_only_its_tokens_and_says_what_to_send() {
        let access = team();
        access
            .authenticate(Some(&caller("team-token")))
            .await
            .expect("the token is admitted");
        access
            .admit(Some(&caller("team-token")))
            .expect("and again from memory");
        for refused in [
            access.authenticate(None).await.map(drop),
            access.authenticate(Some(&caller("other"))).await.map(drop),
            access.admit(Some(&caller("other"))),
        ] {
            let Err(RegistryError::Unauthenticated(sentence)) = refused else {
                panic!("expected a 401 refusal, got {refused:?}");
            };
            assert!(sentence.contains("team token"), "{sentence}");
            assert!(!sentence.contains("git server"), "{sentence}");
        }
    }

    /// Junk costs no password hash (issue 55): any Basic pair and any Bearer string that is
    /// not a configured token is refused without one when no user has a bcrypt hash, and a
    /// Bearer string never costs one; with a bcrypt user, a named pair costs exactly one.
    #[tokio::test]
    async fn junk_costs_no_password_hash() {
        let bcrypt_user = format!("alice:{}", bcrypt::hash("pw", 4).unwrap());
        for (users, named_cost) in [(Vec::new(), 0), (vec![bcrypt_user], 1)] {
            let access = Access::from_config(&AuthConfig {
                mode: AuthMode::Team,
                token_hashes: vec![tokens::hash_of("team-token")],
                users,
                ..Default::default()
            })
            .expect("a team configuration");
            for i in 0..20 {
                let bearer = Credentials {
                    username: crate::users::BEARER.into(),
                    password: format!("junk-{i}"),
                };
                let basic = Credentials {
                    username: format!("name-{i}"),
                    password: format!("junk-{i}"),
                };
                for junk in [bearer, basic] {
                    assert!(matches!(
                        access.authenticate(Some(&junk)).await,
                        Err(RegistryError::Unauthenticated(_))
                    ));
                }
            }
            assert_eq!(access.users.hashes_run(), 20 * named_cost);
        }
    }

    /// A mapped client certificate is a caller with its name and scope; its token is random,
    /// per process, and works only as that caller.
    #[tokio::test]
    async fn a_mapped_certificate_is_a_caller_with_its_scope() {
        let access = Access::from_config(&AuthConfig {
            mode: AuthMode::Team,
            token_hashes: Vec::new(),
            users: Vec::new(),
            tokens: Vec::new(),
            oidc: Vec::new(),
            certificates: vec![crate::config::CertificateConfig {
                subject: "CN=team-a".into(),
                name: "team-a".into(),
                access: Some("read-only".into()),
                paths: vec!["team-a/**".into()],
            }],
            ..AuthConfig::default()
        })
        .expect("a certificate is enough for team mode");
        let subject = |cn: &str| {
            vec![
                ("CN".to_owned(), cn.to_owned()),
                ("O".to_owned(), "acme".to_owned()),
            ]
        };
        assert!(access.certificate_caller(&subject("team-b")).is_none());
        let caller = access
            .certificate_caller(&subject("team-a"))
            .expect("mapped");
        assert_eq!(caller.username, "team-a");
        assert_eq!(caller.password.len(), 64);
        let scope = access.authenticate(Some(&caller)).await.expect("admitted");
        assert_eq!(scope.scope.to_string(), "read-only on team-a/**");
        let again = Access::from_config(&AuthConfig {
            mode: AuthMode::Team,
            token_hashes: vec![tokens::hash_of("t")],
            users: Vec::new(),
            tokens: Vec::new(),
            certificates: Vec::new(),
            oidc: Vec::new(),
            ..AuthConfig::default()
        })
        .unwrap();
        assert!(
            again.authenticate(Some(&caller)).await.is_err(),
            "another process's token"
        );
    }

    /// An OIDC token's signature is checked once per request: `admit` after `authenticate`
    /// answers from memory (shown by a key set that no longer holds the token's key).
    #[tokio::test]
    async fn admit_takes_an_oidc_token_authenticate_just_admitted() {
        use gitstate_tests::oidc::{now, Issuer, ISSUER};
        let issuer = Issuer::new();
        let access = Access::from_config(&AuthConfig {
            mode: AuthMode::Team,
            oidc: vec![crate::oidc::OidcConfig {
                issuer: ISSUER.into(),
                audience: "gitstate".into(),
                jwks_file: Some(issuer.jwks_file()),
                rules: vec![crate::oidc::RuleConfig {
                    claims: [("repository".to_owned(), "acme/infra".to_owned())].into(),
                    name: "ci".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        })
        .expect("an OIDC issuer is enough for team mode");
        let claims = serde_json::json!({
            "iss": ISSUER, "aud": "gitstate", "sub": "x", "iat": now(), "exp": now() + 600,
            "repository": "acme/infra",
        });
        let (token, other) = (issuer.sign("k1", &claims), {
            let mut c = claims.clone();
            c["sub"] = serde_json::json!("y");
            issuer.sign("k1", &c)
        });
        let admitted = access
            .authenticate(Some(&caller(&token)))
            .await
            .expect("admitted");
        assert_eq!(admitted.name.as_deref(), Some("ci"));
        std::fs::write(
            issuer.jwks_file(),
            br#"{"keys":[{"kty":"oct","k":"AA","kid":"z"}]}"#,
        )
        .unwrap();
        std::thread::sleep(crate::oidc::FILE_RECHECK);
        access
            .admit(Some(&caller(&token)))
            .expect("from memory, not checked again");
        assert!(
            access.admit(Some(&caller(&other))).is_err(),
            "a token authenticate did not admit is checked"
        );
    }

    #[test]
    fn team_mode_without_a_token_or_user_does_not_start() {
        let empty = Access::from_config(&AuthConfig {
            mode: AuthMode::Team,
            token_hashes: Vec::new(),
            users: Vec::new(),
            tokens: Vec::new(),
            certificates: Vec::new(),
            oidc: Vec::new(),
            ..AuthConfig::default()
        });
        assert!(matches!(empty, Err(ConfigError::BadValue(m)) if m.contains("token hash")));
    }

    #[test]
    fn passthrough_serves_nothing_that_spans_repositories() {
        let access = Access::from_config(&AuthConfig {
            mode: AuthMode::Passthrough,
            token_hashes: Vec::new(),
            users: Vec::new(),
            tokens: Vec::new(),
            certificates: Vec::new(),
            oidc: Vec::new(),
            ..AuthConfig::default()
        })
        .expect("pass-through");
        assert!(matches!(
            access.admit_operator(Some(&caller("x"))),
            Err(RegistryError::NotAllowed(_))
        ));
        assert!(access.admit(None).is_ok(), "the git server decides");
    }
}
