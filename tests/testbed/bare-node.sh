#!/usr/bin/env bash
# One bare node's sshd (netns.sh with TB_NODE_ROOT): run by netns.sh inside
# the node's network namespace and `unshare -m --propagation private`, so
# that every mount below is this node's alone and goes with its last process.
#
#   bare-node.sh ROOT DIR K
#
# The node sees ROOT (bare-root.sh's minimal Debian) as its / (chroot), with
# fresh tmpfs on /root, /tmp and /run (nothing cached from an earlier bed, and
# ROOT itself, shared by every bed, never written), the machine's /proc, /dev
# and /sys, and DIR/share read-only at /srv/share (what a test gives the
# node's jobs). sshd reads the bed's config and keys from /run/bed.
set -euo pipefail
root=$1 dir=$2 k=$3
mount -t tmpfs -o mode=0700 none "$root/root"
mount -t tmpfs -o mode=1777 none "$root/tmp"
mount -t tmpfs -o mode=0755 none "$root/run"
mount -t tmpfs -o mode=0755 none "$root/srv"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
mkdir -p "$dir/share" "$root/srv/share" "$root/run/sshd" "$root/run/bed"
mount --bind -o ro "$dir/share" "$root/srv/share"
cp "$dir/authorized_keys" "${TB_HOST_KEY:-$dir/host_key}" "$root/run/bed/"
chmod 600 "$root/run/bed/"*
sed -e "s|^HostKey .*|HostKey /run/bed/$(basename "${TB_HOST_KEY:-$dir/host_key}")|" \
    -e "s|^AuthorizedKeysFile .*|AuthorizedKeysFile /run/bed/authorized_keys|" \
    -e "s|^PidFile .*|PidFile /run/bed/sshd.pid|" \
    "$dir/sshd_config.$k" > "$root/run/bed/sshd_config"
exec chroot "$root" /usr/sbin/sshd -D -e -f /run/bed/sshd_config 2>> "$dir/sshd.$k.log"
