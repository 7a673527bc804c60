# Runs inside the container under test (busybox sh) and prints one `key=value` line per
# isolation property; `cargo xtask e2e` compares them with what the hardening promises.
# Every probe must be able to fail: each one tries the forbidden thing and reports what happened.
echo "uid=$(id -u)"
echo "gid=$(id -g)"
echo "capeff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)"
echo "capbnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
echo "nonewprivs=$(awk '/^NoNewPrivs:/ {print $2}' /proc/self/status)"
echo "root_write=$(touch /scratch/probe 2>&1 && echo allowed)"
echo "workspace_write=$(touch /workspace/probe-ws 2>&1 && echo allowed)"
echo "workspace_read=$(cat /workspace/marker 2>&1)"
echo "tmp_write=$(echo x > /tmp/probe && echo allowed)"
cp /bin/busybox /tmp/probe-exec 2>/dev/null
echo "tmp_exec=$(/tmp/probe-exec true 2>&1 && echo allowed)"
head -c 70000000 /dev/zero > /tmp/fill 2>/dev/null
echo "tmp_cap=$(wc -c < /tmp/fill)"
rm -f /tmp/fill
echo "shm_write=$(touch /dev/shm/probe 2>&1 && echo allowed)"
echo "interfaces=$(ls /sys/class/net | tr '\n' ' ')"
echo "env_canary=${AGENTGUARD_E2E_CANARY:-absent}"
echo "env_http_proxy=${HTTP_PROXY:-absent}${http_proxy:-}"
echo "env_configured=${AGENTGUARD_E2E_CONFIGURED:-absent}"
echo "pids_max=$(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max 2>/dev/null || echo unavailable)"
echo "memory_limit=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max 2>/dev/null || echo unavailable)"
echo "cpu_quota=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/cpu.max 2>/dev/null || echo unavailable)"
echo "seccomp=$(awk '/^Seccomp:/ {print $2}' /proc/self/status)"
echo "kcore=$(wc -c < /proc/kcore 2>/dev/null || echo absent)"
echo "pid1=$(tr '\0' ' ' < /proc/1/cmdline)"
# An orphan that ends is the init's to reap: none may stay a zombie.
sh -c 'sh -c "exit 0" & exit 0'
sleep 1
echo "zombies=$(grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l)"
echo "done=1"
