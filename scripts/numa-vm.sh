#!/usr/bin/env bash
# Kept at this path for the checks that call it: the script is scripts/numa/numa-vm.sh (docs/numa.md).
exec "$(dirname "${BASH_SOURCE[0]}")/numa/numa-vm.sh" "$@"
