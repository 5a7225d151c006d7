//! Seal/open throughput of Terraform-like states (not a test).
//!
//! `cargo run --release -p gitstate-sops --example bench [--compact] [MB ...]` (default: 1 10).
//! States are pretty-printed with two spaces like Terraform writes them; `--compact` uses
//! one line per resource instead (about 1.6x more leaves per MB, a worst case).

use std::time::{Duration, Instant};

use gitstate_sops::{encrypt, AgeKey, Document, EncryptOptions, KeySource, MasterKey, Rules};

const SECRET: &str = "AGE-SECRET-KEY-1GFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPQ4EGAEX";

/// A state of about `mb` megabytes, pretty-printed with two spaces like Terraform writes it.
fn state(mb: usize) -> Vec<u8> {
    let probe = pretty(&compact_state(100)).len();
    let n = (mb * 1_000_000 * 100).div_ceil(probe).max(1);
    pretty(&compact_state(n))
}

fn pretty(compact: &[u8]) -> Vec<u8> {
    gitstate_sops::Node::parse(compact)
        .expect("generated state parses")
        .to_json_pretty("  ")
}

/// A compact state with `count` resources of typical attribute shapes.
fn compact_state(count: usize) -> Vec<u8> {
    let mut s = String::from(
        "{\n  \"version\": 4,\n  \"terraform_version\": \"1.9.8\",\n  \"serial\": 42,\n  \"lineage\": \"3f1e0b9a-7c2d-4e5f-8a9b-0c1d2e3f4a5b\",\n  \"outputs\": {\"db_password\": {\"value\": \"hunter2\", \"type\": \"string\", \"sensitive\": true}},\n  \"resources\": [\n",
    );
    let mut i = 0usize;
    while i < count {
        if i > 0 {
            s.push_str(",\n");
        }
        s.push_str(&format!(
            "    {{\"mode\": \"managed\", \"type\": \"aws_instance\", \"name\": \"web_{i}\", \"provider\": \"provider[\\\"registry.terraform.io/hashicorp/aws\\\"]\", \"instances\": [{{\"schema_version\": 1, \"attributes\": {{\"id\": \"i-{i:016x}\", \"ami\": \"ami-0c55b159cbfafe1f0\", \"arn\": \"arn:aws:ec2:eu-west-1:123456789012:instance/i-{i:016x}\", \"instance_type\": \"t3.micro\", \"cpu_core_count\": 1, \"ebs_optimized\": false, \"monitoring\": true, \"private_ip\": \"10.0.{}.{}\", \"tags\": {{\"Name\": \"web-{i}\", \"env\": \"prod\"}}, \"root_block_device\": [{{\"volume_size\": 8, \"volume_type\": \"gp3\", \"iops\": 3000, \"throughput\": 125.5, \"encrypted\": true}}], \"security_groups\": [\"sg-1\", \"sg-2\"], \"user_data\": null, \"password\": \"\"}}, \"sensitive_attributes\": [], \"private\": \"eyJzY2hlbWFfdmVyc2lvbiI6IjEifQ==\"}}]}}",
            (i / 256) % 256,
            i % 256
        ));
        i += 1;
    }
    s.push_str("\n  ]\n}\n");
    s.into_bytes()
}

fn count_leaves(n: &gitstate_sops::Node) -> usize {
    use gitstate_sops::Node;
    match n {
        Node::Object(f) => f.iter().map(|(_, v)| count_leaves(v)).sum(),
        Node::Array(a) => a.iter().map(count_leaves).sum(),
        _ => 1,
    }
}

fn best(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| a != "--compact")
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() { vec![1, 10] } else { sizes };
    let key = AgeKey::identity(SECRET)?;
    let keys = KeySource::new().with(Box::new(AgeKey::identity(SECRET)?));
    let structure = EncryptOptions {
        rules: Rules {
            encrypted_regex: Some("^(value|attributes|sensitive_attributes|private)$".into()),
            ..Rules::default()
        },
        ..EncryptOptions::default()
    };
    let compact = std::env::args().any(|a| a == "--compact");
    println!("| state | leaves | mode | seal (encrypt) | open (decrypt + MAC) | sealed size |");
    println!("|---|---|---|---|---|---|");
    for mb in sizes {
        let plain = if compact {
            compact_state(mb * 1_000_000 / 750)
        } else {
            state(mb)
        };
        let leaves = count_leaves(&gitstate_sops::Node::parse(&plain)?);
        for (mode, opts) in [
            ("all", EncryptOptions::default()),
            ("structure", structure.clone()),
        ] {
            let mut sealed = Vec::new();
            let runs = if mb >= 50 { 2 } else { 5 };
            let seal = best(runs, || {
                sealed = encrypt(&plain, &[&key as &dyn MasterKey], &opts).expect("encrypt");
            });
            let open = best(runs, || {
                Document::decrypt(&sealed, &keys).expect("decrypt");
            });
            println!(
                "| {:.1} MB{} | {leaves} | {mode} | {:.0} ms | {:.0} ms | {:.1} MB |",
                plain.len() as f64 / 1e6,
                if compact { " compact" } else { "" },
                seal.as_secs_f64() * 1e3,
                open.as_secs_f64() * 1e3,
                sealed.len() as f64 / 1e6
            );
        }
    }
    Ok(())
}
