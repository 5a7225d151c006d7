//! The addresses a state names, as Terraform 1.0–1.15 and OpenTofu all read them (their
//! intersection; `internal/addrs` and terraform-registry-address): a resource's module and
//! provider, an instance's dependencies, a check result's addresses. Each reads an HCL traversal
//! ([`super::hcl`]). Where the readers differ (the `-` namespace's host, keywords, IDNA forms of
//! non-ASCII names), what all of them read is accepted.

use super::hcl::{traversal, Key, Step};

/// A module instance address (`module.a`, `module.a[0].module.b["k"]`), rendered canonically
/// (`module.a[1]` for `module.a[1.0]`), or `None` when it is not one.
pub(crate) fn module_instance(text: &str) -> Option<String> {
    let steps = traversal(text).ok()?;
    let (module, rest) = module_prefix(&steps, true)?;
    (rest.is_empty() && !module.is_empty()).then_some(module)
}

/// The `module.NAME[KEY]` steps at the start of `steps` (keys allowed when `keyed`): their
/// canonical text and the steps after them. `None` when a `module` step is malformed.
fn module_prefix(steps: &[Step], keyed: bool) -> Option<(String, &[Step])> {
    let mut rendered = String::new();
    let mut rest = steps;
    while let [Step::Name(keyword), tail @ ..] = rest {
        if keyword != "module" {
            break;
        }
        let [Step::Name(name), tail @ ..] = tail else {
            // `module` with no name, or `module[0]` (which crashes Terraform's reader).
            return None;
        };
        if !rendered.is_empty() {
            rendered.push('.');
        }
        rendered.push_str("module.");
        rendered.push_str(name);
        rest = tail;
        if let [Step::Index(key), tail @ ..] = rest {
            if !keyed {
                return None;
            }
            rendered.push_str(&key.render());
            rest = tail;
        }
    }
    Some((rendered, rest))
}

/// Whether `text` is a provider configuration address all readers take:
/// `[module.NAME...]provider["SOURCE"][.ALIAS]`, or the legacy `[module.NAME...]provider.TYPE[.ALIAS]`
/// (module steps without keys). A trailing `[KEY]` is allowed only where OpenTofu reads an
/// instance's own provider (`instance`), and only in the first form.
pub(crate) fn provider_config(text: &str, instance: bool) -> bool {
    let Ok(steps) = traversal(text) else {
        return false;
    };
    let Some((_, rest)) = module_prefix(&steps, false) else {
        return false;
    };
    match rest {
        [Step::Name(p), Step::Index(Key::Str(source))]
        | [Step::Name(p), Step::Index(Key::Str(source)), Step::Name(_)] => {
            p == "provider" && provider_source(source)
        }
        // An instance's own provider (OpenTofu) may end with the provider instance's key.
        [Step::Name(p), Step::Index(Key::Str(source)), Step::Index(_)]
        | [Step::Name(p), Step::Index(Key::Str(source)), Step::Name(_), Step::Index(_)] => {
            instance && p == "provider" && provider_source(source)
        }
        [Step::Name(p), Step::Name(_type)] | [Step::Name(p), Step::Name(_type), Step::Name(_)] => {
            p == "provider" && !instance
        }
        _ => false,
    }
}

/// A provider source string (`aws`, `hashicorp/aws`, `registry.terraform.io/hashicorp/aws`) all
/// readers take: 1 to 3 non-empty parts; the type and the namespace ASCII letters, digits and
/// single inner dashes (or the namespace `-`, only without a host: Terraform and OpenTofu imply
/// different ones); a host by svchost's rules; a namespaced type not starting with `terraform-`
/// or `opentofu-`.
fn provider_source(source: &str) -> bool {
    let parts: Vec<&str> = source.split('/').collect();
    if parts.is_empty() || parts.len() > 3 || parts.iter().any(|p| p.is_empty()) {
        return false;
    }
    let provider_type = parts[parts.len() - 1];
    if !provider_part(provider_type) {
        return false;
    }
    if parts.len() == 1 {
        return true;
    }
    let namespace = parts[parts.len() - 2];
    if namespace == "-" {
        if parts.len() == 3 {
            return false;
        }
    } else if !provider_part(namespace) {
        return false;
    }
    if parts.len() == 3 && !hostname(parts[0]) {
        return false;
    }
    let lower = provider_type.to_ascii_lowercase();
    !(lower.starts_with("terraform-") || lower.starts_with("opentofu-"))
}

