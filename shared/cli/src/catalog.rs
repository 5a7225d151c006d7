//! `gitstate catalog …`: the DynamoDB catalog from the command line (`--json` for machines, a
//! table for people).

use std::collections::BTreeSet;
use std::time::{Duration, UNIX_EPOCH};

use clap::{Args, Subcommand};
use gitstate_app::Settings;
use gitstate_catalog::DynamoCatalog;
use gitstate_core::links::StateRef;
use gitstate_core::{Catalog, CatalogChange, CatalogEvent, LockFacts, StateEntry};
use gitstate_core::{ListQuery, StatePath};

use crate::admin::Repositories;
use crate::output::{json, table, Progress};

/// The catalog subcommands.
#[derive(Subcommand, Debug)]
pub enum CatalogCommand {
    /// Create the catalog's DynamoDB table (keys pk/sk, TTL on expires_at), as SAM does in the
    /// cloud; does nothing when it exists.
    ///
    ///   AWS_ENDPOINT_URL=http://127.0.0.1:5000 gitstate catalog create-table --catalog-table gitstate
    #[command(verbatim_doc_comment)]
    CreateTable(CatalogArgs),
    /// List the states with serial, size, last writer and lock holder, a page at a time (in
    /// repository and path order; when more follow, standard error says how to ask for them).
    ///
    ///   gitstate catalog states --catalog-table gitstate
    ///   gitstate catalog states --prefix default/teams/ --limit 100
    ///   gitstate catalog states --json | jq '.[] | select(.lock)'
    #[command(verbatim_doc_comment)]
    States {
        #[command(flatten)]
        page: PageArgs,
        #[command(flatten)]
        args: CatalogArgs,
    },
    /// One state's audit trail (writes, deletes, locks, unlocks, force-unlocks), oldest first.
    ///
    ///   gitstate catalog audit default envs/prod.tfstate
    #[command(verbatim_doc_comment)]
    Audit {
        /// Repository name.
        repository: String,
        /// State path.
        path: String,
        #[command(flatten)]
        args: CatalogArgs,
    },
    /// Which state manages this resource? Looks the identifier (an id, ARN, self link or name)
    /// up in the resource index.
    ///
    ///   gitstate catalog find i-0123456789abcdef0
    ///   gitstate catalog find arn:aws:s3:::acme-logs --json
    #[command(verbatim_doc_comment)]
    Find {
        /// The identifier to look for (exact value).
        identifier: String,
        #[command(flatten)]
        args: CatalogArgs,
    },
    /// Identifiers managed by more than one state (same resource type and attribute): two
    /// states fighting over one real object is a source of drift.
    ///
    ///   gitstate catalog duplicates
    #[command(verbatim_doc_comment)]
    Duplicates(CatalogArgs),
    /// What a state uses of other states (an identifier another state manages, held in an
    /// attribute or output) and what uses it: `declared` where it reads that state through
    /// `terraform_remote_state`, `literal` where the identifier is copied by hand; `dangling`
    /// where the provider no longer manages it.
    ///
    ///   gitstate catalog links default envs/app.tfstate
    ///   gitstate catalog links default network.tfstate --json | jq '.used_by[] | select(.kind == "literal")'
    #[command(verbatim_doc_comment)]
    Links {
        /// Repository name.
        repository: String,
        /// State path.
        path: String,
        #[command(flatten)]
        args: CatalogArgs,
    },
    /// The states of a repository in an order for applies (each after the states it uses),
    /// and any circle of states that use each other.
    ///
    ///   gitstate catalog order default
    #[command(verbatim_doc_comment)]
    Order {
        /// Repository name.
        repository: String,
        #[command(flatten)]
        args: CatalogArgs,
    },
    /// Rebuild the catalog from the git repositories: every state's entry, lock holder and
    /// resource index, as git holds them now (states gone from git are marked deleted). For
    /// recovery, and to enable the catalog late. The audit trail is not rebuilt: git's history
    /// (`gitstate history`) holds the writes, and released locks leave no trace in git.
    ///
    ///   gitstate catalog rebuild --config gitstate.hcl
    #[command(verbatim_doc_comment)]
    Rebuild(CatalogArgs),
}

