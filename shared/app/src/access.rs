//! Who may use this deployment (DESIGN §6, docs/SECURITY.md). Only team mode decides here: a
//! caller must present a team token or a configured user's password. Server mode admits every
//! caller that reached it (its network boundary decides: loopback, IAM); pass-through leaves the
//! decision to the git server, per repository, and so refuses what spans repositories.

use gitstate_core::{Credentials, RegistryError, Scope};

use crate::config::{AuthConfig, AuthMode, ConfigError};
use crate::tokens::{self, Users};

/// The deployment's caller check.
#[derive(Debug)]
pub struct Access {
    mode: AuthMode,
    /// Team mode: decoded token hashes, each with the scope it grants.
    tokens: Vec<([u8; 32], Scope)>,
    /// Team mode: named users with password hashes.
    users: Users,
}

impl Access {
    /// The check `auth` configures. Team mode without a token or user is a configuration error.
    pub fn from_config(auth: &AuthConfig) -> Result<Access, ConfigError> {
        if auth.mode != AuthMode::Team {
            return Ok(Access {
                mode: auth.mode,
                tokens: Vec::new(),
                users: Users::default(),
            });
        }
        let tokens = tokens::parse_tokens(&auth.token_hashes, &auth.tokens)
            .map_err(ConfigError::BadValue)?;
        let users = Users::parse(&auth.users).map_err(ConfigError::BadValue)?;
        if tokens.is_empty() && users.is_empty() {
            return Err(ConfigError::BadValue(
                "auth mode \"team\" needs at least one token hash (auth.token_hashes, --token-hash or GITSTATE_TOKEN_HASHES) or user (auth.users, --user or GITSTATE_USERS)".into(),
            ));
        }
        Ok(Access {
            mode: auth.mode,
            tokens,
            users,
        })
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
            Some(caller) => Ok((
                caller,
                self.tokens
                    .iter()
                    .find(|(hash, _)| tokens::matches(hash, &caller.password))
                    .map(|(_, scope)| scope.clone()),
            )),
        })
    }

    /// Checks `caller` before a request opens anything, with bcrypt on a blocking thread (see
    /// [`Users::verify`]); a later [`Access::admit`] of the same caller answers from memory.
    /// Returns the scope of the caller's token (users, and every caller outside team mode, have
    /// the full one).
    pub async fn authenticate(&self, caller: Option<&Credentials>) -> Result<Scope, RegistryError> {
        let Some(checked) = self.team_caller(caller) else {
            return Ok(Scope::full());
        };
        match checked? {
            (_, Some(scope)) => Ok(scope),
            (caller, None) if self.users.verify(&caller.username, &caller.password).await => {
                Ok(Scope::full())
            }
            _ => Err(refusal("the credentials are not valid")),
        }
    }

    /// The same check, synchronous: what [`Access::authenticate`] admitted is remembered, so
    /// this answers from memory; an unremembered user's bcrypt runs on this thread.
    pub fn admit(&self, caller: Option<&Credentials>) -> Result<(), RegistryError> {
        let Some(checked) = self.team_caller(caller) else {
            return Ok(());
        };
        let (caller, token) = checked?;
        if token.is_some() || self.users.admits(&caller.username, &caller.password) {
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

    #[test]
    fn team_mode_without_a_token_or_user_does_not_start() {
        let empty = Access::from_config(&AuthConfig {
            mode: AuthMode::Team,
            token_hashes: Vec::new(),
            users: Vec::new(),
            tokens: Vec::new(),
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
        })
        .expect("pass-through");
        assert!(matches!(
            access.admit_operator(Some(&caller("x"))),
            Err(RegistryError::NotAllowed(_))
        ));
        assert!(access.admit(None).is_ok(), "the git server decides");
    }
}
