//! Seal/open throughput of Terraform-like states (not a test).
//!
//! `cargo run --release -p gitstate-sops --example bench [MB ...]` (default: 1 10).

use std::time::{Duration, Instant};

use gitstate_sops::{encrypt, AgeKey, Document, EncryptOptions, KeySource, MasterKey, Rules};

const SECRET: &str = "AGE-SECRET-KEY-1GFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPQ4EGAEX";

/// A state of about `mb` megabytes: many resources with typical attribute shapes.
fn state(mb: usize) -> Vec<u8> {
    let mut s = String::from(
        "{\n  \"version\": 4,\n  \"terraform_version\": \"1.9.8\",\n  \"serial\": 42,\n  \"lineage\": \"3f1e0b9a-7c2d-4e5f-8a9b-0c1d2e3f4a5b\",\n  \"outputs\": {\"db_password\": {\"value\": \"hunter2\", \"type\": \"string\", \"sensitive\": true}},\n  \"resources\": [\n",
    );
    let mut i = 0usize;
    while s.len() < mb * 1_000_000 {
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
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() { vec![1, 10] } else { sizes };
    if let Ok(p) = std::env::var("BENCH_DUMP") {
        std::fs::write(p, state(sizes[0]))?;
        return Ok(());
    }
    let key = AgeKey::identity(SECRET)?;
    let keys = KeySource::new().with(Box::new(AgeKey::identity(SECRET)?));
    let structure = EncryptOptions {
        rules: Rules {
            encrypted_regex: Some("^(value|attributes|sensitive_attributes|private)$".into()),
            ..Rules::default()
        },
        ..EncryptOptions::default()
    };
    println!("| state | mode | seal (encrypt) | open (decrypt + MAC) | sealed size |");
    println!("|---|---|---|---|---|");
    for mb in sizes {
        let plain = state(mb);
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
                "| {:.1} MB | {mode} | {:.0} ms | {:.0} ms | {:.1} MB |",
                plain.len() as f64 / 1e6,
                seal.as_secs_f64() * 1e3,
                open.as_secs_f64() * 1e3,
                sealed.len() as f64 / 1e6
            );
        }
    }
    Ok(())
}
