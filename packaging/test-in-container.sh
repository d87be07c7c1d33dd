#!/usr/bin/env bash
# shellcheck disable=SC2016 # single-quoted ${...}: dpkg-query formats, scripts for the container
# Installs the built ap-intake .deb in a freshly bootstrapped Debian bookworm container,
# boots the container with systemd-nspawn, and checks the package and its unit under a real
# systemd (D34, D35):
#
#   install   apt installs the .deb: ap-intake user and group, /etc/ap-intake/config.toml
#             created from the example (root:ap-intake 0640), no conffile, unit not enabled
#   bad conf  the example config (no TLS files) stops start-up with exit 78 and no restart
#   start     with a sandbox config the service starts (Type=notify), /healthz and /readyz
#             answer 200, the admin socket is in /run/ap-intake
#   reload    `systemctl reload` keeps the same process running
#   loop      a damaged store (exit 74) is restarted at most StartLimitBurst times
#   upgrade   `dpkg -i` of the same package with a higher version, stdin closed: no prompt,
#             the edited config kept byte for byte (owner and mode too), service running
#   purge     `dpkg --purge`: /etc/ap-intake, /var/lib/ap-intake, /var/log/ap-intake gone,
#             the ap-intake user and group kept
#
# With --from OLD.deb, the container first installs OLD.deb (e.g. a release whose config was
# still a conffile), edits its config and upgrades to DEB, checking the edit survives.
#
# Usage (root, on a Debian/Ubuntu host with systemd-container and debootstrap installed):
#   cargo deb
#   sudo packaging/test-in-container.sh [--keep] [--from OLD.deb] [target/debian/ap-intake_*.deb]
#
# DEB defaults to the newest target/debian/*.deb. The bootstrapped base system is cached as
# a tarball (AP_INTAKE_CT_CACHE, default /var/cache/ap-intake-test/bookworm.tar; delete it
# to bootstrap again); the first run needs the network (AP_INTAKE_CT_MIRROR, default
# http://deb.debian.org/debian) and takes a few minutes, later runs about a minute. The
# container has its own network namespace (--private-network): the service's ports do not
# touch the host's. --keep leaves the container's root directory for inspection.
# The host needs no systemd as PID 1: commands run in the container through nsenter.
set -euo pipefail

cd "$(dirname "$0")/.."

CACHE=${AP_INTAKE_CT_CACHE:-/var/cache/ap-intake-test/bookworm.tar}
MIRROR=${AP_INTAKE_CT_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
BOOT_TIMEOUT=120

keep=0
from=
deb=
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --from)
      [ $# -ge 2 ] || { echo "--from needs a .deb" >&2; exit 2; }
      from=$2
      shift
      ;;
    -h | --help)
      sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) deb=$1 ;;
  esac
  shift
