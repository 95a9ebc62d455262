#!/usr/bin/env bash
# Launch benchmark: time from command start to every rank having run `true`,
# dlaunch vs mpirun (Open MPI over ssh) vs pdsh, on the same loopback sshd
# test bed (scripts/testbed/sshd.sh: one 127.0.0.x address per node), same
# run, medians of several runs, ratios to the peers.
#
#   bench/launch.sh [--nodes "1 4 16"] [--slots 4] [--runs 5] [--user NAME] [--out FILE]
#
# --user: log in as this user on the test bed (as root, default: a user
#   `dlbench` with /bin/sh as login shell, created if missing, so that no
#   shell start-up file of root's skews every launcher alike; "self" logs in
#   as yourself). Head CPU: user+sys of the launcher and every client process
#   it waits for (mpirun's and pdsh's ssh clients; dlaunch has none).
set -euo pipefail
cd "$(dirname "$0")/.."

nodes="1 4 16"; slots=4; runs=5; user=""; out=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --user) user=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh bench
[[ -x build/release/bin/dlaunch ]] || scripts/dev.sh build release >/dev/null

if [[ -z "$user" ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    user=dlbench
    # -p '*': no password, but not a locked account (sshd refuses those).
    id "$user" >/dev/null 2>&1 ||
      useradd --system --create-home --home-dir "/var/lib/$user" --shell /bin/sh -p '*' "$user"
  else
    user=self
  fi
fi
[[ "$user" == self ]] && user=$(id -un)

max=0; for n in $nodes; do ((n > max)) && max=$n; done
tb=$(mktemp -d /tmp/dlaunch-bench.XXXXXX)
trap 'scripts/testbed/sshd.sh stop "$tb"; rm -rf "$tb"' EXIT
port=$(scripts/testbed/sshd.sh start "$tb" "$max" 0 "$slots")
chmod 755 "$tb"; chmod 644 "$tb/authorized_keys"
echo "  User $user" >> "$tb/ssh_config"
sed -i "s/^defaults:/defaults:\n  user: $user/" "$tb/hosts.yaml"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dl=$PWD/build/release/bin/dlaunch
# mpirun launches every daemon from the head, as dlaunch and pdsh do.
mpi_rsh=(--mca plm_rsh_no_tree_spawn 1 --mca plm_rsh_agent "$PWD/bench/ssh-own-tmpdir.sh $tb/ssh_config")

# median of the numbers on stdin
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f", m}'; }

# runs CMD... $runs times; prints "wall_median cpu_median"
measure() {
  local walls=() cpus=() line
  for ((r = 0; r < runs; r++)); do
    line=$(/usr/bin/time -f '%e %U %S' -o /dev/stdout "$@" 2>/dev/null | tail -n1)
    walls+=("$(awk '{print $1}' <<<"$line")")
    cpus+=("$(awk '{print $2 + $3}' <<<"$line")")
  done
  printf '%s %s\n' "$(printf '%s\n' "${walls[@]}" | median)" "$(printf '%s\n' "${cpus[@]}" | median)"
}

results=()
for n in $nodes; do
  head -n "$n" "$tb/hostfile.plain" > "$tb/hf.$n"
  hosts=$(head -n "$n" "$tb/hosts.list" | paste -sd,)
  # Every launcher must really reach every rank (or host, for pdsh): check once.
  got=$(HOME=$tb/home "$dl" -H "$tb/hosts.yaml" --num-nodes "$n" --wdir /tmp --no-prefix echo x | wc -l)
  [[ $got -eq $((n * slots)) ]] || { echo "dlaunch ran $got of $((n * slots)) ranks" >&2; exit 1; }
  got=$(mpirun --hostfile "$tb/hf.$n" -np $((n * slots)) --oversubscribe --bind-to none --wdir /tmp \
        "${mpi_rsh[@]}" echo x 2>/dev/null | wc -l)
  [[ $got -eq $((n * slots)) ]] || { echo "mpirun ran $got of $((n * slots)) ranks" >&2; exit 1; }
  got=$(PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS="-F $tb/ssh_config %h" pdsh -f 64 -w "$hosts" echo x 2>/dev/null | wc -l)
  [[ $got -eq $n ]] || { echo "pdsh ran on $got of $n hosts" >&2; exit 1; }
  read -r d_wall d_cpu < <(HOME=$tb/home measure "$dl" -H "$tb/hosts.yaml" --num-nodes "$n" --wdir /tmp true)
  read -r m_wall m_cpu < <(measure mpirun --hostfile "$tb/hf.$n" -np $((n * slots)) --oversubscribe --bind-to none \
                                  --wdir /tmp "${mpi_rsh[@]}" true)
  read -r p_wall p_cpu < <(PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS="-F $tb/ssh_config %h" measure pdsh -f 64 -w "$hosts" true)
  results+=("$n $d_wall $m_wall $p_wall $d_cpu $m_cpu $p_cpu")
  echo "nodes=$n dlaunch=${d_wall}s mpirun=${m_wall}s pdsh=${p_wall}s" >&2
done

{
  echo "Launch: \`true\` on every rank, $slots slots per node, loopback sshd test bed, login user \`$user\`"
  echo "($(nproc) cores; $(mpirun --version | head -n1); pdsh $(pdsh -V 2>&1 | head -n1 | awk '{print $1}' | sed 's/pdsh-//'); $(ssh -V 2>&1 | cut -d, -f1); libssh2 $(dpkg-query -W -f='${Version}' libssh2-1 2>/dev/null); median of $runs runs)."
  echo
  echo "| nodes | ranks | dlaunch s | mpirun s | pdsh s | dlaunch/mpirun | dlaunch/pdsh | head CPU per node ms: dlaunch | mpirun | pdsh |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for r in "${results[@]}"; do
    read -r n dw mw pw dc mc pc <<<"$r"
    awk -v n="$n" -v s="$slots" -v dw="$dw" -v mw="$mw" -v pw="$pw" -v dc="$dc" -v mc="$mc" -v pc="$pc" 'BEGIN {
      printf "| %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f |\n",
        n, n*s, dw, mw, pw, dw/mw, dw/pw, 1000*dc/n, 1000*mc/n, 1000*pc/n }'
  done
} | tee "${out:-/dev/null}"
