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
# The Node test package (tests/js: the OpenAI SDK and playwright-core, which drives the chromium
# installed above; it never downloads a browser). Node and npm come with the machine.
if ! command -v npm >/dev/null; then
  echo "install-deps: npm is missing (Node 20 with npm is needed for tests/js)" >&2
  exit 1
fi
(cd tests/js && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
