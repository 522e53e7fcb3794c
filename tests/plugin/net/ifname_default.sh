#!/usr/bin/env bash
# The net plugin's default devices (ZIPCCL_NET_IFNAME unset): in a network
# namespace of its own with lo, a docker0 and a virbr0 bridge address and one
# ordinary interface (eth9, veth pairs), the plugin must offer eth9 alone:
# bridges have the same address on every host, and loopback only counts when
# nothing else is up. Then ZIPCCL_NET_IFNAME=docker names a bridge explicitly.
# Needs root (unshare -n, ip); exits 77 (skipped) where it cannot build the namespace.
#
#   ifname_default.sh NET_DRIVER PLUGIN
set -uo pipefail
driver=${1:?usage: ifname_default.sh NET_DRIVER PLUGIN}
plugin=${2:?usage: ifname_default.sh NET_DRIVER PLUGIN}

if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null || ! command -v ip >/dev/null; then
  echo "ifname_default: needs root, unshare and ip: skipped"
  exit 77
fi

# shellcheck disable=SC2016
script='
set -e
ip link set lo up
ip link add docker0 type veth peer name eth9
ip link add virbr0 type veth peer name virbr0p
ip addr add 172.17.0.1/16 dev docker0
ip addr add 192.168.122.1/24 dev virbr0
ip addr add 10.9.0.1/24 dev eth9
for i in docker0 eth9 virbr0 virbr0p; do ip link set "$i" up; done
set +e
echo "== default"
env -u ZIPCCL_NET_IFNAME "$0" "$1" list
echo "== docker"
ZIPCCL_NET_IFNAME=docker "$0" "$1" list
'
out=$(unshare -n bash -c "$script" "$driver" "$plugin" 2>&1)
rc=$?
echo "$out"
if echo "$out" | grep -q -e "Operation not permitted" -e "Unknown device type"; then
  echo "ifname_default: cannot create the namespace or veth pairs here: skipped"
  exit 77
fi
[ $rc -eq 0 ] || { echo "ifname_default: FAIL (exit $rc)"; exit 1; }
default=$(echo "$out" | sed -n '/^== default/,/^== docker/p' | grep '^device ' | tr '\n' ' ')
named=$(echo "$out" | sed -n '/^== docker/,$p' | grep '^device ' | tr '\n' ' ')
[ "$default" = "device eth9 " ] || { echo "ifname_default: FAIL: default devices '$default', want 'device eth9 '"; exit 1; }
[ "$named" = "device docker0 " ] || { echo "ifname_default: FAIL: ZIPCCL_NET_IFNAME=docker gave '$named'"; exit 1; }
echo "ifname_default: ok"
