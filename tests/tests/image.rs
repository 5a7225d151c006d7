//! The container image (issue 35, README "A container image"): the OCI layout
//! `scripts/build-image.sh` writes, run as a container runtime would run it, without a daemon:
//! its amd64 root filesystem unpacked with umoci and its entrypoint run under `chroot` as the
//! image's user (65532), with the image's environment and working directory. Checked:
//! - the image's configuration: user 65532, entrypoint `/gitstate`, `serve --listen 0.0.0.0:6061`,
//!   `/data` for the state repository; `latest` is an index of an amd64 and an arm64 manifest;
//! - as configured, on a non-loopback address without auth, the start stops with its sentence;
//! - with team mode from the environment (as a Kubernetes Secret gives it), `/_/health` and
//!   `/_/ready` answer and real Terraform 1.15.5 applies, the state landing in `/data`;
//! - the arm64 image's binary is a static aarch64 executable that runs (under qemu-aarch64).
//!
//! It needs the image: `scripts/check-shipped.sh` builds it and runs this test with
//! `GITSTATE_IMAGE` set (`--run-ignored only`); it needs root (chroot, the files' owners).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gitstate_tests::crypto::sha256_hex;
use gitstate_tests::*;

const TOKEN: &str = "image-team-token";

fn layout() -> PathBuf {
    PathBuf::from(std::env::var("GITSTATE_IMAGE").expect(
        "GITSTATE_IMAGE names the OCI layout scripts/build-image.sh wrote (scripts/check-shipped.sh sets it)",
    ))
}

/// `umoci unpack` of `tag` into `dir/bundle`: (the runtime configuration, the root filesystem).
fn unpack(tag: &str, dir: &Path) -> (serde_json::Value, PathBuf) {
    let bundle = dir.join("bundle");
    let out = Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:{tag}", layout().display()))
        .arg(&bundle)
        .output()
        .expect("umoci");
    assert!(
        out.status.success(),
        "umoci unpack {tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = std::fs::read(bundle.join("config.json")).expect("the bundle's config.json");
    (
        serde_json::from_slice(&config).expect("JSON"),
        bundle.join("rootfs"),
    )
}

/// The image's process run under `chroot` as its user, with its environment plus `env`, and
/// `args` after the entrypoint.
fn run_in(
    rootfs: &Path,
    process: &serde_json::Value,
    args: &[&str],
    env: &[(&str, &str)],
) -> Command {
    let uid = process["user"]["uid"].as_u64().expect("a uid");
    let gid = process["user"]["gid"].as_u64().expect("a gid");
    let mut command = Command::new("chroot");
    command
        .arg(format!("--userspec={uid}:{gid}"))
        .arg(rootfs)
        .arg(process["args"][0].as_str().expect("the entrypoint"))
        .args(args)
        .env_clear();
    for pair in process["env"].as_array().expect("the environment") {
        let (key, value) = pair.as_str().unwrap().split_once('=').unwrap();
        command.env(key, value);
    }
    command.envs(env.iter().copied());
    command
}

#[test]
#[ignore = "needs the image: scripts/check-shipped.sh builds it and runs this with GITSTATE_IMAGE"]
fn the_image_serves_terraform_as_a_non_root_user_from_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let (config, rootfs) = unpack("amd64", dir.path());
    let process = &config["process"];
    assert_eq!(process["user"]["uid"], 65532, "{process}");
    assert_eq!(process["user"]["gid"], 65532, "{process}");
    assert_eq!(
        process["args"],
        serde_json::json!(["/gitstate", "serve", "--listen", "0.0.0.0:6061"])
    );
    assert_eq!(process["cwd"], "/data");
    let env: Vec<&str> = process["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(env.contains(&"GITSTATE_DATA_DIR=/data"), "{env:?}");
    let entries: Vec<String> = std::fs::read_dir(&rootfs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for absent in ["bin", "usr", "lib"] {
        assert!(
            !entries.contains(&absent.to_owned()),
            "FROM scratch: {entries:?}"
        );
    }

    // As configured, with no auth: a public listener without auth stops the start.
    let refused = run_in(
        &rootfs,
        process,
        &["serve", "--listen", "0.0.0.0:6061"],
        &[],
    )
    .output()
    .expect("chroot");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("auth"), "{said}");

    // With team mode from the environment, as a Kubernetes Secret would give it.
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let hash = format!("sha256:{}", sha256_hex(TOKEN));
    let command = run_in(
        &rootfs,
        process,
        &["serve", "--listen", &listen],
        &[
            ("GITSTATE_AUTH_MODE", "team"),
            ("GITSTATE_TOKEN_HASHES", &hash),
        ],
    );
    let mut server = ChildGuard::spawn(
        command,
        &dir.path().join("server.log"),
        "the image's gitstate",
    );
    let base = format!("http://127.0.0.1:{port}");
    server
        .wait_ready(Duration::from_secs(30), || {
            matches!(
                http("GET", &format!("{base}/_/health"), None, None),
                Ok((200, _))
            )
        })
        .unwrap_or_else(|log| panic!("{log}"));
    let (status, body) = http("GET", &format!("{base}/_/ready"), None, None).unwrap();
    assert_eq!(status, 200, "{body}");

    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().unwrap();
    let backend =
        HttpBackend::new(&format!("{base}/state/default/app.tfstate")).with_auth("ci", TOKEN);
    write_main_tf(work.path(), &backend, 2, "image");
    tf.init(work.path())
        .expect_code(0, "init against the image");
    tf.apply(work.path()).expect_code(
        0,
        &format!("apply against the image\n{}", server.log_text()),
    );
    let repository = rootfs.join("data/default.git");
    assert_eq!(
        git_log_subjects(&repository, "main", "app.tfstate").len(),
        1,
        "the state is in the image's /data"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&repository).unwrap().uid(),
        65532,
        "written as 65532"
    );
    server.kill();

    // arm64: a static aarch64 executable that runs.
    let arm = tempfile::tempdir().unwrap();
    let (arm_config, arm_rootfs) = unpack("arm64", arm.path());
    assert_eq!(arm_config["process"]["user"]["uid"], 65532);
    let binary = std::fs::read(arm_rootfs.join("gitstate")).unwrap();
    assert_eq!(&binary[18..20], &[0xb7, 0x00], "an aarch64 executable");
    let qemu = which("qemu-aarch64").expect("qemu-aarch64 (apt-get install qemu-user)");
    let version = Command::new(qemu)
        .arg(arm_rootfs.join("gitstate"))
        .arg("--version")
        .env_clear()
        .output()
        .unwrap();
    assert!(
        version.status.success(),
        "{}",
        String::from_utf8_lossy(&version.stderr)
    );
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("gitstate "));

    // `latest`: an index naming both, by platform.
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout().join("index.json")).unwrap()).unwrap();
    let latest = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == "latest")
        .expect("a latest tag");
    let digest = latest["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    let multi: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout().join("blobs/sha256").join(digest)).unwrap())
            .unwrap();
    let mut platforms: Vec<&str> = multi["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["platform"]["architecture"].as_str().unwrap())
        .collect();
    platforms.sort();
    assert_eq!(platforms, ["amd64", "arm64"]);
}
