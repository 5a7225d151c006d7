//! The Lambda function locally: `cargo lambda watch` serves `gitstate-lambda` behind its Function
//! URL emulation, configured for pass-through credentials against a smart-HTTP git server; real
//! Terraform runs init/apply/plan through it, and a wrong password is refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gitstate_tests::{
    bare_repo, free_port, git, git_log_subjects, git_show, gitstate_run, http, refs_under,
    tools_dir, write_main_tf, GitHttpServer, HttpBackend, Terraform,
};

const USER: &str = "lambda-user";
const PASSWORD: &str = "lambda-pass-1";

/// `cargo lambda watch`, in its own session and process group so that dropping it stops the
/// function too.
struct Watch {
    child: std::process::Child,
    log: PathBuf,
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The whole process group (cargo lambda and the function it runs), and nothing else:
        // killpg with the group id `setsid` gave it, never a negative pid on a command line
        // (`kill -TERM -N` without `--` can be read as "every process").
        let Ok(group) = i32::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: getpgid only reads the process table.
        let is_own_group = group > 1 && unsafe { libc::getpgid(group) } == group;
        if !is_own_group {
            let _ = self.child.kill();
        } else {
            // SAFETY: killpg only sends a signal; `group` is our child's own process group.
            unsafe {
                libc::killpg(group, libc::SIGTERM);
            }
            std::thread::sleep(Duration::from_millis(300));
            unsafe {
                libc::killpg(group, libc::SIGKILL);
            }
        }
        let _ = self.child.wait();
    }
}

