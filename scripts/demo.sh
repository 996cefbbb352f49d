#!/usr/bin/env bash
# The fleetlink demo: installs dependencies, builds, then starts a broker on its
# embedded registry and three rig agents on loopback (certificates made on the
# spot by the lab CA helper), sends each rig a dmesg command through fleetctl,
# prints the results and stops everything it started.
#   DEMO_KEEP=1  leave the broker and agents running (Ctrl-C stops them)
#   DEMO_PORT / DEMO_CONTROL_PORT  listener ports (default 18443 / 18080)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [[ "${SKIP_INSTALL:-0}" != 1 ]]; then scripts/install-deps.sh; fi
BUILD_DIR=${BUILD_DIR:-build} scripts/build.sh -DFLEETLINK_BUILD_BENCH=OFF
build=$root/${BUILD_DIR:-build}

port=${DEMO_PORT:-18443}
control_port=${DEMO_CONTROL_PORT:-18080}
work=$(mktemp -d /tmp/fleetlink-demo.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "demo: stopped; logs were in $work"
}
trap cleanup EXIT

echo "== lab CA and certificates in $work/ca"
packaging/fleetlink-lab-ca init "$work/ca" >/dev/null
packaging/fleetlink-lab-ca broker "$work/ca" broker >/dev/null
rigs=(rig-0001 rig-0002 rig-0003)
packaging/fleetlink-lab-ca rig "$work/ca" "${rigs[@]}" >/dev/null

echo "== broker on wss://127.0.0.1:$port/agent, control API on http://127.0.0.1:$control_port"
"$build/broker/fleetlink-broker" --listen "127.0.0.1:$port" --control "127.0.0.1:$control_port" \
  --cert "$work/ca/broker.crt" --key "$work/ca/broker.key" --ca "$work/ca/ca.crt" \
  --broker-id demo-broker --state-dir "$work/broker-state" >"$work/broker.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "fleetlink-broker ready" "$work/broker.log" && break; sleep 0.1; done
grep -q "fleetlink-broker ready" "$work/broker.log" || { cat "$work/broker.log"; exit 1; }

for rig in "${rigs[@]}"; do
  mkdir -p "$work/state-$rig"
  # --config '': flags only, never an installed package's /etc/fleetlink/agent.conf.
  "$build/agent/fleetlink-agent" --config '' --broker "wss://127.0.0.1:$port/agent" --rig-id "$rig" \
    --cert "$work/ca/$rig.crt" --key "$work/ca/$rig.key" --ca "$work/ca/ca.crt" \
    --state-dir "$work/state-$rig" --label lab=demo >"$work/agent-$rig.log" 2>&1 &
  pids+=($!)
done

fleetctl() { "$build/broker/fleetctl/fleetctl" --control "http://127.0.0.1:$control_port" "$@"; }
for _ in $(seq 100); do
  [[ $(fleetctl --json rigs 2>/dev/null | grep -o '"rig_id"' | wc -l) -ge ${#rigs[@]} ]] && break
  sleep 0.1
done

echo "== fleetctl rigs"
fleetctl rigs
for rig in "${rigs[@]}"; do
  echo "== fleetctl send $rig dmesg --lines 5 --wait"
  fleetctl send "$rig" dmesg --lines 5 --wait
done

if [[ "${DEMO_KEEP:-0}" == 1 ]]; then
  echo "== running; dashboard at http://127.0.0.1:$control_port/ (Ctrl-C to stop)"
  wait
fi
