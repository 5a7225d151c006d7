//! Claim rules: which caller a verified token is. A rule lists string claims and a pattern for
//! each; all must match, and the first rule that matches wins. A pattern is exact, or has
//! wildcards: `*` matches any run of characters except `:`, `**` any run including `:`. Workload
//! identities separate their parts with `:` (GitHub's `sub` is
//! `repo:OWNER/REPO:ref:refs/heads/main`, `…:environment:prod` or `…:pull_request`; Kubernetes'
//! `system:serviceaccount:NAMESPACE:NAME`), so `repo:acme/infra:ref:refs/heads/*` is every branch
//! of that repository and nothing else, and `system:serviceaccount:team-a:*` every account of
//! the namespace; `/` is an ordinary character. A dotted claim name reaches into objects when
//! the token has no claim of that exact name (`kubernetes.io.namespace` is
//! `{"kubernetes.io": {"namespace": …}}`).
//!
//! Checked at start: a rule names a claim and a caller; a rule whose every pattern is only `*`
//! (it would admit every token of its issuer) is refused; under an issuer that signs tokens for
//! anyone ([`SHARED_ISSUERS`]: GitHub Actions, GitLab.com) a rule must pin the owner by an id
//! that is never given again, exactly (names can be registered again once freed).

use std::collections::BTreeMap;

use gitstate_core::Scope;
use serde_json::Value;

/// An issuer that signs tokens for strangers (any public repository's workflow, any project's
/// job), for whatever audience they ask: names in its tokens (`repository`, `project_path`)
/// can be taken by someone else once renamed or deleted, its ids cannot.
pub(crate) struct SharedIssuer {
    /// The issuer, exactly as configured and as its tokens name it in `iss`.
    pub(crate) issuer: &'static str,
    /// Who runs it, for the sentence.
    pub(crate) service: &'static str,
    /// The claims that pin an owner by id: a rule must match one of them exactly.
    pub(crate) owner_ids: &'static [&'static str],
}

/// The shared issuers: the one table.
pub(crate) const SHARED_ISSUERS: [SharedIssuer; 2] = [
    SharedIssuer {
        issuer: "https://token.actions.githubusercontent.com",
        service: "GitHub Actions",
        owner_ids: &["repository_owner_id", "repository_id"],
    },
    SharedIssuer {
        issuer: "https://gitlab.com",
        service: "GitLab.com",
        owner_ids: &["namespace_id", "project_id"],
    },
];

/// One rule: the claims it needs, the caller's name and its scope.
#[derive(Debug)]
pub(crate) struct Rule {
    claims: Vec<(String, Pattern)>,
    pub(crate) name: String,
    pub(crate) scope: Scope,
}

impl Rule {
    /// The rule of an `issuer`'s block; a sentence when it names no claim or no valid caller,
    /// matches every token, or leaves a shared issuer's owner unpinned.
    pub(crate) fn new(
        issuer: &str,
        claims: &BTreeMap<String, String>,
        name: &str,
        scope: Scope,
    ) -> Result<Rule, String> {
        if claims.is_empty() {
            return Err("it names no claim: say which tokens it admits, e.g. claims = { sub = \"system:serviceaccount:team-a:terraform\" }".into());
        }
        if name.is_empty() || name.contains(':') || name.chars().any(char::is_control) {
            return Err(format!(
                "its name '{name}' must be non-empty, without ':' or control characters"
            ));
        }
        let claims: Vec<(String, Pattern)> = claims
            .iter()
            .map(|(claim, pattern)| (claim.clone(), Pattern::parse(pattern)))
            .collect();
        if claims.iter().all(|(_, pattern)| pattern.is_wildcard()) {
            return Err("it matches every token of the issuer (each of its claim patterns is only '*'): name what a token must carry, e.g. sub = \"repo:acme/infra:ref:refs/heads/main\"".into());
        }
        if let Some(shared) = SHARED_ISSUERS.iter().find(|s| s.issuer == issuer) {
            let pinned = claims.iter().any(|(claim, pattern)| {
                shared.owner_ids.contains(&claim.as_str()) && pattern.is_exact()
            });
            if !pinned {
                let ids = shared.owner_ids.join(" or ");
                return Err(format!(
                    "{service} signs tokens of this issuer for anyone who asks, and a name in them can be registered again by someone else once it is renamed or deleted: add {ids} to its claims, exactly (the number {service} gives the owner, e.g. {first} = \"123456\"; the names may stay beside it)",
                    service = shared.service,
                    first = shared.owner_ids[0],
                ));
            }
        }
        Ok(Rule {
            claims,
            name: name.to_owned(),
            scope,
        })
    }

    /// Whether every claim of the rule is a string claim of `token` matching its pattern.
    pub(crate) fn matches(&self, token: &Value) -> bool {
        self.claims.iter().all(|(name, pattern)| {
            claim(token, name)
                .and_then(Value::as_str)
                .is_some_and(|value| pattern.matches(value))
        })
    }
}

