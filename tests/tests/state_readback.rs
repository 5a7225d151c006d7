//! What gitstate accepts as a state, real Terraform reads back; what it refuses, real Terraform
//! cannot read. `gitstate serve` on a smart-HTTP remote (lighttpd + `git http-backend`, basic
//! auth), random states from a seeded generator (each test prints its seed;
//! `GITSTATE_READBACK_SEED=N` replays it):
//!
//! - **accepted**: 20 v4 states whose header values vary over what Terraform reads (`serial`
//!   absent, null, 0, small, up to 18446744073709551615; `lineage` absent, null, "", a uuid;
//!   `terraform_version` absent, "", "1.0.3", "v0.15.0", "1.2.3-beta.1+meta", "1.15.5"), keys in
//!   Go's spellings (`Serial`, `ſerial`, `LINEAGE`, `Terraform_Version`, `chec\u{212A}_results`,
//!   …) in random order, `outputs`, `resources` and `check_results` absent, null, empty or
//!   holding outputs and a `null_resource`. Each is POSTed to its own path (200, GET and `main`
//!   hold it byte for byte); then for Terraform 1.0.3 and 1.15.5, a working directory whose
//!   `http` backend points at it: `terraform init`, `terraform state pull` prints the posted
//!   serial, lineage (absent = 0 and "", as Terraform reads them), outputs and resource id, and
//!   `terraform plan -detailed-exitcode` against a configuration that declares the same
//!   resource and outputs exits 0 ("No changes.") when the state holds the resource, 2 ("1 to
//!   add") when it does not: Terraform understood the state, not only parsed it.
//! - **refused**: 13 random valid states, each with one value made wrong (serial "one", -1, 1.5,
//!   18446744073709551616; lineage 5; outputs []; resources {}; version 5 and "4";
//!   terraform_version "banana"; `"Serial":"x"`; a resource element 5; an output whose
//!   `sensitive` is "yes"). POST → 400 with a JSON `error` sentence naming the field, GET of the
//!   path still 204 and `git ls-remote` unchanged. The same body written as `terraform.tfstate`
//!   (local state, no backend) makes `terraform state list` fail with "Failed to load state" in
//!   1.0.3 and 1.15.5, while its twin, where only that one value is right again, is accepted by
//!   gitstate (200) and listed by both Terraforms. (`state list`, not `show`: `show` needs the
//!   provider's schema for a state with resources, so its failure would not be about the state.)
//!
//! Needs `scripts/install-test-deps.sh` and a built `gitstate` binary (see gitstate_tests docs).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use gitstate_tests::*;

const GIT_USER: &str = "readback-bot";
const GIT_PASS: &str = "r3adb4ck-pass";
const ACCEPTED: usize = 20;
const VERSIONS: [&str; 2] = ["1.0.3", "1.15.5"];
/// Terraform runs at once (each one mostly waits on gitstate and the git server).
const WORKERS: usize = 4;
const NULL_PROVIDER: &str = "provider[\"registry.terraform.io/hashicorp/null\"]";

// ------------------------------------------------------------------------------------------------
// The generator

/// xorshift64*: small, seeded, the same sequence for a seed on every machine.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
    fn hex(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| char::from(b"0123456789abcdef"[self.below(16)]))
            .collect()
    }
}

/// `GITSTATE_READBACK_SEED` (decimal or 0x-hex), else one from the clock; printed either way.
fn seed(test: &str) -> u64 {
    let seed = match std::env::var("GITSTATE_READBACK_SEED") {
        Ok(text) => {
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("GITSTATE_READBACK_SEED={text:?}: {e}"))
        }
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock after 1970");
            now.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
        }
    };
    println!("{test}: GITSTATE_READBACK_SEED={seed} (set it to replay this test's states)");
    seed
}

