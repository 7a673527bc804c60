"""A plain sequential CONNECT client, the second method of `proxy_bench setup`.

Blocking sockets, one connection at a time: connect, send CONNECT, read the reply head, close.
With no target it only connects and closes (the direct baseline, as the Rust client's).
Prints "RATE P50_US P99_US" for N round trips after WARM ones.

Usage: sequential_client.py HOST PORT TARGET|- N WARM
"""

import socket
import sys
import time


def one(addr, request):
    s = socket.create_connection(addr)
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if request:
            s.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                data = s.recv(256)
                if not data:
                    raise SystemExit(f"the proxy closed: {head!r}")
                head += data
            if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
                raise SystemExit(f"the proxy did not answer 200: {head!r}")
    finally:
        s.close()


def main():
    host, port, target, n, warm = sys.argv[1:6]
    addr, n, warm = (host, int(port)), int(n), int(warm)
    request = None
    if target != "-":
        request = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
    for _ in range(warm):
        one(addr, request)
    clock = time.perf_counter
    latencies = []
    start = clock()
    for _ in range(n):
        t = clock()
        one(addr, request)
        latencies.append(clock() - t)
    elapsed = clock() - start
    latencies.sort()
    p50 = latencies[n // 2] * 1e6
    p99 = latencies[min(int(n * 0.99), n - 1)] * 1e6
    print(f"{n / elapsed:.1f} {p50:.1f} {p99:.1f}")


main()