done
if [ -z "$deb" ]; then
  # shellcheck disable=SC2012 # names are ap-intake_<version>_<arch>.deb
  deb=$(ls -t target/debian/*.deb 2>/dev/null | head -n 1 || true)
  [ -n "$deb" ] || { echo "no target/debian/*.deb: run cargo deb first, or name the .deb" >&2; exit 2; }
fi

# ---------------------------------------------------------------------------------------------
# Reporting

step_no=0
step() {
  step_no=$((step_no + 1))
  printf '\n==> %d. %s\n' "$step_no" "$*"
}
failures=0
ok() { printf '    ok: %s\n' "$*"; }
# fail: a failed check after which the test can go on; the script exits 1 at the end.
fail() {
  printf '    FAIL: %s\n' "$*" >&2
  failures=$((failures + 1))
}
# die: a failed check after which it cannot.
die() {
  printf '    FAIL: %s\n' "$*" >&2
  exit 1
}

# ---------------------------------------------------------------------------------------------
# Preflight

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and systemd-nspawn need it)"
for tool in debootstrap systemd-nspawn nsenter dpkg-deb tar sha256sum; do
  command -v "$tool" >/dev/null 2>&1 ||
    die "$tool is missing (apt-get install systemd-container debootstrap)"
done
for f in "$deb" ${from:+"$from"}; do
  dpkg-deb --info "$f" >/dev/null 2>&1 || die "$f is not a readable .deb"
done
deb_version=$(dpkg-deb --field "$deb" Version)

work=$(mktemp -d /var/tmp/ap-intake-ct.XXXXXX)
root=$work/root
nspawn_pid=
leader=
machine=ap-intake-ct-$$

# Stops the container (SIGTERM: nspawn shuts the container down in order), waits for it,
# removes the work directory unless --keep.
cleanup() {
  rc=$?
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
    if [ "$rc" -ne 0 ] && [ -n "$leader" ]; then
      echo "--- journal of ap-intake.service in the container (last 40 lines)" >&2
      ct journalctl -u ap-intake --no-pager -n 40 >&2 || true
    fi
    kill -TERM "$nspawn_pid" 2>/dev/null || true
    for _ in $(seq 60); do
      kill -0 "$nspawn_pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -KILL "$nspawn_pid" 2>/dev/null || true
    wait "$nspawn_pid" 2>/dev/null || true
  fi
  if [ "$rc" -ne 0 ] && [ -f "$work/nspawn.log" ]; then
    echo "--- systemd-nspawn output (last 10 lines; all of it in $work/nspawn.log with --keep)" >&2
    tail -n 10 "$work/nspawn.log" >&2 || true
  fi
  # Where /run is no tmpfs, nspawn refuses to delete its propagation directory itself.
  if [ -n "$nspawn_pid" ] && [ -d "/run/systemd/nspawn/propagate/$machine" ]; then
    rm -rf --one-file-system "/run/systemd/nspawn/propagate/$machine"
  fi
  if [ "$keep" -eq 1 ]; then
    echo "kept: $work"
  else
    rm -rf --one-file-system "$work"
  fi
  if [ "$rc" -eq 0 ]; then
    printf '\nall container checks passed (%s)\n' "$deb"
  else
    printf '\ncontainer test FAILED (exit %d)\n' "$rc" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ct CMD...: runs CMD as root inside the booted container (all its namespaces and its root).
ct() {
  nsenter --target "$leader" --mount --uts --ipc --net --pid --root --wd \
    /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root "$@"
}
# ct_sh SCRIPT: runs a shell script inside the container.
ct_sh() { ct /bin/sh -ec "$1"; }
# prop PROPERTY: one property of ap-intake.service (systemctl show); prop_is PROPERTY VALUE.
prop() { ct systemctl show -P "$1" ap-intake.service; }
prop_is() { [ "$(prop "$1")" = "$2" ]; }
# http_status PORT PATH: the status code of a GET on 127.0.0.1:PORT inside the container.
http_status() {
  ct /bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1 && printf "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" "$2" >&3 && head -n 1 <&3 | cut -d" " -f2' \
    _ "$1" "$2" 2>/dev/null || true
}
# answers STATUS PATH: the admin listener (127.0.0.1:9090) answers GET PATH with STATUS.
answers() { [ "$(http_status 9090 "$2")" = "$1" ]; }
# wait_for DESCRIPTION SECONDS CMD...: retries CMD every half second until it succeeds.
wait_for() {
  desc=$1 secs=$2
  shift 2
  for _ in $(seq $((secs * 2))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    kill -0 "$nspawn_pid" 2>/dev/null || die "the container stopped while waiting for $desc"
    sleep 0.5
  done
  die "timed out after ${secs}s waiting for $desc"
}
# stat_of PATH: owner:group mode inside the container.
stat_of() { ct stat -c '%U:%G %a' "$1"; }
# config_state: sha256, owner and mode of /etc/ap-intake/config.toml in the container.
config_state() {
  ct_sh 'sha256sum /etc/ap-intake/config.toml | cut -d" " -f1; stat -c "%U:%G %a" /etc/ap-intake/config.toml'
}

# ---------------------------------------------------------------------------------------------

step "bootstrap $SUITE (minbase + systemd)"
mkdir -p "$root"
if [ -f "$CACHE" ]; then
  tar -C "$root" -xpf "$CACHE"
  ok "unpacked the cached base system $CACHE"
else
  # systemd: PID 1 of the container (and systemd-sysusers); procps and ca-certificates: the
  # package's Depends and Recommends, so apt installs the .deb without the network later.
  debootstrap --variant=minbase --include=systemd,systemd-sysv,procps,ca-certificates \
    "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  mkdir -p "$(dirname "$CACHE")"
  tar -C "$root" -cf "$CACHE.tmp" . && mv "$CACHE.tmp" "$CACHE"
  ok "bootstrapped and cached as $CACHE"
fi
cp "$deb" "$root/root/ap-intake.deb"
[ -z "$from" ] || cp "$from" "$root/root/ap-intake-old.deb"

# The same package with a higher version, for a real upgrade (preinst/postrm upgrade paths).
step "repack $(basename "$deb") as version $deb_version+ct1"
dpkg-deb --raw-extract "$deb" "$work/bumped"
sed -i "s/^Version: .*/Version: $deb_version+ct1/" "$work/bumped/DEBIAN/control"
dpkg-deb --root-owner-group --build "$work/bumped" "$root/root/ap-intake-bumped.deb" >/dev/null
ok "ap-intake-bumped.deb"

step "boot the container with systemd-nspawn"
# --register=no --keep-unit: no machined and no D-Bus needed on the host (nor systemd as
# its PID 1); the container runs in this script's cgroup.
systemd-nspawn --quiet --boot --directory="$root" --machine="$machine" --register=no \
  --keep-unit --private-network --console=passive --setenv=SYSTEMD_COLORS=0 \
  >"$work/nspawn.log" 2>&1 &
nspawn_pid=$!
# The container's PID 1: the child of systemd-nspawn whose innermost PID is 1.
find_leader() {
  for status in /proc/[0-9]*/status; do
    if awk -v parent="$nspawn_pid" '
        $1 == "PPid:" { child = ($2 == parent) }
        $1 == "NSpid:" { init = (NF > 2 && $NF == 1) }
        END { exit !(child && init) }' "$status" 2>/dev/null; then
      leader=${status#/proc/}
      leader=${leader%/status}
      return 0
    fi
  done
  return 1
}
for _ in $(seq 60); do
  find_leader && break
  kill -0 "$nspawn_pid" 2>/dev/null || die "systemd-nspawn exited: $(tail -n 5 "$work/nspawn.log")"
  sleep 0.5
done
[ -n "$leader" ] || die "no container init after 30s"
ok "container init is host PID $leader"
state=
for _ in $(seq "$BOOT_TIMEOUT"); do
  state=$(ct systemctl is-system-running 2>/dev/null || true)
  case "$state" in running | degraded) break ;; esac
  sleep 1
done
case "$state" in
  running) ok "booted (system running)" ;;
  degraded)
    ok "booted (degraded: $(ct systemctl --failed --plain --no-legend | cut -d' ' -f1 | tr '\n' ' '))"
    ;;
  *) die "the container did not finish booting in ${BOOT_TIMEOUT}s (state: ${state:-unknown})" ;;
