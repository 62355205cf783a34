#!/usr/bin/env bash
# The UCI table (paper Table 1): common/run_table.sh over the nine datasets; same flags (see there).
#   uci/run_table.sh [--output_root=results] [--seeds="0 1 2 3 4"] [--datasets="..."] [--methods="..."]
#                    [--jobs=2] [--vi_checkpoint_root=ROOT] [--print_commands] [-- extra uci.main flags]
exec "$(dirname "$0")/../common/run_table.sh" --benchmark=uci \
  --datasets="boston_housing concrete_strength energy_efficiency kin8nm naval_propulsion power_plant protein_structure wine yacht_hydrodynamics" \
  "$@"
