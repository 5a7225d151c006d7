//! Operator commands on the configured repositories, run in-process with the operator's own git
//! credentials (`GIT_USERNAME`/`GIT_PASSWORD`, `GITHUB_TOKEN`, …): `history`, `restore`,
//! `locks`, `unlock`. They read the same configuration as `serve`.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

use clap::Args;
use gitstate_app::{Config, Deployment, Registry, Runtime, Settings};
use gitstate_core::backend::Caller;
use gitstate_core::history::DEFAULT_HISTORY_LIMIT;
use gitstate_core::time::{format_age, format_rfc3339};
use gitstate_core::{
    Backend, BackendError, Catalog, CatalogChange, CatalogEvent, StatePath, StateStore,
    StoreRegistry, Unlock,
};

use crate::output::{json, table, Spinner};

/// The configured repositories, the backend (limits, sealer) and the catalog, as `serve` builds
/// them; always with the operator's own credentials, whatever `auth.mode` the server uses.
pub(crate) struct Repositories {
    pub backend: Backend,
    pub registry: Arc<Registry>,
    pub catalog: Option<Arc<dyn Catalog>>,
}

impl Repositories {
    /// Opens what `settings` configures, with the operator's credentials.
    pub async fn open(settings: &Settings) -> Result<Repositories, String> {
        let config = settings.resolve().map_err(|e| e.to_string())?;
        Repositories::from_config(&config).await
    }

    /// What `config` configures, as `serve` builds it (see [`Deployment::build`]), with the
    /// operator's credentials.
    pub async fn from_config(config: &Config) -> Result<Repositories, String> {
        let deployment = Deployment::build(config, Runtime::Admin)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Repositories {
            backend: deployment.backend,
            registry: deployment.registry,
            catalog: deployment.catalog,
        })
    }

    /// The store of repository `name`.
    pub fn store(&self, name: &str) -> Result<Arc<dyn StateStore>, String> {
        self.registry.named(name, None).map_err(|e| e.to_string())
    }

    /// The configured repository names.
    pub fn names(&self) -> Vec<String> {
        self.registry.names()
    }

    /// Tells the catalog (when there is one) about a change made from the command line; a
    /// failure is reported, not fatal: git holds the change.
    pub(crate) async fn tell_catalog(
        &self,
        repository: &str,
        path: &StatePath,
        change: CatalogChange,
    ) {
        let Some(catalog) = &self.catalog else {
            return;
        };
        let event = CatalogEvent {
            repository: repository.to_owned(),
            path: path.as_str().to_owned(),
            who: operator(),
            at: std::time::SystemTime::now(),
            change,
        };
        if let Err(e) = catalog.record(event).await {
            eprintln!("gitstate: the catalog was not updated ({e}); `gitstate catalog rebuild` repairs it");
        }
    }
}

/// The name commit messages give the operator: `$USER@host`, as Terraform's `Who`.
pub(crate) fn operator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    if host.is_empty() {
        user
    } else {
        format!("{user}@{host}")
    }
}

fn parse_path(raw: &str) -> Result<StatePath, String> {
    StatePath::parse(raw).map_err(|e| e.to_string())
}

/// A lock refusal in words an operator acts on.
fn explain(e: BackendError, path: &StatePath) -> String {
    match e {
        BackendError::Locked(holder) => {
            let info = gitstate_core::LockInfo::stored(&holder);
            format!(
                "{path} is locked by {} ({}, ID {}, since {}); wait for it, pass --lock-id {} if you hold it, or release it with `gitstate unlock`",
                info.who, info.operation, info.id, info.created, info.id
            )
        }
        other => other.to_string(),
    }
}

/// `gitstate history`.
#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Repository name (as configured; `default` for the embedded repository).
    pub repository: String,
    /// State path.
    pub path: String,
    /// Most versions to list, newest first.
    #[arg(long, default_value_t = DEFAULT_HISTORY_LIMIT)]
    pub limit: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub settings: Settings,
}