esac

if [ -n "$from" ]; then
  step "install the old package $(basename "$from") and edit its config"
  ct_sh 'apt-get install -y -q /root/ap-intake-old.deb </dev/null >/tmp/apt-old.log 2>&1 ||
    { cat /tmp/apt-old.log; exit 1; }'
  ct_sh 'printf "\n# edited by the operator before the upgrade\n" >>/etc/ap-intake/config.toml'
  before=$(config_state)
  ok "old package installed ($(ct dpkg-query -W -f '${Version}' ap-intake)), config edited"

  step "upgrade from the old package: dpkg -i, stdin closed"
  # No DEBIAN_FRONTEND, no --force-conf*: a conffile prompt would read the closed stdin and
  # fail the upgrade.
  ct_sh 'dpkg -i /root/ap-intake.deb </dev/null >/tmp/dpkg-up.log 2>&1 ||
    { cat /tmp/dpkg-up.log; exit 1; }'
  after=$(config_state)
  [ "$before" = "$after" ] || die "the upgrade changed the config (before: $before, after: $after)"
  ok "no prompt; the edited config is unchanged ($(echo "$after" | tail -n 1))"
fi

if [ -z "$from" ]; then
  step "install the package with apt"
  ct_sh 'apt-get install -y -q /root/ap-intake.deb </dev/null >/tmp/apt.log 2>&1 ||
    { cat /tmp/apt.log; exit 1; }'
  ok "apt-get install ./$(basename "$deb")"
else
  step "the upgraded package"
fi
ct getent passwd ap-intake >/dev/null || die "no ap-intake user"
ct getent group ap-intake >/dev/null || die "no ap-intake group"
ok "user and group ap-intake: $(ct getent passwd ap-intake)"
if [ -z "$from" ]; then
  [ "$(stat_of /etc/ap-intake/config.toml)" = "root:ap-intake 640" ] ||
    die "/etc/ap-intake/config.toml is $(stat_of /etc/ap-intake/config.toml), expected root:ap-intake 640"
  ct cmp -s /etc/ap-intake/config.toml /usr/share/doc/ap-intake/config.example.toml ||
    die "/etc/ap-intake/config.toml is not the example"
  ok "/etc/ap-intake/config.toml created from the example, root:ap-intake 640"
fi
conffiles=$(ct dpkg-query -W -f '${Conffiles}' ap-intake)
if [ -z "$from" ]; then
  [ -z "$conffiles" ] || die "the package has conffiles: $conffiles"
  ok "no conffiles"
