//! `gitstate migrate`: re-seals every state of the configured repositories (issue 18, coming
//! from terraform-backend-git): legacy aes states (opened with the configured passphrase) and
//! plaintext states are written back sealed with the configured sops keys, one compare-and-swap
//! commit per state ([`gitstate_core::Backend::migrate`]). Sealed states and files that are not
//! states are left as they are; a locked state, or a file nothing here opens, is reported and
//! left, and the command then fails after doing the rest.

use clap::Args;
use gitstate_app::Settings;
use gitstate_core::backend::Caller;
use gitstate_core::{BackendError, CatalogChange, ListQuery, StatePath};
use serde::Serialize;

use crate::admin::{operator, Repositories};
use crate::output::{json, table, Progress};

/// `gitstate migrate`.
#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// Repository names [default: every configured repository].
    #[arg(value_name = "REPOSITORY")]
    pub names: Vec<String>,
    /// List what would be re-sealed, and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub settings: Settings,
}

/// One state's line of the report.
#[derive(Debug, Serialize)]
struct Row {
    repository: String,
    path: String,
    #[serde(flatten)]
    migration: Option<gitstate_core::backend::Migration>,
    error: Option<String>,
}

impl Row {
    fn action(&self, dry_run: bool) -> String {
        let Some(m) = &self.migration else {
            return format!("not migrated: {}", self.error.as_deref().unwrap_or("?"));
        };
        match (&m.to, &m.commit) {
            (Some(to), Some(commit)) => {
                format!("now {to}, commit {}", &commit[..12.min(commit.len())])
            }
            (Some(to), None) if dry_run => format!("would be {to}"),
            _ => "left as it is".to_owned(),
        }
    }
}

/// Re-seals every state of the repositories `args` names (all configured ones by default).
pub async fn run(args: MigrateArgs) -> Result<String, String> {
    let repositories = Repositories::open(&args.settings).await?;
    let names = if args.names.is_empty() {
        repositories.names()
    } else {
        args.names.clone()
    };
    let caller = Caller {
        name: operator(),
        deadline: None,
        force: false,
        token: None,
        sealed_by: None,
    };
    let mut rows = Vec::new();
    for name in names {
        let store = repositories.store(&name)?;
        let listed = store
            .list_states(&ListQuery::all())
            .await
            .map_err(|e| format!("cannot list the states of {name}: {e}"))?
            .states;
        let verb = if args.dry_run { "check" } else { "migrate" };
        let mut progress = Progress::new(format!("{verb} {name}"), listed.len());
        for entry in listed {
            let Ok(path) = StatePath::parse(&entry.path) else {
                progress.step(&entry.path);
                continue; // not a state path (a lock file name, a dot file)
            };
            let migrated = repositories
                .backend
                .migrate(store.as_ref(), &path, args.dry_run, &caller)
                .await;
            let row = match migrated {
                Ok(migration) => {
                    if let Some(facts) = migration.facts.clone() {
                        repositories
                            .tell_catalog(&name, &path, CatalogChange::Write(facts))
                            .await;
                    }
                    Row {
                        repository: name.clone(),
                        path: entry.path,
                        migration: Some(migration),
                        error: None,
                    }
                }
                Err(e) => Row {
                    repository: name.clone(),
                    path: entry.path,
                    migration: None,
                    error: Some(explain_refusal(e, &path)),
                },
            };
            progress.step(path.as_str());
            rows.push(row);
        }
    }
    let failed = rows.iter().filter(|r| r.error.is_some()).count();
    let report = if args.json {
        json(&rows)?
    } else {
        report(&rows, args.dry_run)
    };
    if failed == 0 {
        return Ok(report);
    }
    print!("{report}");
    Err(format!(
        "{failed} state(s) were not migrated (see above): release their locks or configure the passphrase they were written with, then run it again; the others are done"
    ))
}

/// Why a state was not migrated, in words an operator acts on.
fn explain_refusal(e: BackendError, path: &StatePath) -> String {
    match e {
        BackendError::Locked(holder) => {
            let info = gitstate_core::LockInfo::stored(&holder);
            format!(
                "{path} is locked by {} ({}, ID {}); run migrate again once it is released (or release it with `gitstate unlock`)",
                info.who, info.operation, info.id
            )
        }
        other => other.to_string(),
    }
}

/// The table and a closing sentence.
fn report(rows: &[Row], dry_run: bool) -> String {
    let changed = rows
        .iter()
        .filter(|r| r.migration.as_ref().is_some_and(|m| m.to.is_some()))
        .count();
    let mut lines = vec![["REPOSITORY", "PATH", "SERIAL", "STORED", "ACTION"]
        .map(String::from)
        .to_vec()];
    lines.extend(rows.iter().map(|r| {
        let m = r.migration.as_ref();
        vec![
            r.repository.clone(),
            r.path.clone(),
            m.and_then(|m| m.serial)
                .map_or("-".into(), |s| s.to_string()),
            m.map_or("?".into(), |m| m.from.to_string()),
            r.action(dry_run),
        ]
    }));
    let mut closing = if dry_run {
        format!(
            "dry run: {changed} state(s) would be migrated, one commit each; nothing was written\n"
        )
    } else {
        format!("{changed} state(s) migrated, one commit each\n")
    };
    let to_plaintext = rows.iter().any(|r| {
        r.migration
            .as_ref()
            .is_some_and(|m| m.to == Some(gitstate_core::backend::StoredForm::Plaintext))
    });
    if to_plaintext {
        closing.push_str("no sops key is configured, so legacy aes states become plaintext; configure one (SOPS_AGE_RECIPIENTS, SOPS_KMS_ARN, encryption { … }) to keep them encrypted\n");
    }
    table(lines) + &closing
}
