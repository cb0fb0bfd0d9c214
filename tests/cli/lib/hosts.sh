# hosts.sh - simulated hosts for the shell tests: each host is a mount (and UTS) namespace
# that binds its own folder at one path $P, so `--run-dir $P` is a different disk on each.
# Source it with Q (the qeffect binary), T (a scratch folder) and P (the shared path) set.

free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }

# hosts_usable: 0 when mount namespaces can be made here (root).
hosts_usable() { unshare -mu --propagation private true 2>/dev/null; }

# hosts_own_namespace SCRIPT ARGS...: run the calling test again (once) in a mount namespace of
# its own, so that what it mounts (the hosts' memory) goes when the test does.
hosts_own_namespace() {
  [ -n "${QE_HOSTS_OWN_NS:-}" ] || exec env QE_HOSTS_OWN_NS=1 unshare -m --propagation private bash "$@"
}
# hosts_memory DIR: a tmpfs at DIR (inside hosts_own_namespace) to hold the hosts' memory folders.
hosts_memory() { mkdir -p "$1" && mount -t tmpfs -o size=512m qe-hosts-memory "$1"; }

# Hosts' memory (optional): with HOST_MEM_ROOT (a tmpfs folder) and HOST_MEM_PATH set, every
# host also binds its own HOST_MEM_ROOT/HOST at HOST_MEM_PATH, so that path is a different
# memory on each host and outlives the host's processes, as /dev/shm does; a host named in
# HOST_MEM_NONE gets no memory there (HOST_MEM_PATH stays a folder on its disk).

# on HOST DIR RANK WORLD PORT LOG ARGS...: one rank on host HOST whose disk is folder DIR.
on() {
  local host=$1 dir=$2 rank=$3 world=$4 port=$5 log=$6; shift 6
  mkdir -p "$dir"
  local mem="" mempath=""
  if [ -n "${HOST_MEM_ROOT:-}" ] && [[ " ${HOST_MEM_NONE:-} " != *" $host "* ]]; then
    mem="$HOST_MEM_ROOT/$host"; mempath=$HOST_MEM_PATH; mkdir -p "$mem" "$mempath"
  fi
  RANK=$rank WORLD_SIZE=$world LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port QE_RUN_ID=two-hosts \
    unshare -mu --propagation private sh -c 'hostname "$0" && mount --bind "$1" "$2" &&
      { [ -z "$3" ] || mount --bind "$3" "$4"; } && shift 4 && exec "$@"' \
    "$host" "$dir" "$P" "$mem" "$mempath" "$Q" "$@" >"$log" 2>&1
}

# job NAME "HOST:DIR HOST:DIR ..." ARGS...: one rank per entry, rank i on entry i; 0 when every rank succeeded.
job() {
  local name=$1 hosts=($2); shift 2
  local world=${#hosts[@]} port; port=$(free_port)
  local pids=() r
  for r in $(seq 0 $((world - 1))); do
    on "${hosts[$r]%%:*}" "${hosts[$r]#*:}" "$r" "$world" "$port" "$T/$name.rank$r.log" "$@" &
    pids[$r]=$!
    [ "$r" -eq 0 ] && sleep 0.3
  done
  local st=0
  for r in $(seq 0 $((world - 1))); do { wait "${pids[$r]}"; } 2>/dev/null || st=1; done
  return $st
}
show() { for f in "$T/$1".rank*.log; do echo "--- $f"; tail -5 "$f"; done; }