/// `ParseProviderPart` in ASCII: `ALNUM (ALNUM | "-" ALNUM)*`.
fn provider_part(part: &str) -> bool {
    !part.is_empty()
        && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !part.starts_with('-')
        && !part.ends_with('-')
        && !part.contains("--")
}

/// svchost's `ForComparison` in ASCII: a name of dot-separated labels (none empty but trailing
/// ones; letters, digits and dashes, no dash first or last, no `--` at the third and fourth
/// characters; no punycode label), and an optional port (`Atoi`, at most 65535).
fn hostname(host: &str) -> bool {
    let (name, port) = match host.split_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    if let Some(port) = port {
        let digits = port.strip_prefix(['+', '-']).unwrap_or(port);
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || port.parse::<i64>().map_or(true, |p| p > 65535)
        {
            return false;
        }
    }
    let labels = name.trim_end_matches('.');
    !labels.is_empty()
        && labels.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.get(2..4) != Some("--")
                && !label.to_ascii_lowercase().starts_with("xn--")
        })
}

/// The words no reader takes as a managed resource's type at the start of a resource address
/// (Terraform 1.15 reserves some; 1.0 and OpenTofu read `resource.`, `ephemeral.` and `list.`
/// differently): only `data.` may precede a type.
const NOT_A_TYPE: &[&str] = &[
    "resource",
    "ephemeral",
    "list",
    "count",
    "each",
    "local",
    "path",
    "self",
    "terraform",
    "var",
    "template",
    "lazy",
    "arg",
];

/// A resource address (`aws_instance.a`, `data.x.y`, `module.m[0].aws_instance.a`; module keys
/// allowed), optionally followed by an instance key when `keyed`.
pub(crate) fn resource(text: &str, keyed: bool) -> bool {
    let Ok(steps) = traversal(text) else {
        return false;
    };
    let Some((_, rest)) = module_prefix(&steps, true) else {
        return false;
    };
    let rest = match (keyed, rest) {
        (true, [head @ .., Step::Index(_)]) => head,
        _ => rest,
    };
    match rest {
        [Step::Name(data), Step::Name(_type), Step::Name(_name)] => data == "data",
        [Step::Name(resource_type), Step::Name(_name)] => {
            !NOT_A_TYPE.contains(&resource_type.as_str()) && resource_type != "data"
        }
        _ => false,
    }
}

/// A checkable object's address of `kind` (`resource`, `output`, `check`, `var`); `config`: the
/// configuration's address, with no instance key anywhere. `None` for a kind no reader knows
/// (the check result is skipped).
pub(crate) fn checkable(kind: &str, text: &str, config: bool) -> Option<bool> {
    let keyword = match kind {
        "resource" => return Some(checkable_resource(text, config)),
        "output" | "check" | "var" => kind,
        _ => return None,
    };
    let Ok(steps) = traversal(text) else {
        return Some(false);
    };
    let Some((_, rest)) = module_prefix(&steps, !config) else {
        return Some(false);
    };
    Some(matches!(rest, [Step::Name(k), Step::Name(_)] if k == keyword))
}

