//! `gitstate catalog …`: the DynamoDB catalog from the command line (`--json` for machines, a
//! table for people).

use clap::{Args, Subcommand};
use gitstate_app::Settings;
use gitstate_catalog::{DynamoCatalog, StateEntry};

/// The catalog subcommands.
#[derive(Subcommand, Debug)]
pub enum CatalogCommand {
    /// Create the catalog's DynamoDB table (keys pk/sk, TTL on expires_at), as SAM does in the
    /// cloud; does nothing when it exists.
    ///
    ///   AWS_ENDPOINT_URL=http://127.0.0.1:5000 gitstate catalog create-table --catalog-table gitstate
    #[command(verbatim_doc_comment)]
    CreateTable(CatalogArgs),
    /// List the states with serial, size, last writer and lock holder.
    ///
    ///   gitstate catalog states --catalog-table gitstate
    ///   gitstate catalog states --json | jq '.[] | select(.lock)'
    #[command(verbatim_doc_comment)]
    States(CatalogArgs),
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
    let catalog = config.catalog.ok_or_else(|| {
        "no catalog is configured: give --catalog-table, GITSTATE_CATALOG_TABLE or catalog { dynamodb_table = \"…\" }".to_owned()
    })?;
    let ttl = std::time::Duration::from_secs(catalog.audit_ttl_days.saturating_mul(86_400));
    Ok(DynamoCatalog::connect(&catalog.dynamodb_table, ttl).await)
}

fn table(rows: Vec<Vec<String>>) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
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
        CatalogCommand::States(args) => {
            let states = open(&args)
                .await?
                .states()
                .await
                .map_err(|e| e.to_string())?;
            if args.json {
                return serde_json::to_string_pretty(&states)
                    .map(|s| s + "\n")
                    .map_err(|e| e.to_string());
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
                return serde_json::to_string_pretty(&events)
                    .map(|s| s + "\n")
                    .map_err(|e| e.to_string());
            }
            let mut rows = vec![["AT", "ACTION", "WHO", "SERIAL", "LOCK ID"]
                .map(String::from)
                .to_vec()];
            rows.extend(events.iter().map(|e| {
                vec![
                    e.at.clone(),
                    e.action.clone(),
                    e.who.clone(),
                    e.serial.map_or("-".into(), |s| s.to_string()),
                    e.lock_id.clone().unwrap_or_else(|| "-".into()),
                ]
            }));
            Ok(table(rows))
        }
    }
}
