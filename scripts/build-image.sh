#!/usr/bin/env bash
# Builds the container image of `gitstate serve` for amd64 and arm64, without a daemon, as an OCI
# image layout in OUT_DIR (push it with `skopeo copy --all oci:OUT_DIR:latest docker://REGISTRY/gitstate:TAG`):
#   - a static binary per architecture: `cargo lambda build --release --target
#     <arch>-unknown-linux-musl -p gitstate` (zig links it; the release profile that ships);
#   - FROM scratch: /gitstate, the CA certificates of this machine (for https remotes),
#     /etc/passwd naming the user 65532 ("nonroot"), /data owned by it, /tmp;
#   - runs as 65532:65532 in /data; entrypoint /gitstate, command `serve --listen 0.0.0.0:6061`
#     (a non-loopback listener needs auth mode team or passthrough, or the start stops:
#     README "A container image"); probes on /_/health and /_/ready.
# Tags: `amd64` and `arm64` (one manifest each) and `latest` (an index of both, by platform).
#
# Usage: scripts/build-image.sh OUT_DIR     (needs root for the files' owners, umoci, python3)
set -euo pipefail

out=${1:?usage: scripts/build-image.sh OUT_DIR}
cd "$(dirname "$0")/.."
GITSTATE_TOOLS=${GITSTATE_TOOLS:-$HOME/.cache/gitstate-tools}
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
if [ "$(id -u)" != 0 ]; then
    echo "build-image: needs root (the image's files are owned by root and by 65532)" >&2
    exit 1
fi
command -v umoci >/dev/null || { echo "build-image: umoci is missing (apt-get install umoci)" >&2; exit 1; }
certs=/etc/ssl/certs/ca-certificates.crt
[ -s "$certs" ] || { echo "build-image: $certs is missing (apt-get install ca-certificates)" >&2; exit 1; }

rm -rf "$out"
umoci init --layout "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for arch in amd64 arm64; do
    case $arch in
        amd64) triple=x86_64-unknown-linux-musl machine=0x3e ;;
        arm64) triple=aarch64-unknown-linux-musl machine=0xb7 ;;
    esac
    rustup target list --installed | grep -qx "$triple" || rustup target add "$triple"
    start=$SECONDS
    PATH="$GITSTATE_TOOLS/cargo-lambda-venv/bin:$PATH" \
        cargo lambda build --release --target "$triple" -p gitstate --bin gitstate
    # cargo lambda leaves each binary as target/lambda/<name>/bootstrap (the last build's).
    bin="$work/gitstate-$arch"
    cp "$target_dir/lambda/gitstate/bootstrap" "$bin"
    # A static executable for the right processor: no program interpreter, the ELF e_machine.
    if readelf -l "$bin" | grep -q INTERP; then
        echo "build-image: $bin is not static" >&2
        exit 1
    fi
    found=$(od -An -tx2 -j18 -N2 "$bin" | tr -d ' ')
    [ "0x$found" = "$(printf '0x%04x' "$machine")" ] || {
        echo "build-image: $bin is not an $arch executable (e_machine 0x$found)" >&2
        exit 1
    }
    echo "build-image: $arch binary built, $(stat -c %s "$bin") bytes ($((SECONDS - start)) s)"

    umoci new --image "$out:$arch"
    umoci unpack --image "$out:$arch" "$work/$arch"
    rootfs="$work/$arch/rootfs"
    install -m 0755 "$bin" "$rootfs/gitstate"
    install -D -m 0644 "$certs" "$rootfs/etc/ssl/certs/ca-certificates.crt"
    printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/data:/sbin/nologin\n' \
        >"$rootfs/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
    install -d -m 0750 -o 65532 -g 65532 "$rootfs/data"
    install -d -m 1777 "$rootfs/tmp"
    umoci repack --image "$out:$arch" "$work/$arch"
    umoci config --image "$out:$arch" --os linux --architecture "$arch" \
        --config.user 65532:65532 --config.workingdir /data \
        --config.entrypoint /gitstate \
        --config.cmd serve --config.cmd --listen --config.cmd 0.0.0.0:6061 \
        --config.env GITSTATE_DATA_DIR=/data \
        --config.env GITSTATE_CACHE_DIR=/tmp/gitstate-cache \
        --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
        --config.exposedports 6061/tcp \
        --config.label org.opencontainers.image.title=gitstate \
        --config.label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
done
umoci gc --layout "$out"

# `latest`: one image index naming both manifests with their platforms, as registries serve a
# multi-arch image.
python3 - "$out" <<'EOF'
import hashlib, json, os, sys
out = sys.argv[1]
index_path = os.path.join(out, "index.json")
index = json.load(open(index_path))
manifests = []
for entry in index["manifests"]:
    arch = entry.get("annotations", {}).get("org.opencontainers.image.ref.name")
    if arch in ("amd64", "arm64"):
        manifests.append({k: v for k, v in entry.items() if k != "annotations"} | {
            "platform": {"architecture": arch, "os": "linux"}})
multi = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                    "manifests": manifests}, separators=(",", ":")).encode()
digest = hashlib.sha256(multi).hexdigest()
with open(os.path.join(out, "blobs", "sha256", digest), "wb") as f:
    f.write(multi)
index["manifests"].append({"mediaType": "application/vnd.oci.image.index.v1+json",
                           "digest": "sha256:" + digest, "size": len(multi),
                           "annotations": {"org.opencontainers.image.ref.name": "latest"}})
json.dump(index, open(index_path, "w"))
EOF
echo "build-image: $out holds gitstate for amd64 and arm64 (tags amd64, arm64, latest)"