fn cargo_lambda_path() -> String {
    let venv = tools_dir().join("cargo-lambda-venv/bin");
    assert!(
        venv.join("cargo-lambda").exists(),
        "cargo-lambda is not installed in {}: run scripts/install-test-deps.sh",
        venv.display()
    );
    format!(
        "{}:{}",
        venv.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn start_watch(env_file: &Path, port: u16, log: PathBuf) -> Watch {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    // A session of its own (setsid): cargo lambda's watcher must not touch the test's terminal,
    // and its process group is then ours to stop.
    let child = Command::new("setsid")
        // The dev profile: the function as scripts/test.sh built it (the same artifacts, nothing
        // to compile here).
        .args(["cargo", "lambda", "watch", "--ignore-changes"])
        .args(["-A", "127.0.0.1", "-P", &port.to_string()])
        .args(["-p", "gitstate-lambda", "--env-file"])
        .arg(env_file)
        .current_dir(&workspace)
        .env("PATH", cargo_lambda_path())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("start cargo lambda watch");
    Watch { child, log }
}

/// The function under `cargo lambda watch` with the environment `env` (lines of an env file;
/// the cache and the log level added), once it answers: the watch and the function's base URL.
fn serve_function(dir: &Path, env: &str) -> (Watch, String) {
    let env_file = dir.join("lambda.env");
    let cache = dir.join("cache");
    std::fs::write(
        &env_file,
        format!(
            "{env}GITSTATE_CACHE_DIR=\"{}\"\nRUST_LOG=info\n",
            cache.display()
        ),
    )
    .expect("env file");
    let port = free_port();
    let mut watch = start_watch(&env_file, port, dir.join("watch.log"));
    let base = format!("http://127.0.0.1:{port}/lambda-url/gitstate-lambda");
    wait_until_served(&mut watch, &base);
    (watch, base)
}

/// Waits until the function under `watch` answers `/_/health` at `base` (the first invocation
/// starts it); panics with cargo lambda's log when it exits or takes ten minutes.
fn wait_until_served(watch: &mut Watch, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if let Ok((200, _)) = http("GET", &format!("{base}/_/health"), None, None) {
            return;
        }
        if let Ok(Some(status)) = watch.child.try_wait() {
            panic!(
                "cargo lambda watch exited with {status}; its log:\n{}",
                std::fs::read_to_string(&watch.log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "cargo lambda watch did not serve the function; its log:\n{}",
            std::fs::read_to_string(&watch.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn terraform_through_cargo_lambda_watch_in_passthrough_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repos = dir.path().join("repos");
    std::fs::create_dir_all(&repos).expect("repos");
    let repo = bare_repo(&repos, "states");
    let server = GitHttpServer::start(&repos, USER, PASSWORD);
    // The catalog on moto, as the SAM stack passes its table to the function.
    let moto = gitstate_tests::crypto::MotoServer::start();
    let aws: Vec<(String, String)> = moto.aws_env();
    let aws_refs: Vec<(&str, &str)> = aws.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let catalog = |args: &[&str]| {
        let mut all = vec!["catalog"];
        all.extend_from_slice(args);
        all.extend(["--catalog-table", "lambda-catalog"]);
        gitstate_run(dir.path(), &all, &aws_refs)
    };
    catalog(&["create-table"]).expect_code(0, "catalog create-table");
    let aws_lines: String = aws.iter().map(|(k, v)| format!("{k}=\"{v}\"\n")).collect();
    // The first invocation builds and starts the function.
    let (watch, base) = serve_function(
        dir.path(),
        &format!(
            "GITSTATE_REPOSITORY=\"default={}\"\nGITSTATE_AUTH_MODE=passthrough\nGITSTATE_MAX_STATE_BYTES=200000\nGITSTATE_CATALOG_TABLE=lambda-catalog\n{aws_lines}",
            server.url("states"),
        ),
    );

    let url = format!("{base}/state/default/lambda.tfstate");
    // A wrong password is refused by gitstate, and nothing reaches the repository.
    let (status, body) = http("GET", &url, None, Some((USER, "wrong"))).expect("get");
    assert_eq!(status, 401, "{body}");
    assert!(refs_under(&repo, "refs/").is_empty());

    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().expect("tempdir");
    write_main_tf(
        work.path(),
        &HttpBackend::new(&url).with_auth(USER, PASSWORD),
        2,
        "g1",
    );
    tf.init(work.path())
        .expect_code(0, "init through cargo lambda watch");
    tf.apply(work.path())
        .expect_code(0, "apply through cargo lambda watch");
    tf.plan(work.path()).expect_code(0, "plan shows no changes");
    let subjects = git_log_subjects(&repo, "main", "lambda.tfstate");
    assert!(!subjects.is_empty(), "apply wrote no commit");
    assert!(
        subjects
            .iter()
            .all(|s| s.starts_with("Update lambda.tfstate (serial ")),
        "{subjects:?}"
    );
    assert!(
        refs_under(&repo, "refs/heads/locks/").is_empty(),
        "a lock was left behind"
    );
    // The function recorded the apply in the catalog before answering (Lambda freezes it
    // afterwards): the entry is there at once, with the serial and commit git holds.
    let states = catalog(&["states", "--json"]);
    states.expect_code(0, "catalog states");
    let states: serde_json::Value = serde_json::from_str(&states.stdout).expect("json");
    let in_git = git_show(&repo, "main", "lambda.tfstate").expect("state in git");
    let serial =
        serde_json::from_slice::<serde_json::Value>(&in_git).expect("state")["serial"].clone();
    let tip = git(
        None,
        &[
            &format!("--git-dir={}", repo.display()),
            "rev-parse",
            "main",
        ],
    );
    assert_eq!(states[0]["path"], "lambda.tfstate", "{states}");
    assert_eq!(states[0]["serial"], serial, "{states}");
    assert_eq!(states[0]["commit"], tip.trim(), "{states}");
    assert!(states[0]["lock"].is_null(), "{states}");
    // In pass-through mode the catalog spans repositories the caller may not read: not served.
    let (status, body) = http(
        "GET",
        &format!("{base}/_/catalog/states"),
        None,
        Some((USER, PASSWORD)),
    )
    .expect("get");
    assert_eq!(status, 403, "{body}");
    // Over the configured maximum: 413, and the sentence says where large states go.
    let big = format!(
        r#"{{"version":4,"serial":99,"lineage":"big","outputs":{{"blob":{{"value":"{}","type":"string"}}}},"resources":[]}}"#,
        "x".repeat(300_000)
    );
    let (status, body) = http("POST", &url, Some(&big), Some((USER, PASSWORD))).expect("post");
    assert_eq!(status, 413, "{body}");
    assert!(
        body.contains("standalone server (gitstate serve)"),
        "{body}"
    );
    assert!(
        !git_log_subjects(&repo, "main", "lambda.tfstate")
            .iter()
            .any(|s| s.contains("serial 99")),
        "the oversized state was written"
    );
    let log = std::fs::read_to_string(&watch.log).unwrap_or_default();
    assert!(
        !log.contains(PASSWORD),
        "the password reached the function's log"
    );

    // The function's metrics: CloudWatch Embedded Metric Format documents on its output, one
    // per invocation, in the namespace `gitstate`, counting the apply's requests, lock and push.
    let documents: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|line| line.find("{\"_aws\"").map(|at| &line[at..]))
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect();
    assert!(
        !documents.is_empty(),
        "no EMF line in the function's output:\n{log}"
    );
    let total = |metric: &str, labels: &[(&str, &str)]| -> f64 {
        documents
            .iter()
            .filter(|d| labels.iter().all(|(k, v)| d[*k] == *v))
            .filter_map(|d| d[metric].as_f64())
            .sum()
    };
    for d in &documents {
        assert_eq!(
            d["_aws"]["CloudWatchMetrics"][0]["Namespace"], "gitstate",
            "{d}"
        );
    }
    assert!(
        total(
            "gitstate_requests_total",
            &[("operation", "LOCK"), ("status", "200")]
        ) >= 1.0,
        "no LOCK counted: {documents:?}"
    );
    assert!(
        total(
            "gitstate_requests_total",
            &[("operation", "POST"), ("status", "200")]
        ) >= 1.0,
        "no POST counted: {documents:?}"
    );
    assert!(
        total("gitstate_lock_acquisitions_total", &[]) >= 1.0,
        "no lock acquisition counted: {documents:?}"
    );
    assert!(
        total("gitstate_git_pushes_total", &[]) >= 1.0,
        "no push counted: {documents:?}"
    );
    assert!(
        !log.contains("lambda.tfstate\",\"_aws"),
        "a state path is a dimension"
    );
}

/// `sam build` runs `cargo lambda build --release`, which adds `profile.release.panic="abort"`
/// unless the workspace's release profile names a panic strategy itself (cargo-lambda's
/// `cargo_release_profile_config`). An aborting bootstrap has no panic boundary: a bug would end
/// the container (the client gets Lambda's 502) instead of answering 500 with a sentence and a
/// request id. The workspace must say `unwind`.
/// Workload identity on Lambda (issue 50): the bootstrap under `cargo lambda watch`, team mode
/// with an OIDC issuer (the configuration's text in `GITSTATE_CONFIG_TEXT`, its keys a JWKS
/// file, a bare repository on this machine): a token is a caller, a forged one is a 401 that
/// writes nothing.
#[test]
fn an_oidc_token_is_a_caller_on_lambda() {
    use gitstate_tests::oidc::{now, Issuer, ISSUER};
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = bare_repo(dir.path(), "states");
    let config = format!(
        "repository \"default\" {{\n  url = \"{}\"\n}}\nauth {{\n  mode = \"team\"\n  oidc {{\n    issuer = \"{ISSUER}\"\n    audience = \"gitstate\"\n    jwks_file = \"{}\"\n    rule {{\n      claims = {{ sub = \"repo:acme/*:**\" }}\n      name = \"acme-ci\"\n    }}\n  }}\n}}\n",
        repo.display(),
        issuer.jwks_file().display()
    );
    // The configuration's text in the environment, as a function's configuration carries it
    // (no file is shipped with the bootstrap): one line of the env file, quotes and newlines
    // escaped.
    let escaped = config
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let (watch, base) =
        serve_function(dir.path(), &format!("GITSTATE_CONFIG_TEXT=\"{escaped}\"\n"));
    let claims = serde_json::json!({
        "iss": ISSUER, "aud": "gitstate", "iat": now(), "exp": now() + 600,
        "sub": "repo:acme/infra:ref:refs/heads/main",
    });
    let token = issuer.sign("k1", &claims);
    let url = format!("{base}/state/default/oidc.tfstate");
    let state = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"l","outputs":{},"resources":[]}"#;
    let (status, body) = http(
        "POST",
        &url,
        Some(state),
        Some(("x", "eyJhbGciOiJub25lIn0.e30.")),
    )
    .unwrap();
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("algorithm 'none'"), "{body}");
    let (status, body) = http("POST", &url, Some(state), Some(("x", &token))).unwrap();
    assert_eq!(
        status,
        200,
        "{body}\n{}",
        std::fs::read_to_string(&watch.log).unwrap_or_default()
    );
    let subjects = git_log_subjects(&repo, "main", "oidc.tfstate");
    assert_eq!(subjects, ["Update oidc.tfstate (serial 1) by acme-ci"]);
}

/// The workspace API (DESIGN §10) through the function, as a Function URL serves it: service
/// discovery at the root, a workspace created, locked, written inline and read back, unlocked; a
/// commit per change on the repository. Requests are the ones Terraform's `cloud` block makes
/// (tests/tests/workspaces.rs drives real Terraform against `gitstate serve`, which needs TLS).
#[test]
fn the_workspace_api_answers_on_lambda() {
    use base64::Engine;
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = bare_repo(dir.path(), "states");
    let token = "lambda-team-token";
    let config = format!(
        "repository \"default\" {{\n  url = \"{}\"\n}}\nauth {{\n  mode = \"team\"\n  token_hashes = [\"sha256:{}\"]\n}}\n",
        repo.display(),
        gitstate_tests::crypto::sha256_hex(token)
    );
    let escaped = config
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let (watch, base) = serve_function(
        dir.path(),
        &format!(
            "GITSTATE_CONFIG_TEXT=\"{escaped}\"\nGITSTATE_RUN_KEY=\"lambda-test-run-key-0123456789abcdef\"\n"
        ),
    );
    let log = || std::fs::read_to_string(&watch.log).unwrap_or_default();
    let call = |method: &str, path: &str, body: Option<&str>| {
        http(method, &format!("{base}{path}"), body, Some(("x", token))).unwrap()
    };
    let json = |text: &str| -> serde_json::Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}\n{}", log()))
    };
    let (status, body) = call("GET", "/.well-known/terraform.json", None);
    assert_eq!(
        (status, json(&body)["tfe.v2"].clone()),
        (200, "/api/v2/".into()),
        "{body}"
    );
    let (status, _) = call("GET", "/api/v2/ping", None);
    assert_eq!(status, 204);
    let (status, body) = call("GET", "/api/v2/organizations/default/entitlement-set", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["data"]["attributes"]["operations"], false);
    let (status, body) = http(
        "GET",
        &format!("{base}/api/v2/organizations/default/entitlement-set"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 401, "anonymous: {body}");

    let (status, body) = call(
        "POST",
        "/api/v2/organizations/default/workspaces",
        Some(r#"{"data":{"type":"workspaces","attributes":{"name":"app-prod"}}}"#),
    );
    assert_eq!(status, 201, "{body}\n{}", log());
    let workspace = json(&body);
    assert_eq!(workspace["data"]["attributes"]["execution-mode"], "local");
    let id = workspace["data"]["id"].as_str().unwrap().to_owned();
    let (status, body) = call(
        "POST",
        &format!("/api/v2/workspaces/{id}/actions/lock"),
        Some(r#"{"reason":"Locked by Terraform"}"#),
    );
    assert_eq!(status, 200, "{body}");
    let state = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"l","outputs":{},"resources":[]}"#;
    let encoded = base64::engine::general_purpose::STANDARD.encode(state);
    let (status, body) = call(
        "POST",
        &format!("/api/v2/workspaces/{id}/state-versions"),
        Some(&format!(
            r#"{{"data":{{"type":"state-versions","attributes":{{"serial":1,"lineage":"l","state":"{encoded}"}}}}}}"#
        )),
    );
    assert_eq!(status, 201, "{body}\n{}", log());
    let (status, body) = call(
        "GET",
        &format!("/api/v2/workspaces/{id}/current-state-version"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let download = json(&body)["data"]["attributes"]["hosted-state-download-url"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = call("GET", &download, None);
    assert_eq!((status, body.as_str()), (200, state));
    let (status, body) = call(
        "POST",
        &format!("/api/v2/workspaces/{id}/actions/unlock"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        git_log_subjects(&repo, "main", "workspaces/app-prod.tfstate"),
        ["Update workspaces/app-prod.tfstate (serial 1) by x"]
    );
    assert_eq!(
        git_log_subjects(&repo, "main", ".gitstate/workspaces/app-prod.json"),
        ["Create workspace app-prod (workspaces/app-prod.tfstate) by x"]
    );
    assert!(refs_under(&repo, "refs/heads/locks/").is_empty());
}

#[test]
fn the_release_profile_keeps_the_panic_boundary_under_cargo_lambda() {
    let release = profile("release");
    assert!(
        release.iter().any(|l| l == "panic=\"unwind\""),
        "[profile.release] must set panic = \"unwind\" (cargo lambda build would abort on panic): {release:?}"
    );
}

fn workspace_manifest() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
        .expect("the workspace manifest")
}

/// The `key=value` lines of `[profile.NAME]`, comments and spaces removed.
fn profile(name: &str) -> Vec<String> {
    let header = format!("[profile.{name}]");
    workspace_manifest()
        .lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(|l| l.split('#').next().unwrap_or("").replace(' ', ""))
        .filter(|l| !l.is_empty())
        .collect()
}

/// The CLI and the Lambda bootstrap are built from the same dependency artifacts (scripts/test.sh
/// builds both, and `cargo lambda watch` above reuses them): every dependency they share has the
/// same features in both (shared/cli/Cargo.toml turns on what lambda_http turns on). Only
/// gitstate-app differs by design (the Prometheus exporter against EMF lines).
#[test]
fn the_cli_and_the_bootstrap_share_every_dependencys_features() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let features = |package: &str| {
        let out = Command::new(&cargo)
            .args([
                "tree",
                "--offline",
                "-p",
                package,
                "-e",
                "normal",
                "--prefix",
                "none",
            ])
            .args(["-f", "{p}|{f}"])
            .current_dir(&workspace)
            .output()
            .expect("cargo tree");
        assert!(
            out.status.success(),
            "cargo tree -p {package}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut all: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
            Default::default();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some((package, features)) = line
                .replace(" (*)", "")
                .split_once('|')
                .map(|(p, f)| (p.split(" (").next().unwrap_or(p).to_owned(), f.to_owned()))
            else {
                continue;
            };
            all.entry(package).or_default().extend(
                features
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(String::from),
            );
        }
        all
    };
    let (cli, lambda) = (features("gitstate"), features("gitstate-lambda"));
    let differ: Vec<String> = cli
        .iter()
        .filter(|(package, _)| !package.starts_with("gitstate-app "))
        .filter_map(|(package, on)| {
            let other = lambda.get(package)?;
            (other != on).then(|| format!("{package}: CLI {on:?}, bootstrap {other:?}"))
        })
        .collect();
    assert!(
        differ.is_empty(),
        "dependencies built twice, with other features (turn them on in shared/cli/Cargo.toml):\n{}",
        differ.join("\n")
    );
}