/// The claim `name` of `claims`: the member of that exact name, else a dotted path into
/// objects (the longest member name first).
pub(crate) fn claim<'v>(claims: &'v Value, name: &str) -> Option<&'v Value> {
    let object = claims.as_object()?;
    if let Some(value) = object.get(name) {
        return Some(value);
    }
    let dots: Vec<usize> = name.match_indices('.').map(|(i, _)| i).collect();
    dots.iter().rev().find_map(|&at| {
        let inner = object.get(&name[..at])?;
        claim(inner, &name[at + 1..])
    })
}

/// A claim pattern: literal text and wildcards, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern(Vec<Piece>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// `*`: any run of characters without `:`.
    Segment,
    /// `**` (or more stars): any run of characters.
    Anything,
}

impl Pattern {
    fn parse(text: &str) -> Pattern {
        let mut pieces = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let stars = rest.len() - rest.trim_start_matches('*').len();
            let piece = match stars {
                0 => {
                    let end = rest.find('*').unwrap_or(rest.len());
                    let text = &rest[..end];
                    rest = &rest[end..];
                    pieces.push(Piece::Text(text.to_owned()));
                    continue;
                }
                1 => Piece::Segment,
                _ => Piece::Anything,
            };
            rest = &rest[stars..];
            pieces.push(piece);
        }
        Pattern(pieces)
    }

    /// Only wildcards: it matches every value without `:` (`*`) or every value (`**`).
    fn is_wildcard(&self) -> bool {
        !self.0.is_empty() && self.0.iter().all(|p| !matches!(p, Piece::Text(_)))
    }

    /// No wildcard: it matches one value.
    fn is_exact(&self) -> bool {
        self.0.iter().all(|p| matches!(p, Piece::Text(_)))
    }

    /// The whole of `value` matches. The positions of `value` each piece can end at, piece by
    /// piece: linear in the value's length for each piece, whatever the pattern.
    fn matches(&self, value: &str) -> bool {
        let bytes = value.as_bytes();
        let mut reached = vec![false; bytes.len() + 1];
        reached[0] = true;
        for piece in &self.0 {
            let mut next = vec![false; bytes.len() + 1];
            match piece {
                Piece::Text(text) => {
                    for (at, _) in reached.iter().enumerate().filter(|(_, r)| **r) {
                        if bytes[at..].starts_with(text.as_bytes()) {
                            next[at + text.len()] = true;
                        }
                    }
                }
                Piece::Segment | Piece::Anything => {
                    let mut open = false;
                    for at in 0..=bytes.len() {
                        open |= reached[at];
                        next[at] = open;
                        if matches!(piece, Piece::Segment) && bytes.get(at) == Some(&b':') {
                            open = false;
                        }
                    }
                }
            }
            reached = next;
        }
        reached[bytes.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(c, p)| ((*c).to_owned(), (*p).to_owned()))
            .collect()
    }

    #[test]
    fn patterns_match_the_whole_claim() {
        let p = Pattern::parse("system:serviceaccount:team-a:*");
        assert!(p.matches("system:serviceaccount:team-a:runner"));
        assert!(!p.matches("system:serviceaccount:team-ab:runner"));
        assert!(!p.matches("xsystem:serviceaccount:team-a:runner"));
        let exact = Pattern::parse("repo:acme/infra:ref:refs/heads/main");
        assert!(exact.matches("repo:acme/infra:ref:refs/heads/main"));
        assert!(!exact.matches("repo:acme/infra:ref:refs/heads/main2"));
        let middle = Pattern::parse("repo:acme/*:environment:prod");
        assert!(middle.matches("repo:acme/infra:environment:prod"));
        assert!(!middle.matches("repo:acme/infra:environment:production"));
        assert!(!middle.matches("repo:evil/x:environment:prod"));
        // A `*` does not let the parts overlap.
        assert!(!Pattern::parse("ab*ba").matches("aba"));
        assert!(Pattern::parse("*").matches(""));
    }

    /// `*` stops at `:`, `**` does not: a pattern of one repository's branches admits no
    /// tag, environment or pull request, nor a service account of a namespace another's.
    #[test]
    fn a_star_does_not_cross_a_colon_and_two_do() {
        let branches = Pattern::parse("repo:acme/infra:ref:refs/heads/*");
        assert!(branches.matches("repo:acme/infra:ref:refs/heads/main"));
        assert!(branches.matches("repo:acme/infra:ref:refs/heads/feature/x"));
        for other in [
            "repo:acme/infra:ref:refs/tags/v1",
            "repo:acme/infra:environment:prod",
            "repo:acme/infra:pull_request",
            "repo:acme/infra:ref:refs/heads/main:environment:prod",
        ] {
            assert!(!branches.matches(other), "{other}");
        }
        let any_ref = Pattern::parse("repo:acme/infra:*");
        assert!(any_ref.matches("repo:acme/infra:pull_request"));
        assert!(!any_ref.matches("repo:acme/infra:ref:refs/heads/main"));
        let everything = Pattern::parse("repo:acme/infra:**");
        assert!(everything.matches("repo:acme/infra:ref:refs/heads/main"));
        assert!(everything.matches("repo:acme/infra:environment:prod"));
        assert!(!everything.matches("repo:acme/infra2:environment:prod"));
        let namespace = Pattern::parse("system:serviceaccount:team-a:*");
        assert!(!namespace.matches("system:serviceaccount:team-a:x:y"));
        let repos = Pattern::parse("repo:acme/*:**");
        assert!(repos.matches("repo:acme/infra:ref:refs/heads/main"));
        assert!(!repos.matches("repo:acme/x"));
        assert!(!repos.matches("repo:acme-evil/x:ref:refs/heads/main"));
        assert!(Pattern::parse("*:*").matches("a:b"));
        assert!(!Pattern::parse("*:*").matches("a:b:c"));
        assert!(Pattern::parse("**").matches("a:b:c"));
        assert!(!Pattern::parse("a**b*c").matches("a:x:b:yc"));
        assert!(Pattern::parse("a**b*c").matches("a:x:byc"));
    }

    #[test]
    fn dotted_claims_reach_into_objects() {
        let token = serde_json::json!({
            "sub": "system:serviceaccount:team-a:runner",
            "kubernetes.io": {"namespace": "team-a", "serviceaccount": {"name": "runner"}},
            "repository": "acme/infra",
        });
        assert_eq!(
            claim(&token, "kubernetes.io.namespace").and_then(Value::as_str),
            Some("team-a")
        );
        assert_eq!(
            claim(&token, "kubernetes.io.serviceaccount.name").and_then(Value::as_str),
            Some("runner")
        );
        assert!(claim(&token, "kubernetes.io.nothing").is_none());
        let rule = Rule::new(
            "https://k8s.test",
            &claims(&[
                ("kubernetes.io.namespace", "team-a"),
                ("sub", "system:serviceaccount:*:runner"),
            ]),
            "team-a",
            Scope::full(),
        )
        .unwrap();
        assert!(rule.matches(&token));
        // A claim that is not a string never matches, whatever the pattern.
        let odd = serde_json::json!({"sub": 7, "kubernetes.io": {"namespace": "team-a"}});
        assert!(!rule.matches(&odd));
    }

    #[test]
    fn a_rule_names_a_claim_and_a_caller() {
        let issuer = "https://k8s.test";
        let none = BTreeMap::new();
        let e = Rule::new(issuer, &none, "x", Scope::full()).unwrap_err();
        assert!(e.contains("names no claim") && !e.contains("\"*\""), "{e}");
        let sub = claims(&[("sub", "system:serviceaccount:team-a:*")]);
        assert!(Rule::new(issuer, &sub, "", Scope::full()).is_err());
        assert!(Rule::new(issuer, &sub, "a:b", Scope::full()).is_err());
        assert!(Rule::new(issuer, &sub, "ci", Scope::full()).is_ok());
    }

    /// A rule whose every pattern is only stars would admit every token of its issuer.
    #[test]
    fn a_rule_matching_every_token_is_refused() {
        let issuer = "https://k8s.test";
        for all in [
            claims(&[("sub", "*")]),
            claims(&[("sub", "**")]),
            claims(&[("sub", "*"), ("aud", "**")]),
        ] {
            let e = Rule::new(issuer, &all, "ci", Scope::full()).unwrap_err();
            assert!(e.contains("matches every token"), "{e}");
        }
        // One claim pinned is enough.
        let pinned = claims(&[("sub", "*"), ("kubernetes.io.namespace", "team-a")]);
        assert!(Rule::new(issuer, &pinned, "ci", Scope::full()).is_ok());
    }

    /// Under GitHub's and GitLab.com's issuers, a rule pins the owner by id, exactly.
    #[test]
    fn a_shared_issuer_rule_pins_an_owner_id() {
        for shared in &SHARED_ISSUERS {
            let names = claims(&[("sub", "repo:acme/infra:ref:refs/heads/main")]);
            let e = Rule::new(shared.issuer, &names, "ci", Scope::full()).unwrap_err();
            for id in shared.owner_ids {
                assert!(e.contains(id), "{e}");
            }
            assert!(e.contains(shared.service), "{e}");
            for id in shared.owner_ids {
                let wild = claims(&[("sub", "repo:acme/infra:**"), (id, "12*")]);
                assert!(Rule::new(shared.issuer, &wild, "ci", Scope::full()).is_err());
                let pinned = claims(&[("sub", "repo:acme/infra:**"), (id, "123456")]);
                assert!(Rule::new(shared.issuer, &pinned, "ci", Scope::full()).is_ok());
            }
            // Another claim named like an id does not count.
            let other = claims(&[("owner_id", "123456")]);
            assert!(Rule::new(shared.issuer, &other, "ci", Scope::full()).is_err());
        }
        // Any other issuer needs no id.
        let names = claims(&[("sub", "repo:acme/infra:ref:refs/heads/main")]);
        assert!(Rule::new("https://gitlab.example.com", &names, "ci", Scope::full()).is_ok());
    }
}
