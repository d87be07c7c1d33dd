#!/bin/sh
# Checks a built ap-intake .deb: files, modes, no conffile (D35), Depends, the unit's
# restart and reload settings (D34), the maintainer scripts, and that they never enable or
# start the unit. Usage: packaging/check-deb.sh FILE.deb
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 FILE.deb" >&2
    exit 2
fi
deb=$1
if [ ! -f "$deb" ]; then
    echo "check-deb: $deb: no such file" >&2
    exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! dpkg-deb --info "$deb" >/dev/null 2>"$work/err"; then
    echo "check-deb: $deb is not a readable .deb: $(cat "$work/err")" >&2
    exit 1
fi
dpkg-deb --contents "$deb" >"$work/contents"
dpkg-deb --control "$deb" "$work/control"

failures=0
fail() {
    echo "check-deb: FAIL: $*" >&2
    failures=$((failures + 1))
}
ok() {
    echo "check-deb: ok: $*"
}

# mode_of PATH: the mode string of ./PATH in the archive, empty if absent.
mode_of() {
    awk -v p="./$1" '$6 == p { print $1; exit }' "$work/contents"
}

# expect_file PATH MODE
expect_file() {
    mode=$(mode_of "$1")
    if [ -z "$mode" ]; then
        fail "/$1 is missing from the package"
    elif [ "$mode" != "$2" ]; then
        fail "/$1 has mode $mode, expected $2"
    else
        ok "/$1 $mode"
    fi
}

expect_file usr/bin/ap-intake -rwxr-xr-x
expect_file usr/lib/systemd/system/ap-intake.service -rw-r--r--
expect_file usr/lib/sysusers.d/ap-intake.conf -rw-r--r--
expect_file usr/share/doc/ap-intake/config.example.toml -rw-r--r--
expect_file usr/share/doc/ap-intake/README.md -rw-r--r--
expect_file usr/share/ap-intake/prometheus/ap-intake.rules.yml -rw-r--r--
expect_file usr/share/ap-intake/prometheus/ap-intake.rules.test.yml -rw-r--r--

# D35: the config belongs to the operator. Nothing under /etc, hence no conffile: postinst
# creates /etc/ap-intake/config.toml when it is absent, and dpkg never prompts about it.
in_etc=$(awk '$6 ~ /^\.\/etc\// { print substr($6, 2) }' "$work/contents")
if [ -n "$in_etc" ]; then
    fail "the package installs files under /etc (the config must not be a conffile): $(echo "$in_etc" | tr '\n' ' ')"
else
    ok "nothing installed under /etc"
fi
if [ -s "$work/control/conffiles" ]; then
    fail "the package has conffiles: $(tr '\n' ' ' <"$work/control/conffiles")"
else
    ok "no conffiles"
fi

# postinst falls back to `ap-intake print-config` when /usr/share/doc is excluded: both
# must be the same example.
dpkg-deb -x "$deb" "$work/root"
if "$work/root/usr/bin/ap-intake" print-config >"$work/printed" 2>"$work/err"; then
    if cmp -s "$work/printed" "$work/root/usr/share/doc/ap-intake/config.example.toml"; then
        ok "config.example.toml is the example the binary prints"
    else
        fail "usr/share/doc/ap-intake/config.example.toml differs from \`ap-intake print-config\`"
    fi
else
    fail "ap-intake print-config failed: $(cat "$work/err")"
fi

field() {
    sed -n "s/^$1: //p" "$work/control/control"
}
[ "$(field Package)" = ap-intake ] || fail "Package is '$(field Package)', expected ap-intake"
[ "$(field Section)" = net ] || fail "Section is '$(field Section)', expected net"
[ "$(field Priority)" = optional ] || fail "Priority is '$(field Priority)', expected optional"
case "$(field Maintainer)" in
    "ap-intake maintainers"*) ;;
    *) fail "Maintainer is '$(field Maintainer)', expected ap-intake maintainers" ;;
esac
# Depends: the binary's libraries ($auto), what postinst creates the user with, and
# /bin/kill for the unit's ExecReload; glibc 2.36 for the packed relocations (build.rs).
depends=$(field Depends)
for dep in 'libc6' 'libc6 (>= 2.36)' 'systemd-sysusers | adduser' 'procps'; do
    case ", $depends," in
        *", $dep"[\ ,]*) ok "Depends: $dep" ;;
        *) fail "Depends '$depends' lacks '$dep'" ;;
    esac
done

# The unit (D34): reload by SIGHUP, no restart loop on a bad config, a start limit.
unit=$work/root/usr/lib/systemd/system/ap-intake.service
# shellcheck disable=SC2016 # $MAINPID is the unit's, not ours
for line in 'ExecReload=/bin/kill -HUP $MAINPID' 'RestartPreventExitStatus=78' \
    'Restart=on-failure' 'RuntimeDirectory=ap-intake' 'StateDirectory=ap-intake' \
    'LogsDirectory=ap-intake'; do
    if grep -qxF "$line" "$unit"; then
        ok "unit: $line"
    else
        fail "unit: no line '$line'"
    fi
done
for key in StartLimitIntervalSec StartLimitBurst; do
    if sed -n '/^\[Unit\]/,/^\[/p' "$unit" | grep -q "^$key=[1-9]"; then
        ok "unit: [Unit] $key"
    else
        fail "unit: no $key in [Unit]"
    fi
done

for script in postinst prerm postrm; do
    s="$work/control/$script"
    before=$failures
    if [ ! -f "$s" ]; then
        fail "maintainer script $script is missing"
        continue
    fi
    if [ ! -x "$s" ]; then
        fail "maintainer script $script is not executable"
    fi
    if ! sh -n "$s" 2>"$work/err"; then
        fail "maintainer script $script is not valid sh: $(cat "$work/err")"
    fi
    if ! grep -q '^set -e' "$s"; then
        fail "maintainer script $script has no 'set -e'"
    fi
    if grep -q '#DEBHELPER#' "$s"; then
        fail "maintainer script $script still contains an unreplaced #DEBHELPER# token"
    fi
    # The package ships the unit disabled: no command (comments and echo lines aside) may
    # enable or start it. try-restart only restarts a service the operator already runs.
    if grep -v '^[[:space:]]*#' "$s" | grep -v '^[[:space:]]*echo' |
        grep -Eq '(systemctl|deb-systemd-helper|deb-systemd-invoke)[^;|&]*[[:space:]](enable|start|restart|reenable)([[:space:]]|$)'; then
        fail "maintainer script $script enables or starts the service"
    fi
    # Debian policy: the system user and group stay on purge (files may still be theirs).
    if grep -v '^[[:space:]]*#' "$s" | grep -Eq '(deluser|userdel|delgroup|groupdel)([[:space:]]|$)'; then
        fail "maintainer script $script deletes the ap-intake user or group"
    fi
    if [ "$failures" -eq "$before" ]; then
        ok "maintainer script $script"
    fi
done

# D35: purge removes the config directory, the queue and the logs.
for dir in /etc/ap-intake /var/lib/ap-intake /var/log/ap-intake; do
    if sed -n '/^[[:space:]]*purge)/,/;;/p' "$work/control/postrm" | grep -v '^[[:space:]]*#' |
        grep -q "rm -rf .*$dir\( \|\$\)"; then
        ok "postrm purge removes $dir"
    else
        fail "postrm purge does not remove $dir"
    fi
done

if [ "$failures" -ne 0 ]; then
    echo "check-deb: $deb: $failures check(s) failed" >&2
    exit 1
fi
echo "check-deb: $deb: all checks passed"
