#!/bin/sh
# The cgroup2 lane's guest side (scripts/cgroup2_lane.py boots the VM; systemd runs this
# from the kernel command line and powers off when it ends). It proves the host is cgroup
# v2 only, brings the hermetic cluster up, runs the suites that need no running VM and
# tears the cluster down, writing everything into the lane's output folder, which the
# host shares writable.
set -u
lane_output=$(dirname "$(dirname "$0")")/_output/cgroup2
. "$lane_output/settings.sh"
exec >>"$LANE_OUTPUT/guest.log" 2>&1

echo "== host: $(uname -r), cgroup filesystem $(stat -fc %T /sys/fs/cgroup)," \
    "controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
v1_hierarchies=$(awk '$3 == "cgroup"' /proc/mounts)
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ] || [ -n "$v1_hierarchies" ]; then
    echo "the lane's VM is not cgroup v2 only; its v1 hierarchies:"
    echo "$v1_hierarchies"
    echo 1 >"$LANE_OUTPUT/status"
    exit 1
fi

# The build cache is shared read-only; the cluster may add to it, into a layer of its own.
mkdir -p /var/lib/lane/cache /var/lib/lane/cache-work
mount -t overlay overlay \
    -o "lowerdir=$KDC_CACHE,upperdir=/var/lib/lane/cache,workdir=/var/lib/lane/cache-work" \
    "$KDC_CACHE"

cd "$PROJECT"
# The cluster's component logs and each node's pod logs, copied out as they grow: the
# host sees them even when the VM is cut off before its suites end.
copy_logs() {
    mkdir -p "$LANE_OUTPUT/cluster-logs"
    cp -r /var/tmp/kdc-hermetic/logs/. "$LANE_OUTPUT/cluster-logs/" 2>/dev/null
    for node in /var/tmp/kdc-hermetic/nodes/*/; do
        pods="$node/layer/var/log/pods"
        [ -d "$pods" ] || continue
        copy="$LANE_OUTPUT/pod-logs/$(basename "$node")"
        mkdir -p "$copy"
        cp -r "$pods/." "$copy/" 2>/dev/null
    done
}
(while sleep 30; do copy_logs; done) &
echo "== kdc-cluster up"
started=$(date +%s)
if kdc-cluster up; then
    echo "== cluster up in $(( $(date +%s) - started )) s; the suites: $LANE_PYTEST_ARGS"
    # shellcheck disable=SC2086  # the host wrote the arguments shell-quoted
    eval "set -- $LANE_PYTEST_ARGS"
    pytest -p no:cacheprovider --keep-cluster --artifacts-dir "$LANE_OUTPUT/run" \
        --junitxml "$LANE_OUTPUT/junit.xml" "$@"
    status=$?
else
    status=$?
    echo "== kdc-cluster up failed ($status)"
fi
copy_logs
# Teardown on v2 too: the nodes' slice and every scope in it must go with the cluster.
# A teardown that fails turns a passed lane into a failed one; a failed status stays.
echo "== kdc-cluster down"
left=$(kdc-cluster down >&2 && find /sys/fs/cgroup -maxdepth 1 -name 'kdc*' \
       || echo "kdc-cluster down failed")
if [ -n "$left" ]; then
    echo "== left behind: $left"
    [ "$status" -ne 0 ] || status=1
fi
echo "== guest done: $status after $(( $(date +%s) - started )) s"
echo "$status" >"$LANE_OUTPUT/status"