/// Lists the versions of a state: serial, commit, who, when, size.
pub async fn history(args: HistoryArgs) -> Result<String, String> {
    let path = parse_path(&args.path)?;
    let repositories = Repositories::open(&args.settings).await?;
    let store = repositories.store(&args.repository)?;
    let spinner = Spinner::start(format!(
        "reading the history of {path} in {}…",
        args.repository
    ));
    let versions = repositories
        .backend
        .history(store.as_ref(), &path, args.limit.max(1))
        .await
        .map_err(|e| e.to_string())?;
    drop(spinner);
    if args.json {
        return json(&versions);
    }
    if versions.is_empty() {
        return Ok(format!("{path} has no versions in {}\n", args.repository));
    }
    let mut rows = vec![["SERIAL", "COMMIT", "WHEN (UTC)", "WHO", "SIZE"]
        .map(String::from)
        .to_vec()];
    rows.extend(versions.iter().map(|v| {
        vec![
            v.serial.map_or("-".into(), |s| s.to_string()),
            v.commit.chars().take(12).collect(),
            format_rfc3339(v.time),
            v.who.clone(),
            match v.size {
                Some(size) => size.to_string(),
                None => "deleted".into(),
            },
        ]
    }));
    Ok(table(rows))
}

/// `gitstate restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// Repository name.
    pub repository: String,
    /// State path.
    pub path: String,
    /// The version to restore: a serial, or a commit id (4 to 40 hex digits) from `gitstate
    /// history`.
    #[arg(long)]
    pub version: String,
    /// The ID of a lock you hold on the state (a held lock refuses the restore otherwise).
    #[arg(long, value_name = "ID")]
    pub lock_id: Option<String>,
    /// Print JSON instead of a sentence.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub settings: Settings,
}

/// Writes an earlier version back as a new commit with the next serial.
pub async fn restore(args: RestoreArgs) -> Result<String, String> {
    let path = parse_path(&args.path)?;
    let repositories = Repositories::open(&args.settings).await?;
    let store = repositories.store(&args.repository)?;
    let caller = Caller {
        name: operator(),
        deadline: None,
        // The operator asked for this version: it may go back to another lineage.
        force: true,
        token: None,
        sealed_by: None,
    };
    let restored = repositories
        .backend
        .restore(
            store.as_ref(),
            &path,
            &args.version,
            args.lock_id.as_deref(),
            &caller,
        )
        .await
        .map_err(|e| explain(e, &path))?;
    repositories
        .tell_catalog(
            &args.repository,
            &path,
            CatalogChange::Write(restored.facts.clone()),
        )
        .await;
    if args.json {
        return json(&restored);
    }
    let from = format!(
        "serial {} (commit {})",
        restored
            .from
            .serial
            .map_or("?".to_owned(), |s| s.to_string()),
        &restored.from.commit[..12.min(restored.from.commit.len())]
    );
    Ok(match &restored.commit {
        Some(commit) => format!(
            "restored {path} from {from} as serial {} in commit {commit}\n",
            restored.serial
        ),
        None => format!("{path} already holds {from}; nothing was written\n"),
    })
}

/// `gitstate locks`.
#[derive(Args, Debug)]
pub struct LocksArgs {
    /// Repository names [default: every configured repository].
    #[arg(value_name = "REPOSITORY")]
    pub names: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Only locks older than this by their `Created` (e.g. "30m", "2h"): the ones a `lock_ttl`
    /// that long would let the next LOCK take over.
    #[arg(long, value_name = "DURATION")]
    pub stale: Option<String>,
    #[command(flatten)]
    pub settings: Settings,
}

