//! What the checks after decoding ([`super::prepare`]) read of a state, kept while the body is
//! walked: one record per resource, instance, output, check result and checked object, with the
//! few values their rules look at. A field given twice keeps its last value, as Go does.

use serde_json::Value;

use super::shape::{Fact, Scope};
use super::strings::{Found, Wanted};

/// A kept value: a string's text, or any other JSON value (for fields Terraform keeps raw).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kept {
    Text(String),
    Json(Value),
}

impl Kept {
    /// The text of a string field (`""` when it was absent or `null`, as Go reads it).
    pub(crate) fn text(kept: &Option<Kept>) -> &str {
        match kept {
            Some(Kept::Text(text)) => text,
            _ => "",
        }
    }
}

/// One element of `resources`.
#[derive(Debug, Default)]
pub(crate) struct Resource {
    pub mode: Option<Kept>,
    pub resource_type: Option<Kept>,
    pub name: Option<Kept>,
    pub module: Option<Kept>,
    pub provider: Option<Kept>,
    pub instances: Vec<Instance>,
}

impl Resource {
    pub fn mode(&self) -> &str {
        Kept::text(&self.mode)
    }
    pub fn module(&self) -> &str {
        Kept::text(&self.module)
    }
    pub fn resource_type(&self) -> &str {
        Kept::text(&self.resource_type)
    }
    pub fn name(&self) -> &str {
        Kept::text(&self.name)
    }
    pub fn provider(&self) -> &str {
        Kept::text(&self.provider)
    }
}

/// One element of a resource's `instances`.
#[derive(Debug, Default)]
pub(crate) struct Instance {
    pub index_key: Option<Value>,
    pub status: Option<Kept>,
    pub deposed: Option<Kept>,
    pub provider: Option<Kept>,
    pub dependencies: Vec<String>,
    pub depends_on: Vec<String>,
    pub sensitive_attributes: Option<Value>,
    /// The strings of its `attributes` the catalog reads ([`Facts::wanted`]).
    pub strings: Vec<Found>,
}

impl Instance {
    pub fn status(&self) -> &str {
        Kept::text(&self.status)
    }
    pub fn deposed(&self) -> &str {
        Kept::text(&self.deposed)
    }
    pub fn provider(&self) -> &str {
        Kept::text(&self.provider)
    }
}

/// One value of `outputs`.
#[derive(Debug, Default)]
pub(crate) struct Output {
    pub name: String,
    /// The raw `type` (`None`: absent, which Go reads as an empty `json.RawMessage`).
    pub type_spec: Option<Value>,
    pub value: Option<Value>,
}

/// One element of `check_results`.
#[derive(Debug, Default)]
pub(crate) struct Check {
    pub kind: Option<Kept>,
    pub config_addr: Option<Kept>,
    pub objects: Vec<CheckObject>,
}

impl Check {
    pub fn kind(&self) -> &str {
        Kept::text(&self.kind)
    }
    pub fn config_addr(&self) -> &str {
        Kept::text(&self.config_addr)
    }
}

/// One element of a check result's `objects`.
#[derive(Debug, Default)]
pub(crate) struct CheckObject {
    pub addr: Option<Kept>,
}

impl CheckObject {
    pub fn addr(&self) -> &str {
        Kept::text(&self.addr)
    }
}

/// Everything kept, in document order.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    pub resources: Vec<Resource>,
    pub outputs: Vec<Output>,
    pub checks: Vec<Check>,
    /// The key of the map value being walked (an output's name).
    pending_key: Option<String>,
    /// Which strings of the instances' attributes are kept.
    pub wanted: Wanted,
    /// A v3 state's `modules` as JSON, when all strings are wanted.
    pub legacy_modules: Option<Value>,
}

impl Facts {
    /// Facts that keep the strings `wanted`.
    pub fn wanting(wanted: Wanted) -> Facts {
        Facts {
            wanted,
            ..Facts::default()
        }
    }

    /// Where the strings of the current instance's attributes go.
    pub fn instance_strings(&mut self) -> Option<&mut Vec<Found>> {
        let resource = self.resources.last_mut()?;
        Some(&mut resource.instances.last_mut()?.strings)
    }

    /// The next value walked is the map value under `key`.
    pub fn under_key(&mut self, key: &str) {
        self.pending_key = Some(key.to_owned());
    }

    /// A struct of `scope` begins: its record is the current one of its kind.
    pub fn open(&mut self, scope: Scope) {
        match scope {
            Scope::Plain => {}
            Scope::Resource => self.resources.push(Resource::default()),
            Scope::Instance => {
                if let Some(resource) = self.resources.last_mut() {
                    resource.instances.push(Instance::default());
                }
            }
            Scope::Output => self.outputs.push(Output {
                name: self.pending_key.take().unwrap_or_default(),
                ..Output::default()
            }),
            Scope::Check => self.checks.push(Check::default()),
            Scope::CheckObject => {
                if let Some(check) = self.checks.last_mut() {
                    check.objects.push(CheckObject::default());
                }
            }
        }
    }

    /// Keeps `value` as `fact` of the current record of `within` (the struct the field is in).
    pub fn keep(&mut self, within: Scope, fact: Fact, value: Kept) {
        let json = |value: Kept| match value {
            Kept::Json(json) => json,
            Kept::Text(text) => Value::String(text),
        };
        match within {
            Scope::Resource => {
                let Some(r) = self.resources.last_mut() else {
                    return;
                };
                match fact {
                    Fact::Mode => r.mode = Some(value),
                    Fact::Module => r.module = Some(value),
                    Fact::Provider => r.provider = Some(value),
                    Fact::ResourceType => r.resource_type = Some(value),
                    Fact::ResourceName => r.name = Some(value),
                    _ => {}
                }
            }
            Scope::Instance => {
                let Some(i) = self
                    .resources
                    .last_mut()
                    .and_then(|r| r.instances.last_mut())
                else {
                    return;
                };
                match fact {
                    Fact::IndexKey => i.index_key = Some(json(value)),
                    Fact::Status => i.status = Some(value),
                    Fact::Deposed => i.deposed = Some(value),
                    Fact::Provider => i.provider = Some(value),
                    Fact::Dependency | Fact::DependsOn => {
                        if let Kept::Text(text) = value {
                            match fact {
                                Fact::Dependency => i.dependencies.push(text),
                                _ => i.depends_on.push(text),
                            }
                        }
                    }
                    Fact::SensitiveAttributes => i.sensitive_attributes = Some(json(value)),
                    _ => {}
                }
            }
            Scope::Output => {
                let Some(o) = self.outputs.last_mut() else {
                    return;
                };
                match fact {
                    Fact::OutputType => o.type_spec = Some(json(value)),
                    Fact::OutputValue => o.value = Some(json(value)),
                    _ => {}
                }
            }
            Scope::Check => {
                let Some(c) = self.checks.last_mut() else {
                    return;
                };
                match fact {
                    Fact::CheckKind => c.kind = Some(value),
                    Fact::ConfigAddr => c.config_addr = Some(value),
                    _ => {}
                }
            }
            Scope::CheckObject => {
                let Some(o) = self.checks.last_mut().and_then(|c| c.objects.last_mut()) else {
                    return;
                };
                if fact == Fact::ObjectAddr {
                    o.addr = Some(value);
                }
            }
            Scope::Plain => {}
        }
    }
}
