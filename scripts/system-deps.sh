#!/usr/bin/env bash
# Check the OS-level tools Tally needs (Java 17+ for Spark, redis-server for the local stack,
# Chromium for the dashboard's browser test)
# and install the missing ones from the OS packages when we can.
set -euo pipefail

missing=()
if ! command -v java >/dev/null 2>&1; then missing+=("openjdk-17-jre-headless"); fi
if ! command -v redis-server >/dev/null 2>&1; then missing+=("redis-server"); fi
if ! command -v python3 >/dev/null 2>&1; then missing+=("python3" "python3-venv"); fi
# The dashboard's browser test drives Debian's Chromium (Playwright cannot download browsers here).
if ! command -v chromium >/dev/null 2>&1; then missing+=("chromium"); fi
# The serving benchmark loads the API with wrk.
if ! command -v wrk >/dev/null 2>&1; then missing+=("wrk"); fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "tally: installing missing OS packages: ${missing[*]}"
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
  sudo apt-get update -qq
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
else
  echo "tally: cannot install ${missing[*]} here: install Java 17+ and redis-server with your package manager, then rerun make" >&2
  exit 1
fi