/// The spellings of each top-level key that Go's encoding/json (and so Terraform) matches to the
/// field: any case, `ſ` (U+017F) for `s`, `K` (U+212A) for `k`. The first is Terraform's own.
fn spellings(field: &str) -> &'static [&'static str] {
    match field {
        "version" => &["version", "Version", "VERSION", "ver\u{17f}ion"],
        "serial" => &["serial", "Serial", "SERIAL", "\u{17f}erial", "\u{17f}ERIAL"],
        "lineage" => &["lineage", "LINEAGE", "Lineage"],
        "terraform_version" => &[
            "terraform_version",
            "Terraform_Version",
            "TERRAFORM_VERSION",
        ],
        "outputs" => &["outputs", "Outputs", "output\u{17f}"],
        "resources" => &["resources", "RESOURCES", "re\u{17f}ource\u{17f}"],
        "check_results" => &[
            "check_results",
            "CHECK_RESULTS",
            "chec\u{212a}_results",
            "Chec\u{212a}_Results",
        ],
        other => panic!("no spellings for {other}"),
    }
}

/// The field a key names for Go's encoding/json: lower case, `ſ` → s, `K` → k.
fn go_field(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '\u{17f}' => 's',
            '\u{212a}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Terraform's spelling half the time, another one Go matches the other half.
fn spell(rng: &mut Rng, field: &str) -> String {
    let all = spellings(field);
    if rng.coin() {
        all[0].to_string()
    } else {
        rng.pick(&all[1..]).to_string()
    }
}

/// A root module output as the generator wrote it.
#[derive(Clone, Debug)]
struct Output {
    name: String,
    /// The value as JSON (and as HCL: a lowercase string or a whole number).
    value: String,
    ty: &'static str,
    /// `Some` when the state has a `sensitive` flag.
    sensitive: Option<bool>,
}

impl Output {
    fn json(&self) -> String {
        let mut s = format!("{{\"value\":{},\"type\":\"{}\"", self.value, self.ty);
        if let Some(flag) = self.sensitive {
            s.push_str(&format!(",\"sensitive\":{flag}"));
        }
        s.push('}');
        s
    }
}

fn outputs_json(outputs: &[Output]) -> String {
    let entries: Vec<String> = outputs
        .iter()
        .map(|o| format!("\"{}\":{}", o.name, o.json()))
        .collect();
    format!("{{{}}}", entries.join(","))
}

fn null_resource_json(id: &str) -> String {
    format!(
        "{{\"mode\":\"managed\",\"type\":\"null_resource\",\"name\":\"r\",\"provider\":{},\
         \"instances\":[{{\"schema_version\":0,\"attributes\":{{\"id\":\"{id}\",\"triggers\":null}}}}]}}",
        serde_json::to_string(NULL_PROVIDER).unwrap()
    )
}

/// A state the generator made, and what Terraform reads in it.
#[derive(Clone, Debug)]
struct Generated {
    /// Top-level (key, JSON value) in body order; no field twice.
    fields: Vec<(String, String)>,
    /// As Terraform reads it: absent and null are 0.
    serial: u64,
    /// As Terraform reads it: absent and null are "".
    lineage: String,
    outputs: Vec<Output>,
    /// The `null_resource.r` id when the state holds it.
    resource_id: Option<String>,
}

impl Generated {
    fn body(&self) -> String {
        render(&self.fields)
    }
}

fn render(fields: &[(String, String)]) -> String {
    let members: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
        .collect();
    format!("{{{}}}", members.join(","))
}

/// A random v4 state gitstate must accept and Terraform must read.
fn generate(rng: &mut Rng) -> Generated {
    let mut fields = vec![(spell(rng, "version"), "4".to_string())];

    let serial = match rng.below(6) {
        0 => None,
        1 => Some(("null".to_string(), 0)),
        2 => Some(("0".to_string(), 0)),
        3 => {
            let n = 1 + rng.next() % 1000;
            Some((n.to_string(), n))
        }
        4 => Some((u64::MAX.to_string(), u64::MAX)),
        // Above 2^63 and past a float's 53 bits: read as the exact whole number or not at all.
        _ => {
            let n = rng.next() | 1 << 63;
            Some((n.to_string(), n))
        }
    };
    let serial = match serial {
        Some((json, n)) => {
            fields.push((spell(rng, "serial"), json));
            n
        }
        None => 0,
    };

    let lineage = match rng.below(4) {
        0 => String::new(),
        1 => {
            fields.push((spell(rng, "lineage"), "null".into()));
            String::new()
        }
        2 => {
            fields.push((spell(rng, "lineage"), "\"\"".into()));
            String::new()
        }
        _ => {
            let uuid = format!(
                "{}-{}-{}-{}-{}",
                rng.hex(8),
                rng.hex(4),
                rng.hex(4),
                rng.hex(4),
                rng.hex(12)
            );
            fields.push((spell(rng, "lineage"), format!("\"{uuid}\"")));
            uuid
        }
    };

    let tf_version = *rng.pick(&[
        None,
        Some("null"),
        Some("\"\""),
        Some("\"1.0.3\""),
        Some("\"v0.15.0\""),
        Some("\"1.2.3-beta.1+meta\""),
        Some("\"1.15.5\""),
    ]);
    if let Some(json) = tf_version {
        fields.push((spell(rng, "terraform_version"), json.to_string()));
    }

    let mut outputs = Vec::new();
    match rng.below(4) {
        0 => {}
        1 => fields.push((spell(rng, "outputs"), "null".into())),
        2 => fields.push((spell(rng, "outputs"), "{}".into())),
        _ => {
            for i in 0..1 + rng.below(2) {
                let (value, ty) = if rng.coin() {
                    (
                        format!("\"{}\"", noise(rng.next(), 6, b"abcdefghij")),
                        "string",
                    )
                } else {
                    ((rng.next() % 1000).to_string(), "number")
                };
                let sensitive = *rng.pick(&[None, Some(false), Some(true)]);
                outputs.push(Output {
                    name: format!("o{i}"),
                    value,
                    ty,
                    sensitive,
                });
            }
            fields.push((spell(rng, "outputs"), outputs_json(&outputs)));
        }
    }

    let mut resource_id = None;
    match rng.below(4) {
        0 => {}
        1 => fields.push((spell(rng, "resources"), "null".into())),
        2 => fields.push((spell(rng, "resources"), "[]".into())),
        _ => {
            let id = (rng.next() >> 1).to_string();
            fields.push((
                spell(rng, "resources"),
                format!("[{}]", null_resource_json(&id)),
            ));
            resource_id = Some(id);
        }
    }

    match rng.below(3) {
        0 => {}
        1 => fields.push((spell(rng, "check_results"), "null".into())),
        _ => fields.push((spell(rng, "check_results"), "[]".into())),
    }

    rng.shuffle(&mut fields);
    Generated {
        fields,
        serial,
        lineage,
        outputs,
        resource_id,
    }
}

// ------------------------------------------------------------------------------------------------
// The server

/// `gitstate serve` on an empty bare repository behind lighttpd + `git http-backend` with basic
/// auth, and the URL plain git reads it with.
struct Remote {
    server: Gitstate,
    git_dir: std::path::PathBuf,
    remote_url: String,
    _http: GitHttpServer,
    _cwd: TempDir,
    _repos: TempDir,
}

impl Remote {
    fn start() -> Remote {
        let cwd = tempfile::Builder::new()
            .prefix("gitstate-cwd")
            .tempdir()
            .unwrap();
        let repos = tempfile::Builder::new()
            .prefix("gitstate-repos")
            .tempdir()
            .unwrap();
        let git_dir = bare_repo(repos.path(), "states");
        let http = GitHttpServer::start(repos.path(), GIT_USER, GIT_PASS);
        let server = Gitstate::start(
            &["--repository", &format!("default={}", http.url("states"))],
            &[("GIT_USERNAME", GIT_USER), ("GIT_PASSWORD", GIT_PASS)],
            cwd.path(),
        );
        let remote_url = http.url_with_credentials("states");
        Remote {
            server,
            git_dir,
            remote_url,
            _http: http,
            _cwd: cwd,
            _repos: repos,
        }
    }

    fn url(&self, path: &str) -> String {
        self.server.state_url("default", path)
    }

    fn ctx(&self) -> String {
        format!("\n--- gitstate log\n{}", self.server.log())
    }
}

/// Runs `run` on every job with `WORKERS` threads; returns the panic message of each job that
/// failed, with its index (the others go on).
fn run_parallel<J: Sync>(jobs: &[J], run: impl Fn(&J) + Sync) -> Vec<(usize, String)> {
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = jobs.get(i) else { break };
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(job))) {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "(no message)".into());
                    failures.lock().unwrap().push((i, message));
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort_by_key(|(i, _)| *i);
    failures
}

