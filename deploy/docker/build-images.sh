#!/usr/bin/env bash
# Builds the oomlens-agent and oomlens-collector images with buildah (vfs storage, no daemon)
# from Debian packages only: a minimal Debian root made by debootstrap from the Debian mirror,
# the binaries from the .deb packages (deploy/deb/build.sh), no base image from a container
# registry. This is how CI builds them (registries other than the package ones are out of reach
# there); with registry access, deploy/docker/Dockerfile builds the same images the usual way.
#
#   deploy/docker/build-images.sh [--profile release|dev] [--tag TAG] [--out DIR]
#
# Needs root (debootstrap), buildah and debootstrap (apt-get install buildah debootstrap).
# Writes <DIR>/oomlens-agent.tar and <DIR>/oomlens-collector.tar (OCI archives, `podman load -i`)
# and checks that each image's entrypoint runs (`--version`) inside its own root.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
profile=release
tag=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")
out="$root/target/images"
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install $tool" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "debootstrap needs root" >&2; exit 1; }
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/oomlens-images.XXXXXX")
trap 'rm -rf "$work"' EXIT

mapfile -t debs < <("$root/deploy/deb/build.sh" --profile "$profile" --out "$work/debs")
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
# The mirror this machine's apt uses (a CI machine may have its own), else Debian's.
apt_mirror() {
  {
    sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null
    grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}'
  } | grep -v security | head -1 || true
}
mirror=${DEBIAN_MIRROR:-$(apt_mirror | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}
# debootstrap downloads with wget, which ignores apt's own proxy setting: pass it on.
if [ -z "${http_proxy:-}" ] && command -v apt-config >/dev/null; then
  eval "$(apt-config shell apt_proxy Acquire::http::Proxy)"
  if [ -n "${apt_proxy:-}" ]; then export http_proxy=$apt_proxy; fi
fi
echo "debootstrap $suite (minbase + ca-certificates, tzdata) from $mirror" >&2
debootstrap --variant=minbase --include=ca-certificates,tzdata "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
# Smaller: no package lists, docs or man pages in the runtime image.
rm -rf "$work/rootfs/var/lib/apt/lists"/* "$work/rootfs/usr/share/doc"/* "$work/rootfs/usr/share/man"/* \
  "$work/rootfs/var/cache/apt"/*.bin

# image NAME DEB ENTRYPOINT CMD USER: one image from the root and one package.
image() {
  local name=$1 deb=$2 entrypoint=$3 cmd=$4 user=$5
  local rootfs="$work/rootfs-$name" ctr mnt
  cp -a "$work/rootfs" "$rootfs"
  dpkg --root="$rootfs" --force-script-chrootless --force-depends --log=/dev/null --install "$deb" >"$work/dpkg-$name.log" 2>&1 \
    || { cat "$work/dpkg-$name.log" >&2; exit 1; }
  rm -rf "$rootfs/usr/share/doc"/* "$rootfs/usr/share/man"/*
  install -d -m 0750 "$rootfs/var/lib/oomlens" "$rootfs/run/oomlens"
  chroot "$rootfs" chown oomlens:oomlens /var/lib/oomlens /run/oomlens
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  cp -a "$rootfs/." "$mnt/"
  buildah umount "$ctr" >/dev/null
  buildah config --entrypoint "$entrypoint" --cmd "$cmd" --user "$user" \
    --env NVIDIA_VISIBLE_DEVICES=all --env NVIDIA_DRIVER_CAPABILITIES=utility \
    --label org.opencontainers.image.title="$name" --label org.opencontainers.image.version="$tag" \
    --label org.opencontainers.image.source=https://github.com/oomlens/oomlens "$ctr"
  buildah commit --quiet "$ctr" "ghcr.io/oomlens/$name:$tag" >/dev/null
  buildah rm "$ctr" >/dev/null
  rm -f "$out/$name.tar"
  buildah push --quiet "ghcr.io/oomlens/$name:$tag" "oci-archive:$out/$name.tar:ghcr.io/oomlens/$name:$tag"
  # The image's own root runs its entrypoint.
  chroot "$rootfs" "${entrypoint//[\[\]\"]/}" --version
  echo "ok   ghcr.io/oomlens/$name:$tag -> $out/$name.tar ($(du -h "$out/$name.tar" | cut -f1))"
}

agent_deb=$(printf '%s\n' "${debs[@]}" | grep '/oomlens-agent_')
collector_deb=$(printf '%s\n' "${debs[@]}" | grep '/oomlens-collector_')
# The agent runs as root (hostPID, /dev/kmsg with CAP_SYSLOG only: deploy/kubernetes); the
# collector as the oomlens user.
image oomlens-agent "$agent_deb" '["/usr/bin/oomlens-agent"]' '["run","--config","/etc/oomlens/agent.toml"]' 0:0
image oomlens-collector "$collector_deb" '["/usr/bin/oomlens-collector"]' \
  '["serve","--config","/etc/oomlens/collector.toml"]' oomlens:oomlens
