//! How fast `gitstate_statefile` reads a state body, for `scripts/bench state-check`:
//! Terraform-shaped states of N `aws_instance` resources (the arguments; default 1, 2000, 40000),
//! each read enough times for about 200 MB; prints one line per size: bytes, repetitions, the
//! median ms per `read` (the check alone) and MB/s, and the median ms per `check` with the
//! catalog's facts (a POST's one pass when there is a catalog).

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
        let median = read_median(repetitions, || {
            gitstate_statefile::read(&body).expect("a state");
        });
        let bytes = bytes::Bytes::from(body.clone());
        let with_facts = read_median(repetitions, || {
            gitstate_statefile::check(bytes.clone(), true).expect("a state");
        });
        println!(
            "{} {} {:.3} {:.0} {:.3}",
            body.len(),
            repetitions,
            median * 1e3,
            body.len() as f64 / median / 1e6,
            with_facts * 1e3
        );
    }
}

/// The median seconds of `repetitions` runs of `read`.
fn read_median(repetitions: usize, mut read: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..repetitions)
        .map(|_| {
            let started = Instant::now();
            read();
            started.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
