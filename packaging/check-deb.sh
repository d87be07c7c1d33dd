#!/bin/sh
# Checks a built ap-intake .deb: files, modes, conffiles, maintainer scripts, and that the
# maintainer scripts never enable or start the unit. Usage: packaging/check-deb.sh FILE.deb
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
expect_file etc/ap-intake/config.toml -rw-r-----
expect_file usr/share/doc/ap-intake/README.md -rw-r--r--

if [ -f "$work/control/conffiles" ] && grep -qx '/etc/ap-intake/config.toml' "$work/control/conffiles"; then
    ok "/etc/ap-intake/config.toml is a conffile"
else
    fail "/etc/ap-intake/config.toml is not listed in conffiles"
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
    if [ "$failures" -eq "$before" ]; then
        ok "maintainer script $script"
    fi
done

if [ "$failures" -ne 0 ]; then
    echo "check-deb: $deb: $failures check(s) failed" >&2
    exit 1
fi
echo "check-deb: $deb: all checks passed"
