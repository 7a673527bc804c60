#!/bin/sh
# A fake `docker` CLI for tests of what happens around a container engine: the executor's
# timeout, output cap, kill by name, hung clients, and engine exit statuses, without an
# engine. `run` starts the allowlisted argv (after `--entrypoint`) as a plain child process,
# records its pid under the container's name, and exits with its status; `kill NAME` sends
# SIGKILL to that pid. Every call is appended to state/calls, one line per call. A relay
# entrypoint (`network = "egress"`) runs from its mount's host source, with the socket's
# host source in place of its in-container path, so the relay itself is real.
# The state folder sits beside this script, since the executor clears the environment.
state="$(dirname "$0")/state"
mkdir -p "$state"
echo "$*" >> "$state/calls"

# Global flags (podman's --runtime and --runtime-flag) come before the subcommand.
while [ $# -gt 0 ]; do
    case "$1" in
        --runtime|--runtime-flag) shift 2 ;;
        *) break ;;
    esac
done

sub="$1"
shift
case "$sub" in
    run)
        name=""
        relay=""
        socket=""
        while [ $# -gt 0 ]; do
            case "$1" in
                --name) name="$2"; shift 2 ;;
                --mount)
                    case "$2" in
                        *target=/run/agentguard/relay,*) relay="${2#*source=}"; relay="${relay%%,*}" ;;
                        *target=/run/agentguard/proxy.sock,*) socket="${2#*source=}"; socket="${socket%%,*}" ;;
                    esac
                    shift 2 ;;
                --env) export "$2"; shift 2 ;;
                --entrypoint) program="$2"; shift 3; break ;;
                --*=*) shift ;;
                --rm|--init|--read-only|--no-healthcheck) shift ;;
                *) shift 2 ;;
            esac
        done
        if [ "$program" = /run/agentguard/relay ]; then
            # The receipt is what a container would show; this "container" is a host process,
            # so the fake says it (the real checks run in e2e).
            ids=""
            if [ "$1" = --receipt ]; then
                ids="$2"
                shift 2
                printf '\036agentguard-receipt {"decision":"allow","failed":[],"checks":{"fake_engine":"no container: %s"},"micros":0}\n' "$ids" >&2
            fi
            if [ "$1" = -- ]; then
                shift
                program="$1"
                shift
            else
                port="$1"
                shift 2
                set -- "$port" "$socket" "$@"
                program="$relay"
            fi
        fi
        "$program" "$@" &
        child=$!
        echo "$child" > "$state/$name.pid"
        wait "$child"
        status=$?
        # A container's end takes its relay's forwarder with it; here it is a host process.
        if [ -n "$socket" ]; then
            pkill -KILL -f -- "--forward $socket" 2>/dev/null
        fi
        rm -f "$state/$name.pid"
        echo "exited $name $status" >> "$state/events"
        exit "$status"
        ;;
    kill)
        # `fail_kills`: the daemon refuses every kill and removal (the container keeps running).
        if [ -f "$state/fail-kill" ]; then
            echo "Error response from daemon: cannot kill container $1: permission denied" >&2
            exit 1
        fi
        if [ -f "$state/$1.pid" ]; then
            kill -KILL "$(cat "$state/$1.pid")" 2>/dev/null
            # Noted before the pid file goes: a test that sees the container gone sees its kill.
            echo "killed $1" >> "$state/events"
            rm -f "$state/$1.pid"
        fi
        pkill -KILL -f -- "--forward .*/$1/proxy.sock" 2>/dev/null
        exit 0
        ;;
    rm)
        if [ -f "$state/fail-kill" ]; then
            echo "Error response from daemon: cannot remove container: permission denied" >&2
            exit 1
        fi
        exit 0
        ;;
    ps|info|version)
        exit 0
        ;;
    image)
        # `image inspect --format FORMAT IMAGE`: an image ID of 64 `a`s.
        echo "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        exit 0
        ;;
    *)
        echo "fake engine: unknown subcommand $sub" >&2
        exit 125
        ;;
esac
