#!/usr/bin/env bash
# Installs the Debian 12 packages drama needs to build, test and run (scripts/deps.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2046
$SUDO apt-get install -y -q --no-install-recommends $(grep -v '^#' scripts/deps.txt)