// ------------------------------------------------------------------------------------------------
// Accepted states are read back

/// `main.tf`: the `http` backend at `url`, `null_resource.r` and the state's outputs with their
/// values, so a plan has nothing to do but create `r` when the state lacks it.
fn write_config(dir: &Path, url: &str, state: &Generated) {
    let mut tf = HttpBackend::new(url).hcl();
    tf.push_str("\nresource \"null_resource\" \"r\" {}\n");
    for o in &state.outputs {
        tf.push_str(&format!(
            "\noutput \"{}\" {{\n  value = {}\n",
            o.name, o.value
        ));
        if o.sensitive == Some(true) {
            tf.push_str("  sensitive = true\n");
        }
        tf.push_str("}\n");
    }
    std::fs::write(dir.join("main.tf"), tf).expect("write main.tf");
}

/// init, state pull, plan with Terraform `version` against the state at `url`.
fn read_back(tf: &Terraform, url: &str, state: &Generated, tag: &str) {
    let body = state.body();
    let work = tempfile::Builder::new()
        .prefix("gitstate-readback")
        .tempdir()
        .unwrap();
    let dir = work.path();
    write_config(dir, url, state);
    tf.init(dir)
        .expect_code(0, &format!("{tag}: terraform init; the state is {body}"));

    let pull = tf.run(dir, &["state", "pull"]);
    pull.expect_code(
        0,
        &format!("{tag}: terraform state pull; the state is {body}"),
    );
    let pulled: serde_json::Value = serde_json::from_str(&pull.stdout).unwrap_or_else(|e| {
        panic!(
            "{tag}: state pull printed no JSON ({e}):\n{}\nthe state is {body}",
            pull.stdout
        )
    });
    assert_eq!(
        pulled["serial"].as_u64(),
        Some(state.serial),
        "{tag}: the serial Terraform read; posted {body}, pulled {pulled}"
    );
    assert_eq!(
        pulled["lineage"].as_str(),
        Some(state.lineage.as_str()),
        "{tag}: the lineage Terraform read; posted {body}, pulled {pulled}"
    );
    let mut expected_outputs = serde_json::Map::new();
    for o in &state.outputs {
        expected_outputs.insert(
            o.name.clone(),
            serde_json::json!({
                "value": serde_json::from_str::<serde_json::Value>(&o.value).unwrap(),
                "sensitive": o.sensitive.unwrap_or(false),
            }),
        );
    }
    let mut pulled_outputs = serde_json::Map::new();
    for (name, o) in pulled["outputs"].as_object().into_iter().flatten() {
        pulled_outputs.insert(
            name.clone(),
            serde_json::json!({
                "value": o["value"],
                "sensitive": o["sensitive"].as_bool().unwrap_or(false),
            }),
        );
    }
    assert_eq!(
        pulled_outputs, expected_outputs,
        "{tag}: the outputs Terraform read; posted {body}, pulled {pulled}"
    );
    let pulled_ids: Vec<String> = pulled["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            format!(
                "{}.{}={}",
                r["type"].as_str().unwrap_or("?"),
                r["name"].as_str().unwrap_or("?"),
                r["instances"][0]["attributes"]["id"]
                    .as_str()
                    .unwrap_or("?")
            )
        })
        .collect();
    let expected_ids: Vec<String> = state
        .resource_id
        .iter()
        .map(|id| format!("null_resource.r={id}"))
        .collect();
    assert_eq!(
        pulled_ids, expected_ids,
        "{tag}: the resources Terraform read; posted {body}, pulled {pulled}"
    );

    let plan = tf.plan(dir);
    let context = format!("{tag}: terraform plan -detailed-exitcode; the state is {body}");
    if let Some(id) = &state.resource_id {
        plan.expect_code(0, &context);
        // Refreshed under the id the state holds, then nothing to do.
        let refreshed = format!("null_resource.r: Refreshing state... [id={id}]");
        assert!(
            plan.stdout.contains(&refreshed) && plan.stdout.contains("No changes."),
            "{context}\n{}",
            plan.stdout
        );
    } else {
        plan.expect_code(2, &context);
        assert!(
            plan.stdout.contains("1 to add, 0 to change, 0 to destroy"),
            "{context}\n{}",
            plan.stdout
        );
    }
}

