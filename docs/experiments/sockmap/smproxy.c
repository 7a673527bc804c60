/*
 * A rejected experiment, kept so its figures can be reproduced: NOT part of AgentGuard, not
 * built by cargo, never run by the tests. See README.md beside it.
 *
 * A CONNECT proxy just complete enough for `proxy_bench throughput`: it dials 127.0.0.2 on the
 * port the CONNECT names, answers 200, and then leaves both sockets to the kernel: a SOCKHASH
 * maps each socket's cookie to its peer, and an sk_skb verdict program (hand-assembled below)
 * redirects every skb a socket receives to its peer's egress, counting the bytes per socket.
 * A zero-length skb (a bare FIN) is dropped, not redirected: redirecting it makes the kernel's
 * backlog report EPIPE on the peer. After a FIN the proxy waits until the peer's send queue has
 * taken every redirected byte (TCP_INFO bytes_acked + SIOCOUTQ against the count) before it
 * passes the FIN on, so no byte is lost.
 *
 * Build: gcc -O2 -o smproxy smproxy.c -lpthread   (root, or CAP_BPF and CAP_NET_ADMIN, to run)
 * SNDBUF=BYTES sets SO_SNDBUFFORCE on both sockets of every tunnel.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/bpf.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define INSN(code, dst, src, off, imm) ((struct bpf_insn){code, dst, src, off, imm})

static int peers_fd, counts_fd;

static int sys_bpf(int cmd, union bpf_attr *attr) {
    return syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

static int map_create(int type, int key, int value, int entries) {
    union bpf_attr a = {0};
    a.map_type = type;
    a.key_size = key;
    a.value_size = value;
    a.max_entries = entries;
    int fd = sys_bpf(BPF_MAP_CREATE, &a);
    if (fd < 0) { perror("BPF_MAP_CREATE"); exit(1); }
    return fd;
}

static int verdict_load(void) {
    struct bpf_insn prog[] = {
        INSN(0xbf, 6, 1, 0, 0),          /* r6 = ctx */
        INSN(0x61, 1, 6, 0, 0),          /* r1 = skb->len */
        INSN(0x55, 1, 0, 2, 0),          /* if r1 != 0 goto +2 */
        INSN(0xb7, 0, 0, 0, 0),          /* r0 = SK_DROP (a bare FIN) */
        INSN(0x95, 0, 0, 0, 0),          /* exit */
        INSN(0xbf, 1, 6, 0, 0),          /* r1 = ctx */
        INSN(0x85, 0, 0, 0, BPF_FUNC_get_socket_cookie),
        INSN(0x7b, 10, 0, -8, 0),        /* *(u64 *)(fp - 8) = cookie */
        INSN(0x18, 1, BPF_PSEUDO_MAP_FD, 0, 0), INSN(0, 0, 0, 0, 0), /* r1 = counts */
        INSN(0xbf, 2, 10, 0, 0),         /* r2 = fp */
        INSN(0x07, 2, 0, 0, -8),         /* r2 -= 8 */
        INSN(0x85, 0, 0, 0, BPF_FUNC_map_lookup_elem),
        INSN(0x15, 0, 0, 2, 0),          /* if !count goto +2 */
        INSN(0x61, 1, 6, 0, 0),          /* r1 = skb->len */
        INSN(0xdb, 0, 1, 0, BPF_ADD),    /* atomic *count += r1 */
        INSN(0xbf, 1, 6, 0, 0),          /* r1 = ctx */
        INSN(0x18, 2, BPF_PSEUDO_MAP_FD, 0, 0), INSN(0, 0, 0, 0, 0), /* r2 = peers */
        INSN(0xbf, 3, 10, 0, 0),         /* r3 = fp */
        INSN(0x07, 3, 0, 0, -8),         /* r3 -= 8: the cookie */
        INSN(0xb7, 4, 0, 0, 0),          /* r4 = 0: the peer's egress */
        INSN(0x85, 0, 0, 0, BPF_FUNC_sk_redirect_hash),
        INSN(0x95, 0, 0, 0, 0),          /* exit */
    };
    prog[8].imm = counts_fd;
    prog[17].imm = peers_fd;
    static char log[65536];
    union bpf_attr a = {0};
    a.prog_type = BPF_PROG_TYPE_SK_SKB;
    a.insns = (uint64_t)(uintptr_t)prog;
    a.insn_cnt = sizeof prog / sizeof prog[0];
    a.license = (uint64_t)(uintptr_t)"Apache-2.0";
    a.log_buf = (uint64_t)(uintptr_t)log;
    a.log_size = sizeof log;
    a.log_level = 1;
    int fd = sys_bpf(BPF_PROG_LOAD, &a);
    if (fd < 0) { perror("BPF_PROG_LOAD"); fprintf(stderr, "%s\n", log); exit(1); }
    return fd;
}

static void map_put(int map, uint64_t key, uint64_t value) {
    union bpf_attr a = {0};
    a.map_fd = map;
    a.key = (uint64_t)(uintptr_t)&key;
    a.value = (uint64_t)(uintptr_t)&value;
    if (sys_bpf(BPF_MAP_UPDATE_ELEM, &a) < 0) perror("BPF_MAP_UPDATE_ELEM");
}

