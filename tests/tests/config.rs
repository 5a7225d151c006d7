//! Configuration as a user meets it: one precedence everywhere (flags, then `GITSTATE_*`
//! environment, then `gitstate.hcl`, then defaults), shown by `gitstate config show` with the
//! source of each value and no secret, and configuration files whose mistakes are reported with the key and the line.

use std::path::Path;
use std::process::Command;

use gitstate_tests::gitstate_bin;

/// Runs `gitstate ARGS` in `dir` with only `env` among the gitstate/git variables; returns
/// (success, stdout, stderr).
fn gitstate(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(gitstate_bin());
    cmd.args(args).current_dir(dir);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("GITSTATE_")
            || k.starts_with("GIT_")
            || k.starts_with("SOPS_")
            || k == "GITHUB_TOKEN"
        {
            cmd.env_remove(&key);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run gitstate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The line of `config show` output that starts with `key`.
fn shown<'a>(output: &'a str, key: &str) -> &'a str {
    output
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in:\n{output}"))
}

#[test]
fn precedence_case_by_case() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gitstate.hcl"),
        "listen = \"127.0.0.1:7001\"\nmax_state_bytes = 1001\n",
    )
    .unwrap();
    let file = ["--config", "gitstate.hcl"];
    // (args, env, expected listen, expected source)
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (vec![], vec![], "127.0.0.1:6061", "# default"),
        (
            file.to_vec(),
            vec![],
            "127.0.0.1:7001",
            "# file gitstate.hcl",
        ),
        (
            file.to_vec(),
            vec![("GITSTATE_LISTEN", "127.0.0.1:7002")],
            "127.0.0.1:7002",
            "# environment GITSTATE_LISTEN",
        ),
        (
            [&file[..], &["--listen", "127.0.0.1:7003"]].concat(),
            vec![("GITSTATE_LISTEN", "127.0.0.1:7002")],
            "127.0.0.1:7003",
            "# flag --listen",
        ),
        (
            vec!["--listen", "127.0.0.1:7003"],
            vec![],
            "127.0.0.1:7003",
            "# flag --listen",
        ),
        // the config file itself named by the environment
        (
            vec![],
            vec![("GITSTATE_CONFIG", "gitstate.hcl")],
            "127.0.0.1:7001",
            "# file gitstate.hcl",
        ),
    ];
    for (args, env, listen, source) in cases {
        let all = [&["config", "show"][..], &args].concat();
        let (ok, out, err) = gitstate(dir.path(), &all, &env);
        assert!(ok, "{all:?} {env:?}: {err}");
        let line = shown(&out, "listen = ");
        assert!(
            line.contains(&format!("\"{listen}\"")),
            "{all:?} {env:?}: {line}"
        );
        assert!(line.ends_with(source), "{all:?} {env:?}: {line}");
    }
    // a second key, from three layers at once
    let (_, out, _) = gitstate(
        dir.path(),
        &[
            "config",
            "show",
            "--config",
            "gitstate.hcl",
            "--listen",
            "127.0.0.1:7004",
        ],
        &[("GITSTATE_MAX_STATE_BYTES", "2002")],
    );
    assert!(
        shown(&out, "max_state_bytes = 2002").ends_with("# environment GITSTATE_MAX_STATE_BYTES")
    );
    assert!(shown(&out, "listen = \"127.0.0.1:7004\"").ends_with("# flag --listen"));
    assert!(shown(&out, "data_dir = ").ends_with("# default"));
}

#[test]
fn config_show_never_prints_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gitstate.hcl"),
        "repository \"default\" {\n  url = \"https://bot:url-secret-123@git.example.com/acme/states.git\"\n}\nauth {\n  mode = \"team\"\n  token_hashes = [\"sha256:0000000000000000000000000000000000000000000000000000000000000000\"]\n}\n",
    )
    .unwrap();
    let (ok, out, err) = gitstate(
        dir.path(),
        &["config", "show", "--config", "gitstate.hcl"],
        &[("GIT_USERNAME", "bot"), ("GIT_PASSWORD", "env-secret-456")],
    );
    assert!(ok, "{err}");
    for secret in ["url-secret-123", "env-secret-456"] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret} printed:\n{out}"
        );
    }
    assert!(
        out.contains("https://***@git.example.com/acme/states.git"),
        "{out}"
    );
    assert!(out.contains("secret from GIT_PASSWORD (hidden)"), "{out}");
    assert!(out.contains("token_hashes = 1 configured"), "{out}");
}