else
  # The old package's conffile stays on disk and in dpkg's database, marked obsolete.
  if echo "$conffiles" | grep -q . && echo "$conffiles" | grep -vq ' obsolete$'; then
    die "conffiles that are not obsolete: $conffiles"
  fi
  ok "conffiles: $(echo "${conffiles:-none}" | tr -s ' \n' ' ' | sed 's/^ //')(an old conffile stays, obsolete, until purge)"
fi
[ "$(ct systemctl is-enabled ap-intake.service 2>/dev/null || true)" = disabled ] ||
  die "ap-intake.service is not 'disabled' after install"
[ "$(ct systemctl is-active ap-intake.service 2>/dev/null || true)" = inactive ] ||
  die "ap-intake.service runs after install: the package must not start it"
ok "unit installed, disabled and not running"

if [ -z "$from" ]; then
  step "a bad config (the example: no TLS files) exits 78 and is not restarted"
  if ct systemctl start ap-intake.service 2>/dev/null; then
    die "the service started with the unedited example config"
  fi
  sleep 7 # longer than RestartSec=5: a restart would have happened by now
  status=$(prop ExecMainStatus) restarts=$(prop NRestarts) active=$(prop ActiveState)
  [ "$status" = 78 ] || die "exit status $status, expected 78 (configuration error)"
  if [ "$restarts" != 0 ] || [ "$active" != failed ]; then
    die "after exit 78: NRestarts=$restarts ActiveState=$active, expected 0 and failed"
  fi
  ok "exit 78, state failed, no restart"
  ct systemctl reset-failed ap-intake.service
fi

step "start the service with a sandbox config (the operator's edit)"
ct_sh 'cat >/etc/ap-intake/config.toml <<EOF
# Edited by packaging/test-in-container.sh: a sandbox needs no key, TLS or platform.
sandbox = true

[storage]
data_dir = "/var/lib/ap-intake"
EOF'
edited=$(config_state)
ct_sh 'setpriv --reuid=ap-intake --regid=ap-intake --init-groups \
  ap-intake check-config --config /etc/ap-intake/config.toml >/tmp/check.log 2>&1 ||
  { cat /tmp/check.log; exit 1; }'
ok "check-config as ap-intake"
ct systemctl enable --now ap-intake.service >/dev/null 2>&1 ||
  die "systemctl enable --now failed: $(ct systemctl status ap-intake --no-pager -l 2>&1 | tail -n 15)"
[ "$(prop ActiveState)" = active ] || die "ActiveState=$(prop ActiveState) after start"
ok "active (Type=notify: READY=1 received), main PID $(prop MainPID)"
wait_for "/healthz = 200" 10 answers 200 /healthz
ok "GET /healthz: 200"
wait_for "/readyz = 200 (the queue commits a write)" 20 answers 200 /readyz
ok "GET /readyz: 200 (SQLite store writable under the sandbox)"
ct test -S /run/ap-intake/admin.sock || die "no admin socket /run/ap-intake/admin.sock"
ok "admin socket /run/ap-intake/admin.sock"
# A call refused by the sandbox (SystemCallErrorNumber=EPERM, read-only paths) shows only
# as an error in the log: list what this process logged at warning or above.
warnings=$(ct journalctl "_PID=$(prop MainPID)" --no-pager -q -o cat | grep -E ' (WARN|ERROR) ' |
  grep -v 'SANDBOX MODE' || true)
if [ -n "$warnings" ]; then
  echo "    note: warnings in the service's journal:"
  printf '      %s\n' "$warnings"
fi

step "systemctl reload keeps the service running"
pid_before=$(prop MainPID) restarts_before=$(prop NRestarts)
if ! ct systemctl reload ap-intake.service; then
  fail "systemctl reload failed"
else
  sleep 3
  if ! prop_is ActiveState active; then
    if [ "$(prop ExecMainCode)" = 2 ]; then # CLD_KILLED
      how="killed by signal $(prop ExecMainStatus) (1: SIGHUP is not handled)"
    else
      how="exit status $(prop ExecMainStatus)"
    fi
    fail "not active after reload: $(prop ActiveState)/$(prop SubState), $how"
  elif [ "$(prop MainPID)" != "$pid_before" ] || [ "$(prop NRestarts)" != "$restarts_before" ]; then
    fail "the reload replaced the process (PID $pid_before -> $(prop MainPID)): SIGHUP is not handled"
  elif ! answers 200 /healthz; then
    fail "/healthz after reload: $(http_status 9090 /healthz)"
  else
    ok "same PID $pid_before, still answering"
  fi
