#!/usr/bin/env bash
# Checks the Debian packages as a fresh machine would get them: builds them (deploy/deb/build.sh,
# --profile dev unless given), installs both into an empty root with dpkg (maintainer scripts run
# with DPKG_ROOT set: the oomlens user is created in that root), then checks what landed: the
# units pass `systemd-analyze verify` against the installed binaries, the installed sample
# configurations are accepted by the installed binaries (--print-config), the user exists, the
# conffiles are registered, and removal leaves the edited configuration in place.
#
#   deploy/deb/check.sh [--profile dev|release]
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
profile=dev
[ "${1:-}" = --profile ] && profile=$2
export PATH="$PATH:/usr/sbin:/sbin"
work=$(mktemp -d "${TMPDIR:-/tmp}/oomlens-debcheck.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

mapfile -t debs < <("$root/deploy/deb/build.sh" --profile "$profile" --out "$work/debs")
[ "${#debs[@]}" -eq 2 ] || { echo "expected two packages, got: ${debs[*]}" >&2; exit 1; }
for deb in "${debs[@]}"; do
  ok "built $(basename "$deb") ($(du -h "$deb" | cut -f1))"
  dpkg-deb --info "$deb" >/dev/null || bad "dpkg-deb --info $(basename "$deb")"
done

# An empty root with a dpkg database; the packages' Depends (libc6, systemd) live on the host.
r="$work/root"
mkdir -p "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates" "$r/etc" "$r/usr/bin" "$r/usr/sbin"
: >"$r/var/lib/dpkg/status"
: >"$r/var/lib/dpkg/available"
# systemd-sysusers adds to the root's own passwd/group.
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"
printf 'root:x:0:\n' >"$r/etc/group"
if ! dpkg --root="$r" --force-script-chrootless --force-depends --force-not-root \
  --log=/dev/null --install "${debs[@]}" >"$work/dpkg.log" 2>&1; then
  cat "$work/dpkg.log"; bad "dpkg --install into an empty root"
else
  ok "dpkg --install into an empty root"
fi
status=$(dpkg-query --admindir="$r/var/lib/dpkg" -W -f='${Package} ${Status}\n' 2>/dev/null || true)
for pkg in oomlens-agent oomlens-collector; do
  grep -q "^$pkg install ok installed$" <<<"$status" && ok "$pkg installed" || bad "$pkg not installed: $status"
done
grep -q '^oomlens:' "$r/etc/passwd" && ok "user oomlens created (systemd-sysusers)" || bad "no oomlens user in the root"
for f in usr/bin/oomlens-agent usr/bin/oomlens-collector usr/bin/oomlens \
  usr/lib/systemd/system/oomlens-agent.service usr/lib/systemd/system/oomlens-collector.service \
  usr/lib/sysusers.d/oomlens-agent.conf usr/lib/sysusers.d/oomlens-collector.conf etc/oomlens/agent.toml etc/oomlens/collector.toml \
  usr/share/man/man1/oomlens-agent.1.gz usr/share/bash-completion/completions/oomlens; do
  [ -e "$r/$f" ] && ok "/$f" || bad "missing /$f"
done
grep -q '/etc/oomlens/agent.toml' "$r/var/lib/dpkg/info/oomlens-agent.conffiles" && ok "agent.toml is a conffile" \
  || bad "agent.toml not registered as a conffile"

# The installed binaries accept the installed configurations.
"$r/usr/bin/oomlens-agent" run --config "$r/etc/oomlens/agent.toml" --print-config >/dev/null \
  && ok "installed agent.toml accepted" || bad "installed agent.toml refused"
"$r/usr/bin/oomlens-collector" serve --config "$r/etc/oomlens/collector.toml" --print-config >/dev/null \
  && ok "installed collector.toml accepted" || bad "installed collector.toml refused"

# The installed units, against the installed binaries: ExecStart= points into the root (verify
# has no use for --root here: the root has no systemd of its own).
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$work/units"
  for unit in oomlens-agent.service oomlens-collector.service; do
    sed "s#/usr/bin/oomlens-#$r/usr/bin/oomlens-#g" "$r/usr/lib/systemd/system/$unit" >"$work/units/$unit"
    if out=$(systemd-analyze verify --man=no "$work/units/$unit" 2>&1) && [ -z "$out" ]; then
      ok "systemd-analyze verify $unit (as installed)"
    else
      echo "$out"; bad "systemd-analyze verify $unit"
    fi
  done
else
  echo "systemd-analyze not installed: units not verified"
  if [ "${CI:-}" = true ]; then bad "systemd-analyze missing in CI"; fi
fi

# Removal keeps an edited configuration (conffile), purge removes it.
echo '# site edit' >>"$r/etc/oomlens/agent.toml"
dpkg --root="$r" --force-script-chrootless --force-not-root --log=/dev/null --remove oomlens-agent >/dev/null 2>&1 \
  && [ -e "$r/etc/oomlens/agent.toml" ] && [ ! -e "$r/usr/bin/oomlens-agent" ] \
  && ok "remove keeps the edited agent.toml" || bad "remove"
dpkg --root="$r" --force-script-chrootless --force-not-root --log=/dev/null --purge oomlens-agent >/dev/null 2>&1 \
  && [ ! -e "$r/etc/oomlens/agent.toml" ] && ok "purge removes it" || bad "purge"
exit "$fail"
