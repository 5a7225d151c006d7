//! How fast `gitstate_core::statefile::read` checks a state body, for `scripts/bench state-check`:
//! Terraform-shaped states of N `aws_instance` resources (the arguments; default 1, 2000, 40000),
//! each read enough times for about 200 MB; prints one line per size: bytes, repetitions, the
//! median ms per read and MB/s.

use std::time::Instant;

fn state(resources: usize) -> Vec<u8> {
    let resources: Vec<serde_json::Value> = (0..resources)
        .map(|i| {
            serde_json::json!({
                "mode": "managed", "type": "aws_instance", "name": format!("web{i}"),
                "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
                "instances": [{"schema_version": 1, "attributes": {
                    "id": format!("i-{i:017x}"), "ami": "ami-0abcdef1234567890",
                    "instance_type": "t3.micro", "tags": {"Name": "web", "team": "payments"},
                    "user_data": "x".repeat(200)},
                    "sensitive_attributes": [], "private": "eyJzY2hlbWFfdmVyc2lvbiI6IjEifQ=="}]
            })
        })
        .collect();
    serde_json::to_vec_pretty(&serde_json::json!({
        "version": 4, "terraform_version": "1.15.5", "serial": 1, "lineage": "l",
        "outputs": {}, "resources": resources,
    }))
    .expect("JSON")
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number of resources"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1, 2_000, 40_000]
    } else {
        sizes
    };
    for resources in sizes {
        let body = state(resources);
        let repetitions = (200_000_000 / body.len()).clamp(5, 20_000);
        let mut times: Vec<f64> = (0..repetitions)
            .map(|_| {
                let started = Instant::now();
                gitstate_core::statefile::read(&body).expect("a state");
                started.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "{} {} {:.3} {:.0}",
            body.len(),
            repetitions,
            median * 1e3,
            body.len() as f64 / median / 1e6
        );
    }
}