fi
if ! prop_is ActiveState active; then
  ct systemctl start ap-intake.service || die "cannot start the service again"
  echo "    (started the service again to go on)"
fi

step "a damaged store (exit 74) hits the start limit instead of looping"
ct systemctl stop ap-intake.service
# The start limit counts every start in the interval: begin with a clean count.
ct systemctl reset-failed ap-intake.service
store=$(ct find /var/lib/ap-intake -name '*.sqlite3' -type f | head -n 1)
[ -n "$store" ] || die "no *.sqlite3 under /var/lib/ap-intake"
ct_sh "mv '$store' '$store.ct-saved'
  for f in '$store'-wal '$store'-shm; do [ ! -e \"\$f\" ] || mv \"\$f\" \"\$f.ct-saved\"; done
  head -c 65536 /dev/urandom >'$store'; chown ap-intake:ap-intake '$store'"
ct systemctl start ap-intake.service 2>/dev/null && die "the service started on a damaged store"
burst=$(prop StartLimitBurst) interval=$(prop StartLimitIntervalUSec)
# Between attempts the unit is "auto-restart"; "failed" means systemd gave up (exit 78
# aside, which is not retried at all).
wait_for "the unit to stay failed ($burst starts in $interval)" 90 prop_is SubState failed
sleep 6 # longer than RestartSec: no further restart is scheduled
status=$(prop ExecMainStatus) restarts=$(prop NRestarts)
prop_is SubState failed || die "the unit left the failed state: $(prop SubState)"
[ "$restarts" -le "$burst" ] || die "$restarts restarts, more than StartLimitBurst=$burst"
[ "$status" = 74 ] || fail "the store failure exited $status, expected 74 (D34)"
ok "exit $status, $restarts restarts, then failed for good (StartLimitBurst=$burst in $interval)"
ct_sh "rm -f '$store' '$store'-wal '$store'-shm
  for f in '$store' '$store'-wal '$store'-shm; do [ ! -e \"\$f.ct-saved\" ] || mv \"\$f.ct-saved\" \"\$f\"; done"
ct systemctl reset-failed ap-intake.service
ct systemctl start ap-intake.service || die "no start after restoring the store"
[ "$(prop ActiveState)" = active ] || die "not active after restoring the store"
ok "store restored, running again"

step "upgrade to $deb_version+ct1 with the edited config: dpkg -i, stdin closed"
pid_before=$(prop MainPID)
ct_sh 'dpkg -i /root/ap-intake-bumped.deb </dev/null >/tmp/dpkg-bump.log 2>&1 ||
  { cat /tmp/dpkg-bump.log; exit 1; }'
[ "$(ct dpkg-query -W -f '${Version}' ap-intake)" = "$deb_version+ct1" ] || die "version not upgraded"
[ "$(config_state)" = "$edited" ] || die "the upgrade changed the edited config: $(config_state)"
ok "no prompt; the edited config is unchanged (content, owner, mode)"
wait_for "active after the upgrade" 10 prop_is ActiveState active
[ "$(prop MainPID)" != "$pid_before" ] || die "the upgrade did not restart the running service"
ok "running the new version (try-restart: PID $pid_before -> $(prop MainPID))"
[ "$(ct systemctl is-enabled ap-intake.service)" = enabled ] || die "the upgrade changed is-enabled"
ok "still enabled"

step "purge"
ct_sh 'mkdir -p /etc/ap-intake/tls && touch /etc/ap-intake/tls/server.key'
ct_sh 'dpkg --purge ap-intake </dev/null >/tmp/dpkg-purge.log 2>&1 ||
  { cat /tmp/dpkg-purge.log; exit 1; }'
[ "$(ct dpkg-query -W -f '${db:Status-Status}' ap-intake 2>/dev/null || true)" != installed ] ||
  die "ap-intake is still installed"
for dir in /etc/ap-intake /var/lib/ap-intake /var/log/ap-intake /run/ap-intake; do
  if ct test -e "$dir"; then die "$dir is still there after purge"; fi
done
ok "/etc/ap-intake, /var/lib/ap-intake, /var/log/ap-intake and /run/ap-intake are gone"
ct test ! -e /etc/systemd/system/multi-user.target.wants/ap-intake.service ||
  die "the enable link is still there"
ok "no multi-user.target.wants link"
ct getent passwd ap-intake >/dev/null || die "purge deleted the ap-intake user"
ct getent group ap-intake >/dev/null || die "purge deleted the ap-intake group"
ok "user and group ap-intake kept"

[ "$failures" -eq 0 ] || die "$failures check(s) failed (see FAIL above)"
