#!/bin/sh
# Several copies of this script add to one shared counter without losing an increment,
# speaking batond's protocol with nothing but `nc -U` (OpenBSD netcat, the default on
# Debian, Ubuntu and macOS) or socat: one JSON request per line, one answer per line.
#
#   scripts/examples/shell/count_with_lock.sh NAME [TIMES]     (run it twice at once)
#
# Each round takes the lock file:counter.txt (waiting for it), reads the counter, writes
# it back with expected_version (a compare-and-set, so even a holder whose lease expired
# could not clobber a newer value), and releases the lock saying what it did.
set -eu
name=${1:-shell-$$}
times=${2:-10}
sock=${BATON_SOCKET_PATH:-${BATON_HOME:-$HOME/.baton}/baton.sock}
ns=${BATON_EXAMPLE_NAMESPACE:-shell-demo}

# One request line in, one answer line out.
call() {
    if command -v socat >/dev/null 2>&1; then
        printf '%s\n' "$1" | socat -t 30 - "UNIX-CONNECT:$sock"
    else
        printf '%s\n' "$1" | nc -N -U "$sock"
    fi
}

# The first number after "FIELD": in a JSON line (enough for the flat answers used here).
number() { sed -n "s/.*\"$1\":\\([0-9][0-9]*\\).*/\\1/p" | head -n 1; }
string() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" | head -n 1; }

i=0
while [ "$i" -lt "$times" ]; do
    answer=$(call "{\"method\":\"AcquireResourceLock\",\"params\":{\"resource_key\":\"file:counter.txt\",\"owner\":\"$name\",\"ttl_secs\":30,\"wait_ms\":60000}}")
    lease=$(printf '%s' "$answer" | string lease_id)
    if [ -z "$lease" ]; then
        echo "$name: could not take the lock: $answer" >&2
        exit 1
    fi
    got=$(call "{\"method\":\"Get\",\"params\":{\"namespace\":\"$ns\",\"key\":\"counter\"}}")
    case $got in
        *'"found":true'*)
            value=$(printf '%s' "$got" | number value)
            version=$(printf '%s' "$got" | number version) ;;
        *) value=0; version=0 ;;
    esac
    set_answer=$(call "{\"method\":\"Set\",\"params\":{\"namespace\":\"$ns\",\"key\":\"counter\",\"value\":$((value + 1)),\"expected_version\":$version,\"updated_by\":\"$name\"}}")
    case $set_answer in
        *'"error"'*) echo "$name: write refused: $set_answer" >&2; exit 1 ;;
    esac
    call "{\"method\":\"ReleaseResourceLock\",\"params\":{\"resource_key\":\"file:counter.txt\",\"lease_id\":\"$lease\",\"outcome\":\"modified\"}}" >/dev/null
    i=$((i + 1))
done
final=$(call "{\"method\":\"Get\",\"params\":{\"namespace\":\"$ns\",\"key\":\"counter\"}}" | number value)
echo "$name: added $times; counter is now $final"