/// Where the catalog is, and how to print.
#[derive(Args, Debug)]
pub struct CatalogArgs {
    #[command(flatten)]
    settings: Settings,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

async fn open(args: &CatalogArgs) -> Result<DynamoCatalog, String> {
    let config = args.settings.resolve().map_err(|e| e.to_string())?;
    let index_kms_arn = gitstate_app::catalog_index_kms_arn(&config);
    let catalog = config.catalog.ok_or_else(|| {
        "no catalog is configured: give --catalog-table, GITSTATE_CATALOG_TABLE or catalog { dynamodb_table = \"…\" }".to_owned()
    })?;
    let ttl = std::time::Duration::from_secs(catalog.audit_ttl_days.saturating_mul(86_400));
    Ok(DynamoCatalog::connect(&catalog.dynamodb_table, ttl, index_kms_arn).await)
}

fn state_row(s: &StateEntry) -> Vec<String> {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let num = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    vec![
        s.repository.clone(),
        s.path.clone(),
        if s.deleted {
            "deleted".into()
        } else {
            num(s.serial)
        },
        num(s.size),
        num(s.resource_count),
        opt(&s.updated_by),
        opt(&s.updated_at),
        s.lock.as_ref().map_or("-".into(), |l| {
            format!("{} ({}, {})", l.who, l.operation, l.id)
        }),
    ]
}

/// Rebuilds every configured repository's entries, then the links across states (once every
/// index entry is rebuilt: a provider may come later in the walk); returns the summary.
async fn rebuild(args: &CatalogArgs) -> Result<String, String> {
    let catalog = open(args).await?;
    let repositories = Repositories::open(&args.settings).await?;
    let mut summary = String::new();
    let mut walked = Vec::new();
    for name in repositories.names() {
        summary.push_str(&rebuild_repository(&catalog, &repositories, &name, &mut walked).await?);
    }
    let duplicates = catalog
        .rebuild_duplicates()
        .await
        .map_err(|e| e.to_string())?;
    summary.push_str(&format!(
        "{duplicates} identifier(s) managed by more than one state\n"
    ));
    let linked = rebuild_links(&catalog, &repositories, &walked).await?;
    summary.push_str(&format!("{linked} link(s) across states\n"));
    Ok(summary)
}

/// Reads a state's version `commit`; a state this process cannot open (encrypted, no key here)
/// stops the rebuild before anything is removed from the index (read_version refuses it).
async fn read_state(
    repositories: &Repositories,
    name: &str,
    path: &StatePath,
    commit: &str,
) -> Result<bytes::Bytes, String> {
    let store = repositories.store(name)?;
    Ok(repositories
        .backend
        .read_version(store.as_ref(), path, &commit.to_owned())
        .await
        .map_err(|e| {
            format!("{name}/{path}: {e}; the rebuild stopped here, before removing anything from the index (run it with the server's encryption settings)")
        })?
        .unwrap_or_default())
}

/// Rebuilds one repository's entries and index; adds each state and its commit to `walked`.
async fn rebuild_repository(
    catalog: &DynamoCatalog,
    repositories: &Repositories,
    name: &str,
    walked: &mut Vec<(StateRef, String)>,
) -> Result<String, String> {
    let store = repositories.store(name)?;
    let page = repositories
        .backend
        .states(store.as_ref(), &ListQuery::all())
        .await
        .map_err(|e| format!("{name}: {e}"))?;
    let states: Vec<_> = page
        .rows
        .into_iter()
        .filter(|r| r.commit.is_some())
        .collect();
    let mut progress = Progress::new(format!("rebuild {name}"), states.len());
    let mut present = BTreeSet::new();
    let mut indexed = 0;
    for row in &states {
        let path = StatePath::parse(&row.path).map_err(|e| e.to_string())?;
        let commit = row.commit.clone().unwrap_or_default();
        let state = read_state(repositories, name, &path, &commit).await?;
        let mut facts = gitstate_statefile::catalog_facts(&state);
        facts.commit = Some(commit.clone());
        indexed += facts.identifiers.len();
        let lock = row.lock.as_ref().map(|l| LockFacts {
            id: l.id.clone(),
            who: l.who.clone(),
            operation: l.operation.clone(),
            created: l.created.clone(),
        });
        let event = CatalogEvent {
            repository: name.to_owned(),
            path: row.path.clone(),
            who: row.updated_by.clone().unwrap_or_default(),
            at: UNIX_EPOCH + Duration::from_secs(row.updated_at.unwrap_or(0).max(0) as u64),
            change: CatalogChange::Write(facts),
        };
        catalog
            .rebuild_entry(event, lock)
            .await
            .map_err(|e| format!("{name}/{path}: {e}"))?;
        present.insert(row.path.clone());
        let state = StateRef {
            repository: name.to_owned(),
            path: row.path.clone(),
        };
        walked.push((state, commit));
        progress.step(path.as_str());
    }
    let forgotten = catalog
        .forget_missing(name, &present)
        .await
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(format!(
        "{name}: {} states, {indexed} identifiers indexed, {forgotten} marked deleted\n",
        present.len()
    ))
}

/// The links of every `walked` state, each read again (memory holds one state's uses at a
/// time); returns how many there are.
async fn rebuild_links(
    catalog: &DynamoCatalog,
    repositories: &Repositories,
    walked: &[(StateRef, String)],
) -> Result<usize, String> {
    let mut progress = Progress::new("links".to_owned(), walked.len());
    let mut linked = 0;
    for (state, commit) in walked {
        let path = StatePath::parse(&state.path).map_err(|e| e.to_string())?;
        let body = read_state(repositories, &state.repository, &path, commit).await?;
        let facts = gitstate_statefile::catalog_facts(&body);
        linked += catalog
            .sync_links(state, &facts.uses, &facts.reads)
            .await
            .map_err(|e| format!("{}/{}: {e}", state.repository, state.path))?;
        progress.step(&state.path);
    }
    Ok(linked)
}

/// Which page of the catalog's states to list.
#[derive(clap::Args, Debug)]
pub struct PageArgs {
    /// Only states whose `REPOSITORY/PATH` starts with this (e.g. `default/teams/`).
    #[arg(long)]
    prefix: Option<String>,
    /// Only states after this `REPOSITORY/PATH` (the last of the page before).
    #[arg(long)]
    after: Option<String>,
    /// States in the page at most.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    limit: u64,
}

/// Runs a catalog subcommand; the output goes to stdout.
pub async fn run(command: CatalogCommand) -> Result<String, String> {
    match command {
        CatalogCommand::CreateTable(args) => {
            let catalog = open(&args).await?;
            let created = catalog.create_table().await.map_err(|e| e.to_string())?;
            Ok(if created {
                "table created\n".into()
            } else {
                "the table exists\n".into()
            })
        }
        CatalogCommand::States { page, args } => {
            let query = ListQuery {
                prefix: page.prefix.unwrap_or_default(),
                after: page.after,
                limit: usize::try_from(page.limit).unwrap_or(usize::MAX),
            };
            let listed = open(&args)
                .await?
                .states(&query)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(next) = listed.next() {
                eprintln!("more states follow: add --after {next}");
            }
            let states = listed.states;
            if args.json {
                return json(&states);
            }
            let mut rows = vec![[
                "REPOSITORY",
                "PATH",
                "SERIAL",
                "BYTES",
                "RESOURCES",
                "UPDATED BY",
                "UPDATED AT",
                "LOCK",
            ]
            .map(String::from)
            .to_vec()];
            rows.extend(states.iter().map(state_row));
            Ok(table(rows))
        }
        CatalogCommand::Audit {
            repository,
            path,
            args,
        } => {
            let events = open(&args)
                .await?
                .audit(&repository, &path)
                .await
                .map_err(|e| e.to_string())?;
            if args.json {
                return json(&events);
            }
            let mut rows = vec![["AT", "ACTION", "WHO", "SERIAL", "LOCK ID", "COMMIT"]
                .map(String::from)
                .to_vec()];
            rows.extend(events.iter().map(|e| {
                vec![
                    e.at.clone(),
                    e.action.clone(),
                    e.who.clone(),
                    e.serial.map_or("-".into(), |s| s.to_string()),
                    e.lock_id.clone().unwrap_or_else(|| "-".into()),
                    e.commit
                        .as_deref()
                        .map_or("-".into(), |c| c.chars().take(12).collect()),
                ]
            }));
            Ok(table(rows))
        }
        CatalogCommand::Find { identifier, args } => {
            let found = open(&args)
                .await?
                .find(&identifier)
                .await
                .map_err(|e| e.to_string())?;
            if args.json {
                return json(&found);
            }
            if found.is_empty() {
                return Ok(format!("no state manages {identifier}\n"));
            }
            let mut rows = vec![["REPOSITORY", "PATH", "ADDRESS", "TYPE", "ATTRIBUTE"]
                .map(String::from)
                .to_vec()];
            rows.extend(
                found
                    .into_iter()
                    .map(|m| vec![m.repository, m.path, m.address, m.resource_type, m.field]),
            );
            Ok(table(rows))
        }
        CatalogCommand::Duplicates(args) => {
            let duplicates = open(&args)
                .await?
                .duplicates()
                .await
                .map_err(|e| e.to_string())?;
            if args.json {
                return json(&duplicates);
            }
            if duplicates.is_empty() {
                return Ok("no identifier is managed by more than one state\n".into());
            }
            let mut rows = vec![[
                "IDENTIFIER",
                "TYPE",
                "ATTRIBUTE",
                "REPOSITORY",
                "PATH",
                "ADDRESS",
            ]
            .map(String::from)
            .to_vec()];
            for d in duplicates {
                for m in d.managed_by {
                    rows.push(vec![
                        d.value.clone(),
                        d.resource_type.clone(),
                        d.field.clone(),
                        m.repository,
                        m.path,
                        m.address,
                    ]);
                }
            }
            Ok(table(rows))
        }
        CatalogCommand::Links {
            repository,
            path,
            args,
        } => links(&args, repository, path).await,
        CatalogCommand::Order { repository, args } => order(&args, &repository).await,
        CatalogCommand::Rebuild(args) => rebuild(&args).await,
    }
}

/// `catalog links`: both directions, one row per link.
async fn links(args: &CatalogArgs, repository: String, path: String) -> Result<String, String> {
    let state = StateRef { repository, path };
    let found = open(args)
        .await?
        .links(&state)
        .await
        .map_err(|e| e.to_string())?;
    if args.json {
        return json(&found);
    }
    if found.uses.is_empty() && found.used_by.is_empty() {
        return Ok(format!(
            "{}/{} uses no other state's resources, and no state uses its own\n",
            state.repository, state.path
        ));
    }
    let mut rows = vec![[
        "DIRECTION",
        "KIND",
        "OTHER STATE",
        "ITS ADDRESS",
        "ITS ATTRIBUTE",
        "HERE",
    ]
    .map(String::from)
    .to_vec()];
    for (direction, entries) in [("uses", &found.uses), ("used by", &found.used_by)] {
        for e in entries {
            let kind = e.kind.as_str().to_owned();
            rows.push(vec![
                direction.to_owned(),
                if e.dangling {
                    format!("{kind}, dangling")
                } else {
                    kind
                },
                format!("{}/{}", e.repository, e.path),
                e.address.clone(),
                e.attribute.clone(),
                format!("{} {}", e.here.address, e.here.attribute)
                    .trim_end()
                    .to_owned(),
            ]);
        }
    }
    Ok(table(rows))
}

/// `catalog order`: one state per line in order, then the circles.
async fn order(args: &CatalogArgs, repository: &str) -> Result<String, String> {
    let found = open(args)
        .await?
        .order(repository)
        .await
        .map_err(|e| e.to_string())?;
    if args.json {
        return json(&found);
    }
    let mut out: String = found.order.iter().map(|p| format!("{p}\n")).collect();
    for cycle in &found.cycles {
        out.push_str(&format!("cycle: {}\n", cycle.join(" <-> ")));
    }
    Ok(out)
}
