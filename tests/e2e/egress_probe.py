# The egress probe: run with python3 inside a network = "egress" container (the pytest
# image). Prints one key=value line per check; the e2e test on the host judges them. It
# never sends to an address outside this machine: the only names it uses are *.test names
# that only the host's fake DNS server answers, through the proxy.
import os
import socket
import ssl
import urllib.request

ALLOWED = os.environ["PROBE_ALLOWED"]
OFFLIST = os.environ["PROBE_OFFLIST"]
PORT = int(os.environ["PROBE_PORT"])
UPSTREAM_IP = os.environ["PROBE_UPSTREAM_IP"]
DNS_PORT = int(os.environ["PROBE_DNS_PORT"])
CA = os.environ["PROBE_CA"]
PROXY = os.environ["HTTPS_PROXY"]
RELAY_PORT = int(PROXY.rsplit(":", 1)[1])


def say(key, value):
    print(f"{key}={value}", flush=True)


def attempt(key, action):
    try:
        say(key, action())
    except Exception as e:  # every failure is a result here
        say(key, f"failed: {type(e).__name__}: {e}")


def fetch(host, proxy=True):
    context = ssl.create_default_context(cafile=CA)
    handlers = [urllib.request.HTTPSHandler(context=context)]
    if not proxy:
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    with opener.open(f"https://{host}:{PORT}/", timeout=20) as response:
        return f"{response.status} {response.read().decode().strip()}"


def relay(request):
    with socket.create_connection(("127.0.0.1", RELAY_PORT), timeout=20) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    head = data.split(b"\r\n\r\n")[0].decode(errors="replace").split("\r\n")
    reason = [h.split(":", 1)[1].strip() for h in head[1:] if h.lower().startswith("x-agentguard-reason:")]
    return f"{head[0].split(' ')[1]} {reason[0] if reason else '-'}"


def interfaces():
    with open("/proc/net/dev") as f:
        return ",".join(sorted(line.split(":")[0].strip() for line in f.readlines()[2:]))


def routes():
    devices = set()
    for path, column in (("/proc/net/route", 0), ("/proc/net/ipv6_route", 9)):
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            continue
        if path.endswith("/route"):
            lines = lines[1:]
        for line in lines:
            fields = line.split()
            if len(fields) > column:
                devices.add(fields[column])
    return "loopback-only" if devices <= {"lo"} else f"other: {sorted(devices)}"


def tcp(ip, port):
    with socket.create_connection((ip, port), timeout=5):
        return "connected"


def dns_query():
    # A query for the allowed name, straight to the host's test DNS server's port.
    query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for label in ALLOWED.split("."):
        query += bytes([len(label)]) + label.encode()
    query += b"\x00\x00\x01\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.connect(("127.0.0.1", DNS_PORT))
        s.send(query)
        answer = s.recv(512)
        return f"answered {len(answer)} bytes"


def resolve():
    return socket.getaddrinfo(ALLOWED, PORT)[0][4][0]


attempt("allowed", lambda: fetch(ALLOWED))
attempt("offlist", lambda: fetch(OFFLIST))
attempt("no_proxy", lambda: fetch(ALLOWED, proxy=False))
attempt("resolve", resolve)
attempt("interfaces", interfaces)
attempt("routes", routes)
attempt("host_upstream", lambda: tcp(UPSTREAM_IP, PORT))
attempt("host_dns", dns_query)
attempt("relay_get", lambda: relay(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
attempt(
    "relay_connect_offlist",
    lambda: relay(f"CONNECT {OFFLIST}:{PORT} HTTP/1.1\r\nHost: {OFFLIST}:{PORT}\r\n\r\n".encode()),
)
say("done", 1)