/// Lists the held locks with their holder and age.
pub async fn locks(args: LocksArgs) -> Result<String, String> {
    let stale = match &args.stale {
        Some(text) => Some(
            gitstate_app::config::parse_lock_age("--stale", text)
                .map_err(|e| e.to_string())?
                .as_secs() as i64,
        ),
        None => None,
    };
    let repositories = Repositories::open(&args.settings).await?;
    let names = if args.names.is_empty() {
        repositories.names()
    } else {
        args.names.clone()
    };
    let mut all = Vec::new();
    for name in names {
        let store = repositories.store(&name)?;
        let held = repositories
            .backend
            .locks(store.as_ref())
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        let held = held.into_iter().filter(|lock| match stale {
            // The same rule as a LOCK under lock_ttl: older than it, by a readable Created.
            Some(stale) => lock.age_seconds.is_some_and(|age| age > stale),
            None => true,
        });
        all.extend(held.map(|lock| (name.clone(), lock)));
    }
    if args.json {
        let listed: Vec<serde_json::Value> = all
            .iter()
            .map(|(repository, lock)| {
                let mut value = serde_json::to_value(lock).unwrap_or_default();
                value["repository"] = serde_json::Value::String(repository.clone());
                value
            })
            .collect();
        return json(&listed);
    }
    if all.is_empty() {
        return Ok(match &args.stale {
            Some(stale) => format!("no lock older than {stale} is held\n"),
            None => "no locks are held\n".into(),
        });
    }
    let mut rows = vec![["REPOSITORY", "PATH", "WHO", "OPERATION", "ID", "AGE"]
        .map(String::from)
        .to_vec()];
    rows.extend(all.iter().map(|(repository, lock)| {
        vec![
            repository.clone(),
            lock.path.clone(),
            lock.who.clone(),
            lock.operation.clone(),
            lock.id.clone(),
            lock.age_seconds.map_or("-".into(), format_age),
        ]
    }));
    Ok(table(rows))
}

/// `gitstate unlock`.
#[derive(Args, Debug)]
pub struct UnlockArgs {
    /// Repository name.
    pub repository: String,
    /// State path.
    pub path: String,
    /// Release without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub settings: Settings,
}

/// Force-releases a lock after showing its holder and asking for confirmation.
pub async fn unlock(args: UnlockArgs) -> Result<String, String> {
    let path = parse_path(&args.path)?;
    let repositories = Repositories::open(&args.settings).await?;
    let store = repositories.store(&args.repository)?;
    let held = repositories
        .backend
        .locks(store.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    let Some(lock) = held.into_iter().find(|l| l.path == path.as_str()) else {
        return Ok(format!("{path} is not locked\n"));
    };
    let age = lock
        .age_seconds
        .map_or(String::new(), |a| format!(", {} ago", format_age(a)));
    let description = format!(
        "{path} is locked by {} ({}, ID {}{age})",
        lock.who, lock.operation, lock.id
    );
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(format!(
                "{description}; releasing it needs a confirmation: run in a terminal or pass --yes"
            ));
        }
        eprint!("{description}.\nRelease it? A Terraform run still holding it would then write without a lock. [y/N] ");
        std::io::stderr().flush().ok();
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| format!("reading the answer failed: {e}"))?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            return Err("not released".into());
        }
    }
    // Release exactly the lock that was shown: if another holder took it meanwhile, the ID no
    // longer matches and nothing is released.
    let request = Unlock::OnBehalf {
        id: lock.id.clone(),
    };
    let unlocked = repositories
        .backend
        .unlock(store.as_ref(), &path, &request, None)
        .await
        .map_err(|e| match e {
            BackendError::Locked(_) => format!(
                "the lock of {path} changed hands meanwhile; nothing was released (run again to see the new holder)"
            ),
            other => other.to_string(),
        })?;
    repositories
        .tell_catalog(
            &args.repository,
            &path,
            CatalogChange::Unlock {
                force: unlocked.force,
            },
        )
        .await;
    Ok(format!(
        "released the lock of {path} held by {}\n",
        lock.who
    ))
}