static void map_del(int map, uint64_t key) {
    union bpf_attr a = {0};
    a.map_fd = map;
    a.key = (uint64_t)(uintptr_t)&key;
    sys_bpf(BPF_MAP_DELETE_ELEM, &a);
}

static uint64_t counted(uint64_t cookie) {
    uint64_t value = 0;
    union bpf_attr a = {0};
    a.map_fd = counts_fd;
    a.key = (uint64_t)(uintptr_t)&cookie;
    a.value = (uint64_t)(uintptr_t)&value;
    sys_bpf(BPF_MAP_LOOKUP_ELEM, &a);
    return value;
}

static uint64_t cookie_of(int fd) {
    uint64_t cookie = 0;
    socklen_t len = sizeof cookie;
    getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len);
    return cookie;
}

/* Every byte a socket's send queue has taken so far: acknowledged plus queued. */
static uint64_t taken(int fd) {
    struct tcp_info info = {0};
    socklen_t len = sizeof info;
    int queued = 0;
    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len);
    ioctl(fd, SIOCOUTQ, &queued);
    return info.tcpi_bytes_acked + (uint64_t)queued;
}

static void *tunnel(void *arg) {
    int client = (int)(intptr_t)arg, n = 0;
    char head[4096];
    while (n < (int)sizeof head - 1) {
        int r = read(client, head + n, sizeof head - 1 - n);
        if (r <= 0) { close(client); return 0; }
        n += r;
        head[n] = 0;
        if (strstr(head, "\r\n\r\n")) break;
    }
    char *colon = strchr(head, ':');
    int upstream = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(colon ? atoi(colon + 1) : 0)};
    inet_pton(AF_INET, "127.0.0.2", &to.sin_addr);
    if (!colon || connect(upstream, (struct sockaddr *)&to, sizeof to) < 0) {
        close(client); close(upstream); return 0;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (getenv("SNDBUF")) {
        int size = atoi(getenv("SNDBUF"));
        setsockopt(client, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size);
        setsockopt(upstream, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size);
    }
    const char *ok = "HTTP/1.1 200 Connection Established\r\n\r\n";
    if (write(client, ok, strlen(ok)) < 0) { close(client); close(upstream); return 0; }
    int fds[2] = {client, upstream};
    uint64_t cookies[2] = {cookie_of(client), cookie_of(upstream)};
    uint64_t before[2] = {taken(client), taken(upstream)};
    for (int i = 0; i < 2; i++) map_put(counts_fd, cookies[i], 0);
    map_put(peers_fd, cookies[0], (uint64_t)upstream);
    map_put(peers_fd, cookies[1], (uint64_t)client);
    int done[2] = {0, 0};
    while (!(done[0] && done[1])) {
        struct pollfd p[2];
        for (int i = 0; i < 2; i++)
            p[i] = (struct pollfd){fds[i], done[i] ? 0 : POLLIN | POLLRDHUP, 0};
        poll(p, 2, -1);
        for (int i = 0; i < 2; i++) {
            if (done[i] || !p[i].revents) continue;
            char buf[65536];
            int r = read(fds[i], buf, sizeof buf);
            if (r > 0) { fprintf(stderr, "%d bytes reached user space\n", r); continue; }
            if (r < 0 && errno == EAGAIN) continue;
            /* End of stream: wait until the peer has taken every byte redirected to it. */
            int peer = fds[1 - i];
            while (taken(peer) - before[1 - i] < counted(cookies[i])) {
                struct timespec pause = {0, 100000};
                nanosleep(&pause, 0);
            }
            shutdown(peer, SHUT_WR);
            done[i] = 1;
        }
    }
    for (int i = 0; i < 2; i++) { map_del(peers_fd, cookies[i]); map_del(counts_fd, cookies[i]); }
    close(client);
    close(upstream);
    return 0;
}

int main(void) {
    peers_fd = map_create(BPF_MAP_TYPE_SOCKHASH, 8, 8, 4096);
    counts_fd = map_create(BPF_MAP_TYPE_HASH, 8, 8, 4096);
    union bpf_attr a = {0};
    a.target_fd = peers_fd;
    a.attach_bpf_fd = verdict_load();
    a.attach_type = BPF_SK_SKB_VERDICT;
    if (sys_bpf(BPF_PROG_ATTACH, &a) < 0) { perror("BPF_PROG_ATTACH"); exit(1); }
    int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in at = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &at.sin_addr);
    socklen_t len = sizeof at;
    if (bind(listener, (struct sockaddr *)&at, sizeof at) < 0 || listen(listener, 1024) < 0) {
        perror("listen"); exit(1);
    }
    getsockname(listener, (struct sockaddr *)&at, &len);
    printf("listening on 127.0.0.1:%d\n", ntohs(at.sin_port));
    fflush(stdout);
    for (;;) {
        int client = accept(listener, 0, 0);
        if (client < 0) continue;
        pthread_t thread;
        pthread_create(&thread, 0, tunnel, (void *)(intptr_t)client);
        pthread_detach(thread);
    }
}
