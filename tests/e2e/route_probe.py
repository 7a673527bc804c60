"""Credential routes from inside a hardened container (run by tests/it/routes.rs).

Prints key=value lines. It calls the API route with Python's urllib (which honours NO_PROXY,
so it goes to the relay on 127.0.0.1 directly), asks for a path outside the route, installs a
package with pip from a basic-auth index through a second route, and then looks for the
secret everywhere it could be: its own environment, every /proc/*/environ and
/proc/*/cmdline, and the files of the container. It does not know the secret: only its public
marker, which the host made the secret's first characters and hands over in two halves
(PROBE_MARKER_HEAD, PROBE_MARKER_TAIL) so that the whole marker is nowhere in the
container but in this process's memory; a hit names a place the host then checks.
"""

import os
import subprocess
import sys
import urllib.error
import urllib.request

MARKER = (os.environ["PROBE_MARKER_HEAD"] + os.environ["PROBE_MARKER_TAIL"]).encode()


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except Exception as e:  # noqa: BLE001 - every failure is a finding
        return 0, f"failed {type(e).__name__}: {e}"


api = os.environ.get("API_URL", "")
print("api_url=" + api)
print("no_proxy=" + os.environ.get("NO_PROXY", "<unset>"))
status, body = get(api + "/echo")
print(f"echo_status={status}")
print("echo_redacted=" + ("yes" if "Bearer [REDACTED]" in body else "no: " + body.replace("\n", " | ")[:400]))
status, body = get(api + "/private")
print(f"outside_status={status} " + body.split("\n", 1)[0])

hostile = os.environ.get("HOSTILE_URL", "")
try:
    urllib.request.urlopen(hostile + "/reason", timeout=30)
    print("reason=no error")
except urllib.error.HTTPError as e:
    print(f"reason={e.code} {e.reason}")
except Exception as e:  # noqa: BLE001
    print(f"reason=failed {type(e).__name__}: {e}")
parts = []
for wanted in ("bytes=0-14", "bytes=15-"):
    request = urllib.request.Request(hostile + "/range", headers={"Range": wanted})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            parts.append(f"{response.status} {response.read().decode(errors='replace')}")
    except urllib.error.HTTPError as e:
        parts.append(f"{e.code} {e.read().decode(errors='replace')}")
print("ranged=" + "|".join(parts))
status, body = get(hostile + "/cut")
print(f"cut={status} {body}")

index = os.environ.get("INDEX_URL", "")
pip = subprocess.run(
    [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
     "--target", "/workspace/.deps", "--index-url", index + "/simple/",
     "--trusted-host", "127.0.0.1", "agprobe"],
    capture_output=True, text=True, timeout=120)
print(f"pip_exit={pip.returncode}")
if pip.returncode != 0:
    print("pip_said=" + (pip.stdout + pip.stderr).replace("\n", " | ")[-600:])
sys.path.insert(0, "/workspace/.deps")
try:
    import agprobe
    print(f"agprobe={agprobe.VALUE}")
except Exception as e:  # noqa: BLE001
    print(f"agprobe=failed {e}")

traces = []
if MARKER in "\0".join(f"{k}={v}" for k, v in os.environ.items()).encode():
    traces.append("os.environ")
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for part in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as f:
                if MARKER in f.read():
                    traces.append(f"/proc/{pid}/{part}")
        except OSError:
            pass
scanned = 0
for top in ("/",):
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev")]
        for name in files:
            path = os.path.join(root, name)
            try:
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    data = f.read(8 * 1024 * 1024)
                scanned += 1
                if MARKER in data:
                    traces.append(path)
            except OSError:
                pass
print(f"scanned_files={scanned}")
print("traces=" + (",".join(traces) if traces else "none"))
print("done=1")
