//! Differential check of the one URL model against the transport's parser (issue 15): for every
//! string `RepoUrl::parse` accepts, gix reads the URL handed to the transport exactly as the
//! policy read it (scheme, host, port, path), and parsing that URL again changes nothing. A
//! disagreement here is how an allow-list check gets bypassed.

use gitstate_url::{Host, RepoUrl, Scheme};
use gix::bstr::ByteSlice;
use proptest::prelude::*;

/// Checks one accepted URL; `Err` describes the disagreement.
fn agree(raw: &str) -> Result<(), String> {
    let Ok(url) = RepoUrl::parse(raw) else {
        return Ok(());
    };
    let transport = url.transport_url();
    let again = RepoUrl::parse(&transport)
        .map_err(|e| format!("{raw:?}: the transport URL {transport:?} does not parse: {e}"))?;
    if again != url.without_userinfo() && url.scheme() != Scheme::Ssh {
        return Err(format!(
            "{raw:?}: parsing the transport URL {transport:?} gives {again:?}, not {url:?}"
        ));
    }
    let gix = gix::url::parse(transport.as_bytes().as_bstr())
        .map_err(|e| format!("{raw:?}: gix cannot read {transport:?}: {e}"))?;
    let scheme = match gix.scheme {
        gix::url::Scheme::Https => Scheme::Https,
        gix::url::Scheme::Http => Scheme::Http,
        gix::url::Scheme::Git => Scheme::Git,
        gix::url::Scheme::Ssh => Scheme::Ssh,
        gix::url::Scheme::File => Scheme::File,
        ref other => return Err(format!("{raw:?}: gix reads the scheme {other:?}")),
    };
    if scheme != url.scheme() {
        return Err(format!("{raw:?}: gix reads the scheme {scheme:?}"));
    }
    let host = gix.host().map(|h| h.to_owned());
    let expected_host = url.host().map(|h| match h {
        Host::V6(v6) => v6.to_string(),
        other => other.to_string(),
    });
    let host = host.map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned());
    if host != expected_host {
        return Err(format!(
            "{raw:?}: gix reads the host {host:?}, the policy {expected_host:?}"
        ));
    }
    if gix.port != url.port() {
        return Err(format!(
            "{raw:?}: gix reads the port {:?}, the policy {:?}",
            gix.port,
            url.port()
        ));
    }
    let path = gix.path.to_str_lossy();
    if let Some((_, written)) = raw.split_once(':').filter(|_| !raw.contains("://")) {
        // scp-like: `host:/abs` is absolute, `host:rel` relative to the login's home.
        if written.starts_with('/') != path.starts_with('/') {
            return Err(format!(
                "{raw:?}: gix reads the path {path:?}, which is not as absolute as written"
            ));
        }
    }
    let path = path.trim_start_matches('/').trim_end_matches('/');
    if path != url.segments().join("/") {
        return Err(format!(
            "{raw:?}: gix reads the path {path:?}, the policy {:?}",
            url.segments()
        ));
    }
    Ok(())
}

#[test]
fn known_tricky_urls_agree() {
    for raw in [
        "https://github.com/acme/states.git",
        "http://%31%32%37.0.0.1:8080/git/team-a.git",
        "http://[::ffff:127.0.0.1]:80/x",
        "git://h:9418/a/b.git",
        "ssh://git@h:2222/srv/x.git",
        "git@github.com:acme/x.git",
        "git@github.com:/srv/x.git",
        "https://bücher.example/x",
        "https://h/acme/st%61tes.git",
        "https://u:p%40ss@h/x.git",
        "file:///srv/git/x.git",
        "http://127.0.0.1./x",
        "http://0x7f.1/x",
    ] {
        agree(raw).unwrap();
    }
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_owned()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("%2e".to_owned()),
        Just("%2f".to_owned()),
        Just("%41".to_owned()),
        Just("%".to_owned()),
        Just("\\".to_owned()),
        Just("@".to_owned()),
        Just(":".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("~".to_owned()),
        Just("0x7f".to_owned()),
        Just("127".to_owned()),
        Just("::1".to_owned()),
        Just("xn--".to_owned()),
        Just("ü".to_owned()),
        "[a-z0-9]{1,6}",
        "[0-9]{1,5}",
    ]
}

fn url_like() -> impl Strategy<Value = String> {
    let scheme = prop_oneof![
        Just("https://"),
        Just("http://"),
        Just("git://"),
        Just("ssh://"),
        Just("file://"),
        Just(""),
    ];
    (scheme, proptest::collection::vec(piece(), 1..14))
        .prop_map(|(scheme, pieces)| format!("{scheme}{}", pieces.concat()))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("GITSTATE_FUZZ_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(4000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_accepted_url_reads_the_same_in_gix(raw in url_like()) {
        if let Err(e) = agree(&raw) {
            prop_assert!(false, "{}", e);
        }
    }
}