#[test]
fn accepted_states_are_read_back_by_terraform_1_0_3_and_1_15_5() {
    let started = std::time::Instant::now();
    let mut rng = Rng::new(seed("accepted") ^ 0xACCE_97ED);
    let terraforms: Vec<Terraform> = VERSIONS.iter().map(|v| Terraform::installed(v)).collect();
    let remote = Remote::start();

    let states: Vec<Generated> = (0..ACCEPTED).map(|_| generate(&mut rng)).collect();
    for (n, state) in states.iter().enumerate() {
        let path = format!("readback/{n}.tfstate");
        let url = remote.url(&path);
        let body = state.body();
        println!("{path}: {body}");
        let (status, answer) = http("POST", &url, Some(&body), None).expect("POST");
        assert_eq!(
            status,
            200,
            "POST {path} of a state Terraform reads: {answer}\n{body}{}",
            remote.ctx()
        );
        let (status, served) = http("GET", &url, None, None).expect("GET");
        assert_eq!(
            (status, served.as_str()),
            (200, body.as_str()),
            "GET {path} serves what was posted{}",
            remote.ctx()
        );
        let stored = git_show(&remote.git_dir, "main", &path)
            .unwrap_or_else(|| panic!("main:{path} is missing on the remote{}", remote.ctx()));
        assert_eq!(
            String::from_utf8_lossy(&stored),
            body,
            "main:{path} holds the posted body"
        );
    }
    println!("{} states posted in {:?}", states.len(), started.elapsed());

    // One job per state, its Terraform versions one after the other: a plan takes the state's
    // lock, and two at once on one state would (rightly) get a 423.
    let jobs: Vec<usize> = (0..states.len()).collect();
    let failures = run_parallel(&jobs, |&n| {
        for tf in &terraforms {
            let tag = format!("readback/{n}.tfstate with Terraform {}", tf.version);
            read_back(
                tf,
                &remote.url(&format!("readback/{n}.tfstate")),
                &states[n],
                &tag,
            );
            println!("{tag}: init, state pull, plan ok");
        }
    });
    let report: Vec<String> = failures
        .iter()
        .map(|(i, message)| format!("readback/{}.tfstate: {message}", jobs[*i]))
        .collect();
    assert!(
        report.is_empty(),
        "the read-back of {} of {} states failed:\n\n{}{}",
        report.len(),
        states.len(),
        report.join("\n\n"),
        remote.ctx()
    );
    println!(
        "{} states × {} Terraform versions read back in {:?}",
        states.len(),
        terraforms.len(),
        started.elapsed()
    );
}

