#!/usr/bin/env bash
# Install everything chute needs to build, test and demo on Debian 12.
# Idempotent; skips apt when every package is already there.
set -euo pipefail
PKGS=(build-essential cmake pkg-config libjpeg62-turbo-dev libspng-dev zlib1g-dev liburing-dev
      python3 python3-dev python3-numpy python3-pil python3-pytest python3-torch
      python3-torchvision python3-setuptools python3-pip python3-venv
      libcurl4-openssl-dev python3-boto3 libhdf5-dev python3-h5py python3-pandas
      python3-soundfile
      plasma-workspace-wallpapers dataset-fashion-mnist chromium
      librdkafka-dev python3-confluent-kafka
      libdeflate-dev strace libjansson-dev
      libavformat-dev libavcodec-dev libavutil-dev libswscale-dev ffmpeg
      tmux prometheus)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