/// The run key (issue 55): `config show` prints it hidden with its source, and a file setting
/// with the source of that setting; `--run-key-file` wins over `GITSTATE_RUN_KEY`, which wins
/// over the file's `auth.run_key_file`; a short key stops with a sentence naming the variable.
#[test]
fn config_show_hides_the_run_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gitstate.hcl"),
        "auth {\n  mode = \"team\"\n  token_hashes = [\"sha256:0000000000000000000000000000000000000000000000000000000000000000\"]\n  run_key_file = \"from-file.key\"\n}\n",
    )
    .unwrap();
    let key = "run-key-secret-0123456789abcdef0123456789";
    let show = |args: &[&str], env: &[(&str, &str)]| {
        let all = [&["config", "show", "--config", "gitstate.hcl"][..], args].concat();
        let (ok, out, err) = gitstate(dir.path(), &all, env);
        assert!(ok, "{all:?}: {err}");
        assert!(
            !out.contains(key) && !err.contains(key),
            "the key printed:\n{out}"
        );
        out
    };
    let out = show(&[], &[]);
    assert!(
        shown(&out, "auth.run_key_file = \"from-file.key\"").ends_with("# file gitstate.hcl"),
        "{out}"
    );
    let out = show(&[], &[("GITSTATE_RUN_KEY", key)]);
    assert!(
        shown(&out, "auth.run_key = (hidden)").ends_with("# environment GITSTATE_RUN_KEY"),
        "{out}"
    );
    let out = show(
        &["--run-key-file", "flag.key"],
        &[("GITSTATE_RUN_KEY", key)],
    );
    assert!(
        shown(&out, "auth.run_key_file = \"flag.key\"").ends_with("# flag --run-key-file"),
        "{out}"
    );
    let (ok, _, err) = gitstate(
        dir.path(),
        &["config", "show", "--config", "gitstate.hcl"],
        &[("GITSTATE_RUN_KEY", "short-key")],
    );
    assert!(
        !ok && err.contains("GITSTATE_RUN_KEY") && err.contains("32 bytes"),
        "{err}"
    );
    assert!(!err.contains("short-key"), "{err}");
}

#[test]
fn bad_configuration_files_name_the_key_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "listen = \"127.0.0.1:7000\"\nrepository \"default\" {\n  url = \"x\"\n  colour = \"red\"\n}\n",
            "line 4: repository.default.colour: unknown field `colour`",
        ),
        (
            "listen = \"127.0.0.1:7000\"\nmax_state_bytes = \"lots\"\n",
            "line 2: max_state_bytes: invalid type: string \"lots\"",
        ),
        (
            "\n\nauth { mode = \"everyone\" }\n",
            "line 3: auth.mode: unknown variant `everyone`",
        ),
        ("listen = \n", "gitstate.hcl is invalid"),
    ];
    for (text, expected) in cases {
        std::fs::write(dir.path().join("gitstate.hcl"), text).unwrap();
        for command in [
            &["config", "show"][..],
            &["serve", "--listen", "127.0.0.1:0"][..],
        ] {
            let args = [command, &["--config", "gitstate.hcl"][..]].concat();
            let (ok, _, err) = gitstate(dir.path(), &args, &[]);
            assert!(!ok, "{args:?} accepted:\n{text}");
            assert!(
                err.contains(expected),
                "{args:?}: expected {expected:?} in {err}"
            );
            assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
        }
    }
    assert!(
        !dir.path().join(".gitstate").exists(),
        "a bad configuration created a repository"
    );
}

/// The same team token listed twice with two scopes stops the start with a sentence (issue 50):
/// otherwise the first, widest scope would win without a word.
#[test]
fn a_team_token_listed_twice_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let hash = "sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
    let (ok, _, err) = gitstate(
        dir.path(),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--auth-mode",
            "team",
            "--token-hash",
            hash,
            "--token-hash",
            &format!("{hash};access=read-only"),
        ],
        &[],
    );
    assert!(!ok, "started with a token listed twice");
    assert!(err.contains("same hash"), "{err}");
    assert!(
        !err.contains(&hash[7..]),
        "the hash is in the sentence: {err}"
    );
}
