#!/usr/bin/env bash
# Install the Debian packages qeffect needs, only those that are missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config liblmdb-dev lmdb-utils libsqlite3-dev sqlite3 libxxhash-dev
      libjansson-dev libcurl4-openssl-dev libssl-dev libpcre2-dev gnuplot-nox)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Tools of the S3 replication tests: node and npm (to install s3rver, and the
# GPT-2 encoder files with scripts/gpt2-encoder.sh) and the AWS CLI.  Checked
# by command, not package: a node from elsewhere (nodesource ships npm inside
# its nodejs) must not be replaced by Debian's.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v aws >/dev/null 2>&1 || missing+=(awscli)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
