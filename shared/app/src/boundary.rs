//! Start-time checks of the security boundary (docs/SECURITY.md): what a configuration may not
//! do, refused before anything listens, each with one sentence saying why.
//!
//! - Every configured `ref` follows git's ref-name rules ([`gitstate_core::BranchName`]).
//! - Pass-through authentication uses only the caller's credential: a configured URL may not
//!   carry a user name or password, and only transports that carry the caller's basic-auth pair
//!   (`http://`, `https://`) are allowed.
//! - A server without authentication (auth mode "server") listens on loopback only, unless the
//!   operator says in words that it may not ([`Config::insecure_no_auth_on_public_address`]).

use std::net::SocketAddr;

use gitstate_core::BranchName;

use crate::config::{AuthMode, Config, RepositoryConfig};
use gitstate_url::redact_in_text;

/// Why a configuration was refused: one sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The branch of repository `name`, checked against git's ref-name rules.
pub fn check_ref(name: &str, repository: &RepositoryConfig) -> Result<BranchName, Refused> {
    BranchName::parse(&repository.git_ref).map_err(|e| {
        Refused(format!(
            "repository '{name}': ref {:?} is refused: {e}",
            repository.git_ref
        ))
    })
}

/// In pass-through mode, repository `name` must be reachable with the caller's basic-auth pair
/// and with nothing else: an `http://` or `https://` URL without a user name or password.
pub fn check_passthrough_url(name: &str, url: &str) -> Result<(), Refused> {
    let shown = redact_in_text(url);
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(Refused(format!(
            "repository '{name}' ({shown}) is a local path or an scp-like ssh address; pass-through authentication passes the caller's basic-auth pair to the git server, which only http:// and https:// can carry, so configure an https:// URL or use auth mode \"team\""
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(Refused(format!(
            "repository '{name}' ({shown}) uses {scheme}://, which cannot carry the caller's basic-auth pair, so the server's own key or no credential at all would be used; pass-through authentication needs an http:// or https:// URL"
        )));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if rest[..authority_end].contains('@') {
        return Err(Refused(format!(
            "repository '{name}' ({shown}) has a user name or password in its URL, which pass-through authentication would hand to every caller; remove it: each caller's own basic-auth pair is used"
        )));
    }
    Ok(())
}

/// Every configured repository: its ref, and in pass-through mode its URL.
pub fn check_config(config: &Config) -> Result<(), Refused> {
    for (name, repository) in &config.repositories {
        check_ref(name, repository)?;
        if config.auth.mode == AuthMode::Passthrough {
            check_passthrough_url(name, &repository.url)?;
        }
    }
    Ok(())
}

/// Whether `ip` is a loopback address (`127.0.0.0/8`, `::1`, or `::ffff:127.x.y.z`).
pub fn is_loopback(ip: std::net::IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// `gitstate serve` bound to `local`: without authentication (auth mode "server") only a
/// loopback address is accepted, unless `insecure_no_auth_on_public_address` is set.
pub fn check_listen(config: &Config, local: SocketAddr) -> Result<(), Refused> {
    if config.auth.mode != AuthMode::Server
        || is_loopback(local.ip())
        || config.insecure_no_auth_on_public_address
    {
        return Ok(());
    }
    Err(Refused(format!(
        "refusing to listen on {local} without authentication: anyone who reaches a non-loopback address could read, write and delete every state with the server's git credential; use --auth-mode team (with --token-hash or --user) or passthrough, listen on 127.0.0.1, or pass --insecure-no-auth-on-public-address (GITSTATE_INSECURE_NO_AUTH_ON_PUBLIC_ADDRESS=true, insecure_no_auth_on_public_address = true) if something in front of it authenticates callers"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthrough_urls() {
        assert!(check_passthrough_url("d", "https://git.example.com/a.git").is_ok());
        assert!(check_passthrough_url("d", "HTTP://127.0.0.1:8080/git/a.git").is_ok());
        for (url, why) in [
            ("https://u:secret@host/a.git", "user name or password"),
            ("https://token@host/a.git", "user name or password"),
            ("ssh://git@host/a.git", "ssh://, which cannot carry"),
            ("git://host/a.git", "git://, which cannot carry"),
            ("file:///srv/a.git", "file://, which cannot carry"),
            ("/srv/states.git", "local path"),
            ("git@github.com:acme/a.git", "scp-like"),
        ] {
            let e = check_passthrough_url("d", url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
            assert!(!e.contains("secret"), "{e}");
            assert!(e.starts_with("repository 'd' ("), "{e}");
        }
    }

    #[test]
    fn refs_in_configuration() {
        let repository = |git_ref: &str| RepositoryConfig {
            url: "https://h/a.git".into(),
            git_ref: git_ref.into(),
            state_guard: None,
            lock_ttl: None,
            workspace_path: None,
            committer_name: None,
            committer_email: None,
            signing_key: None,
        };
        assert!(check_ref("d", &repository("main")).is_ok());
        let e = check_ref("d", &repository("--upload-pack=x"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("repository 'd'") && e.contains("starts with '-'"),
            "{e}"
        );
        let mut config = Config::default();
        config
            .repositories
            .insert("d".into(), repository("main:refs/heads/x"));
        assert!(check_config(&config)
            .unwrap_err()
            .to_string()
            .contains("':'"));
    }

    #[test]
    fn public_listeners_need_auth() {
        let mut config = Config::default();
        let public: SocketAddr = "0.0.0.0:6061".parse().unwrap();
        for loopback in [
            "127.0.0.1:6061",
            "127.3.4.5:1",
            "[::1]:6061",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(
                check_listen(&config, loopback.parse().unwrap()).is_ok(),
                "{loopback}"
            );
        }
        let e = check_listen(&config, public).unwrap_err().to_string();
        assert!(e.contains("--insecure-no-auth-on-public-address"), "{e}");
        assert!(check_listen(&config, "[::]:1".parse().unwrap()).is_err());
        assert!(check_listen(&config, "10.0.0.5:1".parse().unwrap()).is_err());
        config.auth.mode = AuthMode::Team;
        assert!(check_listen(&config, public).is_ok());
        config.auth.mode = AuthMode::Passthrough;
        assert!(check_listen(&config, public).is_ok());
        config.auth.mode = AuthMode::Server;
        config.insecure_no_auth_on_public_address = true;
        assert!(check_listen(&config, public).is_ok());
    }
}