// ------------------------------------------------------------------------------------------------
// Refused states are unreadable

/// One wrong value: at `field` (Terraform's name) spelled `key`, the `bad` JSON value; `good` is
/// the value that makes the twin right; `named` is what gitstate's sentence must contain.
struct Defect {
    field: &'static str,
    key: &'static str,
    bad: String,
    good: String,
    named: String,
    /// Terraform "reads" the body but silently drops a resource (a provider it cannot read):
    /// the lost resource, not a failure, is what shows it.
    drops: bool,
}

/// The defects, each built around a random valid state (`base` may lend its resources).
fn defects(rng: &mut Rng, base: &Generated) -> Vec<Defect> {
    let d = |field: &'static str, key: &'static str, bad: &str, good: &str| Defect {
        field,
        key,
        bad: bad.into(),
        good: good.into(),
        named: format!("\"{field}\""),
        drops: false,
    };
    let mut all = vec![
        d("serial", "serial", "\"one\"", "1"),
        d("serial", "serial", "-1", "1"),
        d("serial", "serial", "1.5", "2"),
        d(
            "serial",
            "serial",
            "18446744073709551616",
            "18446744073709551615",
        ),
        d("lineage", "lineage", "5", "\"5\""),
        d("outputs", "outputs", "[]", "{}"),
        d("resources", "resources", "{}", "[]"),
        d("version", "version", "5", "4"),
        d("version", "version", "\"4\"", "4"),
        d(
            "terraform_version",
            "terraform_version",
            "\"banana\"",
            "\"1.0.3\"",
        ),
        d("serial", "Serial", "\"x\"", "7"),
    ];
    // A resource element that is a number, before or after a null_resource when there is one.
    let good: Vec<String> = base
        .resource_id
        .iter()
        .map(|id| null_resource_json(id))
        .collect();
    let at = rng.below(good.len() + 1);
    let mut bad = good.clone();
    bad.insert(at, "5".into());
    all.push(Defect {
        field: "resources",
        key: "resources",
        bad: format!("[{}]", bad.join(",")),
        good: format!("[{}]", good.join(",")),
        named: format!("\"resources[{at}]"),
        drops: false,
    });
    let output = |bad: &str, good: &str, named: &str| Defect {
        field: "outputs",
        key: "outputs",
        bad: bad.into(),
        good: good.into(),
        named: named.into(),
        drops: false,
    };
    all.push(output(
        r#"{"o":{"value":1,"type":"number","sensitive":"yes"}}"#,
        r#"{"o":{"value":1,"type":"number","sensitive":true}}"#,
        "outputs[\"o\"].sensitive",
    ));
    // What Terraform checks after decoding (prepareStateV4).
    all.push(output(
        r#"{"o":{"value":1}}"#,
        r#"{"o":{"value":1,"type":"number"}}"#,
        "outputs[\"o\"].type",
    ));
    all.push(output(
        r#"{"o":{"value":"x","type":"number"}}"#,
        r#"{"o":{"value":"7","type":"number"}}"#,
        "outputs[\"o\"].value",
    ));
    all.push(output(
        r#"{"o":{"value":{"a":1},"type":["object",{"a":"number"},["b"]]}}"#,
        r#"{"o":{"value":{"a":1},"type":["object",{"a":"number"},["a"]]}}"#,
        "outputs[\"o\"].type",
    ));
    for (path, bad, good, drops) in [
        ("mode", r#""bogus""#, r#""managed""#, false),
        ("module", r#""module.a.b""#, r#""module.a[\"b\"]""#, false),
        ("provider", r#""""#, &format!("{NULL_PROVIDER:?}"), true),
        (
            "provider",
            r#""provider[\"ns/terraform-null\"]""#,
            &format!("{NULL_PROVIDER:?}"),
            true,
        ),
        ("instances[0].status", r#""gone""#, r#""tainted""#, false),
        ("instances[0].deposed", r#""abc""#, r#""0000000a""#, false),
        ("instances[0].index_key", "true", r#""k""#, false),
        (
            "instances[0].dependencies",
            r#"["null_resource.x[0]"]"#,
            r#"["null_resource.x"]"#,
            false,
        ),
        (
            "instances[0].sensitive_attributes",
            r#"[[{"type":"index","value":0}]]"#,
            r#"[[{"type":"get_attr","value":"triggers"}]]"#,
            false,
        ),
    ] {
        all.push(Defect {
            field: "resources",
            key: "resources",
            bad: resource_with(path, bad),
            good: resource_with(path, good),
            named: format!("\"resources[0].{}", path.split('.').next().unwrap_or(path)),
            drops,
        });
    }
    // The same instance twice.
    let twice = resource_with(
        "instances",
        r#"[{"schema_version":0},{"schema_version":0}]"#,
    );
    all.push(Defect {
        field: "resources",
        key: "resources",
        bad: twice,
        good: resource_with(
            "instances",
            r#"[{"schema_version":0},{"schema_version":0,"deposed":"00000001"}]"#,
        ),
        named: "\"resources[0].instances[1]\"".into(),
        drops: false,
    });
    all
}

/// `resources` with one null_resource whose member at `path` (`name` or `instances[0].name`)
/// is the JSON `value`.
fn resource_with(path: &str, value: &str) -> String {
    let mut resource: serde_json::Value = serde_json::from_str(&format!(
        r#"{{"mode":"managed","type":"null_resource","name":"r","provider":{NULL_PROVIDER:?},"instances":[{{"schema_version":0,"attributes":{{"id":"1","triggers":null}}}}]}}"#
    ))
    .expect("JSON");
    let value: serde_json::Value = serde_json::from_str(value).expect("a JSON value");
    match path.strip_prefix("instances[0].") {
        Some(member) => resource["instances"][0][member] = value,
        None => resource[path] = value,
    }
    format!("[{resource}]")
}

/// `base` without any spelling of `defect.field`, and `defect.key: value` at a random place.
fn with_value(base: &Generated, defect: &Defect, value: &str, at: usize) -> String {
    let mut fields: Vec<(String, String)> = base
        .fields
        .iter()
        .filter(|(k, _)| go_field(k) != defect.field)
        .cloned()
        .collect();
    let at = at % (fields.len() + 1);
    fields.insert(at, (defect.key.to_string(), value.to_string()));
    render(&fields)
}

/// The resource instances of a body as `terraform state list` prints them: one line per instance
/// (a deposed object is not one), with its module and key.
fn listed(body: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(body).expect("the twin is JSON");
    let resources = v
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| go_field(k) == "resources")
        .map(|(_, r)| r.clone())
        .unwrap_or_default();
    let mut lines = Vec::new();
    for r in resources.as_array().into_iter().flatten() {
        let module = match r["module"].as_str() {
            Some(module) if !module.is_empty() => format!("{module}."),
            _ => String::new(),
        };
        let address = format!(
            "{module}{}.{}",
            r["type"].as_str().unwrap(),
            r["name"].as_str().unwrap()
        );
        for instance in r["instances"].as_array().into_iter().flatten() {
            let key = match &instance["index_key"] {
                serde_json::Value::Number(n) => format!("[{n}]"),
                serde_json::Value::String(k) => {
                    format!("[{}]", serde_json::Value::String(k.clone()))
                }
                _ => String::new(),
            };
            let line = format!("{address}{key}");
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    lines
}

/// `terraform state list` on `body` as the local state of an empty directory (no backend).
fn state_list(tf: &Terraform, body: &str) -> TfOutput {
    let work = tempfile::Builder::new()
        .prefix("gitstate-localstate")
        .tempdir()
        .unwrap();
    std::fs::write(work.path().join("terraform.tfstate"), body).expect("write terraform.tfstate");
    tf.run(work.path(), &["state", "list", "-no-color"])
}

#[test]
fn refused_states_are_unreadable_by_terraform_1_0_3_and_1_15_5() {
    let mut rng = Rng::new(seed("refused") ^ 0x04EF_05ED);
    let terraforms: Vec<Terraform> = VERSIONS.iter().map(|v| Terraform::installed(v)).collect();
    let remote = Remote::start();

    // A first state, so the remote has a main branch whose tip must not move.
    let first = generate(&mut rng).body();
    let (status, answer) = http(
        "POST",
        &remote.url("refused/first.tfstate"),
        Some(&first),
        None,
    )
    .expect("POST");
    assert_eq!(
        status,
        200,
        "POST of a valid state: {answer}\n{first}{}",
        remote.ctx()
    );

    // Each defect around its own random base state.
    let mut cases: Vec<(Generated, Defect, usize)> = Vec::new();
    loop {
        let base = generate(&mut rng);
        let mut all = defects(&mut rng, &base);
        if cases.len() == all.len() {
            break;
        }
        let defect = all.swap_remove(cases.len());
        let at = rng.below(usize::MAX);
        cases.push((base, defect, at));
    }

    let mut findings = Vec::new();
    for (n, (base, defect, at)) in cases.iter().enumerate() {
        let bad = with_value(base, defect, &defect.bad, *at);
        let twin = with_value(base, defect, &defect.good, *at);
        let path = format!("refused/{n}.tfstate");
        let url = remote.url(&path);
        println!("{path}: refused {bad}\n{path}: its twin {twin}");

        // gitstate: 400 naming the field, nothing written.
        let before = ls_remote(&remote.remote_url);
        let (status, answer) = http("POST", &url, Some(&bad), None).expect("POST");
        assert_eq!(
            status,
            400,
            "POST {path} of {bad}: {answer}{}",
            remote.ctx()
        );
        let sentence = serde_json::from_str::<serde_json::Value>(&answer)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("the 400 is not a JSON {{\"error\": …}}: {answer}"));
        assert!(
            sentence.contains(&defect.named),
            "the error names {}: {sentence}\nbody {bad}",
            defect.named
        );
        assert!(!sentence.contains('\n'), "one sentence: {sentence}");
        assert_eq!(
            http("GET", &url, None, None).expect("GET").0,
            204,
            "GET {path} after the refused POST: no state there{}",
            remote.ctx()
        );
        assert_eq!(
            ls_remote(&remote.remote_url),
            before,
            "a refused POST leaves every ref of the remote as it was ({bad}){}",
            remote.ctx()
        );

        // The twin, one value apart, is a state gitstate keeps.
        let (status, answer) = http("POST", &url, Some(&twin), None).expect("POST");
        assert_eq!(
            status,
            200,
            "POST {path} of the twin {twin}: {answer}{}",
            remote.ctx()
        );
        assert_ne!(
            ls_remote(&remote.remote_url),
            before,
            "the twin is committed"
        );

        // Terraform: the refused body cannot be read, the twin can.
        for tf in &terraforms {
            let out = state_list(tf, &twin);
            out.expect_code(
                0,
                &format!("Terraform {} state list of the twin {twin}", tf.version),
            );
            let names: Vec<&str> = out.stdout.lines().filter(|l| !l.is_empty()).collect();
            assert_eq!(
                names,
                listed(&twin),
                "Terraform {} lists the twin {twin}",
                tf.version
            );

            let out = state_list(tf, &bad);
            if defect.drops {
                // Read, with the resource lost: what gitstate keeps from being committed.
                let names: Vec<&str> = out.stdout.lines().filter(|l| !l.is_empty()).collect();
                assert!(
                    out.code != Some(0) || names != listed(&twin),
                    "Terraform {} kept every resource of {bad}:\n{}",
                    tf.version,
                    out.combined()
                );
                println!(
                    "{path}: Terraform {}: listed {names:?} (the twin: {:?})",
                    tf.version,
                    listed(&twin)
                );
                continue;
            }
            if out.code == Some(0) {
                findings.push(format!(
                    "Terraform {} READ a body gitstate refuses ({sentence}):\n  body: {bad}\n  \
                     `terraform state list` exited 0:\n{}",
                    tf.version,
                    out.combined()
                ));
                continue;
            }
            assert!(
                out.combined().contains("Failed to load state")
                    // go-cty panics on an optional attribute the type does not declare.
                    || out.combined().contains("panic:"),
                "Terraform {} fails on {bad} for another reason than the state:\n{}",
                tf.version,
                out.combined()
            );
            println!(
                "{path}: Terraform {}: {}",
                tf.version,
                out.combined().trim().replace('\n', " ")
            );
        }
    }
    assert!(
        findings.is_empty(),
        "gitstate refused states Terraform reads:\n{}",
        findings.join("\n")
    );
}
