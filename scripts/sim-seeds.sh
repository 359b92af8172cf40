#!/usr/bin/env bash
# Runs the deterministic controller simulator over many seeds in release mode.
#   scripts/sim-seeds.sh [SEEDS] [FIRST_SEED]     (default: 5000 seeds from 0)
# A failing seed prints itself; replay it alone with
#   RILL_SIM_SEED=N cargo test --release --lib controller::sim::seeded -- --nocapture
# RILL_SIM_STEPS changes the steps per seed (default 2500, 50 ms of simulated time each).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-5000}"
first="${2:-0}"
RILL_SIM_SEEDS="$seeds" RILL_SIM_SEED_START="$first" \
  cargo test --release -j"${JOBS:-1}" --lib controller::sim::seeded -- --nocapture
