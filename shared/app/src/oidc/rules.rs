//! Claim rules: which caller a verified token is. A rule lists string claims and a pattern for
//! each (exact, or `*` for any run of characters, `:` and `/` included); all must match, and the
//! first rule that matches wins. A dotted claim name reaches into objects when the token has no
//! claim of that exact name (`kubernetes.io.namespace` is `{"kubernetes.io": {"namespace": …}}`).

use std::collections::BTreeMap;

use gitstate_core::Scope;
use serde_json::Value;

/// One rule: the claims it needs, the caller's name and its scope.
#[derive(Debug)]
pub(crate) struct Rule {
    claims: Vec<(String, Pattern)>,
    pub(crate) name: String,
    pub(crate) scope: Scope,
}

impl Rule {
    pub(crate) fn new(
        claims: &BTreeMap<String, String>,
        name: &str,
        scope: Scope,
    ) -> Result<Rule, String> {
        if claims.is_empty() {
            return Err("it names no claim (a rule matching every token of the issuer must say so: claims = { sub = \"*\" })".into());
        }
        if name.is_empty() || name.contains(':') || name.chars().any(char::is_control) {
            return Err(format!(
                "its name '{name}' must be non-empty, without ':' or control characters"
            ));
        }
        Ok(Rule {
            claims: claims
                .iter()
                .map(|(claim, pattern)| (claim.clone(), Pattern::parse(pattern)))
                .collect(),
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

/// A claim pattern: literal parts between `*`s.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern(Vec<String>);

impl Pattern {
    fn parse(text: &str) -> Pattern {
        Pattern(text.split('*').map(str::to_owned).collect())
    }

    /// The whole of `value` matches: the first part as a prefix, the last as a suffix, the
    /// others in order between them.
    fn matches(&self, value: &str) -> bool {
        let parts = &self.0;
        let [first, middle @ .., last] = parts.as_slice() else {
            return parts.first().is_some_and(|only| only == value);
        };
        let Some(mut rest) = value.strip_prefix(first.as_str()) else {
            return false;
        };
        for part in middle {
            match rest.find(part.as_str()) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            &[
                ("kubernetes.io.namespace".to_owned(), "team-a".to_owned()),
                ("sub".to_owned(), "*:runner".to_owned()),
            ]
            .into_iter()
            .collect(),
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
        let none = BTreeMap::new();
        assert!(Rule::new(&none, "x", Scope::full()).is_err());
        let sub: BTreeMap<String, String> = [("sub".to_owned(), "*".to_owned())].into();
        assert!(Rule::new(&sub, "", Scope::full()).is_err());
        assert!(Rule::new(&sub, "a:b", Scope::full()).is_err());
        assert!(Rule::new(&sub, "ci", Scope::full()).is_ok());
    }
}
