# shellcheck shell=bash
# Shared parts of the SSH test beds (sshd.sh: loopback addresses; netns.sh:
# network namespaces; bastion.sh: a cluster behind a bastion). Source it;
# every function works inside one test-bed directory DIR and changes nothing
# outside it except /run/sshd (which sshd requires, created when root).

tb_sshd_bin() {
  local b
  b=$(command -v sshd || echo /usr/sbin/sshd)
  [[ -x "$b" ]] || { echo "sshd not installed (apt-get install openssh-server)" >&2; return 3; }
  echo "$b"
}

# Host key, user key (DIR/home/.ssh/id_ed25519, named by DIR/ssh_config) and
# the authorized_keys file that every sshd of the bed reads.
tb_keys() {
  local dir=$1
  mkdir -p "$dir/home/.ssh"
  chmod 700 "$dir/home/.ssh"
  [[ -f "$dir/host_key" ]] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
  [[ -f "$dir/home/.ssh/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -f "$dir/home/.ssh/id_ed25519"
  cp "$dir/home/.ssh/id_ed25519.pub" "$dir/authorized_keys"
  chmod 600 "$dir/authorized_keys"
  if [[ $(id -u) -eq 0 ]]; then mkdir -p /run/sshd; fi
}

# The bed's host key as "TYPE BASE64", for known_hosts lines.
tb_host_key() { cut -d' ' -f1,2 "$1/host_key.pub"; }

# tb_sshd_config DIR CONF PORT PIDFILE [LISTEN_ADDRESS...]: an sshd config of
# the bed (its keys, no PAM, root by key only, many parallel logins:
# TB_SSHD_MAX_STARTUPS, default 500:30:1000). The host key is DIR/host_key
# unless TB_HOST_KEY names another (a bed whose hosts each have their own).
# TB_SSHD_SETENV: NAME=VALUE words every session gets (sshd's SetEnv), as a
# node's own configuration would give them (e.g. where its podman keeps its
# configuration and images).
tb_sshd_config() {
  local dir=$1 conf=$2 port=$3 pidfile=$4
  shift 4
  {
    echo "Port $port"
    for a in "$@"; do echo "ListenAddress $a"; done
    echo "HostKey ${TB_HOST_KEY:-$dir/host_key}"
    echo "AuthorizedKeysFile $dir/authorized_keys"
    echo "PidFile $pidfile"
    echo "UsePAM no"
    echo "StrictModes no"
    echo "PermitRootLogin prohibit-password"
    echo "PasswordAuthentication no"
    echo "KbdInteractiveAuthentication no"
    echo "MaxStartups ${TB_SSHD_MAX_STARTUPS:-500:30:1000}"
    echo "MaxSessions 100"
    echo "LogLevel ERROR"
    if [[ -n "${TB_SSHD_SETENV:-}" ]]; then echo "SetEnv $TB_SSHD_SETENV"; fi
  } > "$conf"
}

# tb_ssh_config DIR HOST_PATTERN PORT: DIR/ssh_config, the bed's user side
# for both clients: `ssh -F DIR/ssh_config` and `dlaunch -F DIR/ssh_config`.
# Both take ~ (~/.ssh/config, id_*, known_hosts) from the passwd entry, never
# $HOME, so no HOME can point them here: every path in it is absolute.
tb_ssh_config() {
  local dir=$1 pattern=$2 port=$3
  cat > "$dir/ssh_config" <<CONF
Host $pattern
  Port $port
  IdentityFile $dir/home/.ssh/id_ed25519
  UserKnownHostsFile $dir/home/.ssh/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
CONF
}

# tb_wait_tcp ADDR PORT [TRIES]: until ADDR:PORT accepts connections (50 ms steps).
tb_wait_tcp() {
  local a=$1 port=$2 tries=${3:-100}
  for ((t = 0; t < tries; t++)); do
    (exec 3<>"/dev/tcp/$a/$port") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# tb_alive PID: true while PID runs (a zombie counts as gone). For a child
# being waited on: unlike tb_ours it does not read the command line, which is
# empty for a moment while the process execs (ip netns exec -> unshare -> sh
# -> sshd), so a wait loop does not mistake a starting daemon for a dead one.
tb_alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# tb_ours PID DIR: true while PID runs (a zombie counts as gone) and its
# command line names DIR: a pid that was reused since is never signalled.
tb_ours() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z ]] || return 1
  tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# tb_kill_pids FILE: signals every pid listed in FILE (one per line) whose
# command line names FILE's folder, waits until they are gone (SIGKILL after
# 5 s), removes FILE. Waiting matters: a daemon removes its own files (sshd its
# pid file) as it exits, and a caller that deletes the folder right after
# would race with it.
tb_kill_pids() {
  local file=$1 pid i
  [[ -f "$file" ]] || return 0
  local owner pids=()
  owner=$(dirname "$file")
  while read -r pid; do
    if [[ -n "$pid" ]] && tb_ours "$pid" "$owner"; then
      pids+=("$pid")
      kill "$pid" 2>/dev/null || true
    fi
  done < "$file"
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 50; i++)); do
      tb_ours "$pid" "$owner" || break
      sleep 0.1
    done
    if tb_ours "$pid" "$owner"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  rm -f "$file"
  return 0
}