fn checkable_resource(text: &str, config: bool) -> bool {
    if !config {
        return resource(text, true);
    }
    traversal(text).is_ok_and(|steps| !steps.iter().any(|s| matches!(s, Step::Index(_))))
        && resource(text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_addresses() {
        for (text, canonical) in [
            ("module.a", "module.a"),
            ("module.a[0]", "module.a[0]"),
            ("module.a[\"x\"]", "module.a[\"x\"]"),
            ("module.a[1e3]", "module.a[1000]"),
            ("module.a[1.0]", "module.a[1]"),
            ("module.a[0].module.b[\"k\"]", "module.a[0].module.b[\"k\"]"),
            ("module.module", "module.module"),
            ("module.module.module.a", "module.module.module.a"),
        ] {
            assert_eq!(module_instance(text).as_deref(), Some(canonical), "{text}");
        }
        for text in [
            "module",
            "module.",
            "module.a.b",
            "foo.a",
            "module.a[0][1]",
            "module[0]",
            "module.a[1.5]",
            "module.a[-1]",
            "module.a[9223372036854775808]",
            "MODULE.a",
            " ",
        ] {
            assert_eq!(module_instance(text), None, "{text}");
        }
    }

    #[test]
    fn provider_addresses() {
        for text in [
            "provider[\"registry.terraform.io/hashicorp/aws\"]",
            "provider[\"hashicorp/aws\"].east",
            "module.a.module.b.provider[\"aws\"]",
            "provider.aws",
            "module.a.provider.aws.east",
            "provider.AWS_x-y",
            "provider[\"-/aws\"]",
            "provider[\"terraform-foo\"]",
            "provider[\"ns/terraform\"]",
            "provider[\"Registry.Terraform.io:443/hashicorp/aws\"]",
            "provider[\"example.com:-1/ns/t\"]",
            "provider[\"example.com./ns/t\"]",
            "provider[\"a--b.com/ns/t\"]",
            "module.provider.provider[\"aws\"]",
        ] {
            assert!(provider_config(text, false), "{text}");
        }
        for text in [
            "",
            "provider",
            "aws",
            "provider[0]",
            "provider[\"\"]",
            "provider[\"aws\"].a.b",
            "provider[\"aws\"].a[0]",
            "provider[\"aws\"][0]",
            "provider.aws[0]",
            "module.a[0].provider[\"aws\"]",
            "module.a[\"k\"].provider.aws",
            "module[0].provider[\"x\"]",
            "module.a.module[0].provider.aws",
            "provider[\"a/b/c/d\"]",
            "provider[\"/aws\"]",
            "provider[\"aws/\"]",
            "provider[\"t_x\"]",
            "provider[\"-tx\"]",
            "provider[\"tx-\"]",
            "provider[\"t--x\"]",
            "provider[\"t.x\"]",
            "provider[\"xn--ls8h\"]",
            "provider[\"registry.terraform.io/-/aws\"]",
            "provider[\"ns/terraform-foo\"]",
            "provider[\"ns/Terraform-foo\"]",
            "provider[\"ns/opentofu-foo\"]",
            "provider[\"example.com:/ns/t\"]",
            "provider[\"example.com:65536/ns/t\"]",
            "provider[\".a.com/ns/t\"]",
            "provider[\"a..b/ns/t\"]",
            "provider[\"-a.com/ns/t\"]",
            "provider[\"ab--cd.com/ns/t\"]",
            "provider[\"xn--bcher-kva.com/ns/t\"]",
            "provider[\"XN--bcher-kva.com/ns/t\"]",
            "provider[\"aws\u{e9}\"]",
        ] {
            assert!(!provider_config(text, false), "{text}");
        }
        assert!(provider_config("provider[\"aws\"][0]", true));
        assert!(provider_config("provider[\"aws\"].east[\"k\"]", true));
        assert!(provider_config(
            "provider[\"registry.opentofu.org/hashicorp/null\"]",
            true
        ));
        assert!(!provider_config("provider.aws", true));
        assert!(!provider_config("provider[0]", true));
    }

    #[test]
    fn dependency_addresses() {
        for text in [
            "aws_instance.a",
            "data.x.y",
            "module.m[0].aws_instance.a",
            "output.x",
            "a-b.c-d",
        ] {
            assert!(resource(text, false), "{text}");
        }
        for text in [
            "aws_instance.a[0]",
            "aws_instance",
            "data.x",
            "module.m",
            "aws_instance.a.b",
            "aws_instance[0].a",
            "count.x",
            "var.x",
            "resource.t.n",
            "ephemeral.t.n",
            "list.t.n",
            "module.m[1.5].x.y",
        ] {
            assert!(!resource(text, false), "{text}");
        }
        assert!(resource("aws_instance.a[0]", true));
    }

    #[test]
    fn checkable_addresses() {
        assert_eq!(checkable("resource", "null_resource.a", true), Some(true));
        assert_eq!(
            checkable("resource", "module.m.null_resource.a", true),
            Some(true)
        );
        assert_eq!(
            checkable("resource", "module.m[0].aws_instance.a", true),
            Some(false)
        );
        assert_eq!(
            checkable("resource", "aws_instance.a[0]", true),
            Some(false)
        );
        assert_eq!(
            checkable("resource", "aws_instance.a[0]", false),
            Some(true)
        );
        assert_eq!(checkable("output", "output.o", true), Some(true));
        assert_eq!(checkable("output", "module.m.output.o", true), Some(true));
        assert_eq!(
            checkable("output", "module.m[0].output.o", true),
            Some(false)
        );
        assert_eq!(
            checkable("output", "module.m[0].output.o", false),
            Some(true)
        );
        for (kind, text) in [
            ("output", "output"),
            ("var", "var"),
            ("check", "module.m.check"),
            ("output", "output.o.x"),
            ("output", "output.o[0]"),
            ("var", "var.v[0]"),
            ("output", "var.o"),
            ("output", "output[\"o\"]"),
        ] {
            assert_eq!(checkable(kind, text, false), Some(false), "{kind} {text}");
        }
        assert_eq!(checkable("", "anything", true), None);
        assert_eq!(checkable("Resource", "x.y", true), None);
    }
}
