#!/usr/bin/env bash
# Make sure a system program the course needs is installed: Graphviz's `dot` (graph drawings,
# needed when notebooks execute) or headless Chromium with its driver and a CJK font (the browser
# check of the built book; the glossary and route names quote the Chinese source documents, which
# render as boxes without one). Installs with apt-get when we are root on Debian/Ubuntu;
# otherwise stops with the command to run.
set -euo pipefail
what=${1:?usage: tools/ensure_system.sh dot|chromium}
case "$what" in
  dot)      progs=(dot);                      apt=(graphviz);                  brew="brew install graphviz";  conda="conda install -c conda-forge graphviz" ;;
  chromium) progs=(chromium chromedriver cjk-font); apt=(chromium chromium-driver fonts-noto-cjk);  brew="brew install --cask chromium chromedriver"; conda="conda install -c conda-forge python-chromedriver-binary (and a Chromium browser)" ;;
  *) echo "unknown requirement: $what" >&2; exit 2 ;;
esac
# A "program" named cjk-font is a font that covers Chinese, as fontconfig sees it.
have() { if [ "$1" = cjk-font ]; then fc-list :lang=zh family 2>/dev/null | grep -q .; else command -v "$1" >/dev/null 2>&1; fi; }
missing=0
for p in "${progs[@]}"; do have "$p" || missing=1; done
[ "$missing" = 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing ${apt[*]} with apt-get (needed for: ${progs[*]})..."
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt[@]}" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt[@]}" >/dev/null
  fi
  for p in "${progs[@]}"; do have "$p" || { echo "apt-get installed ${apt[*]} but '$p' is still not on PATH" >&2; exit 1; }; done
  exit 0
fi
cat >&2 <<MSG
This course needs '${progs[*]}', which is not installed, and it cannot be installed
automatically here (that needs root and apt-get). Install it with one of:
  apt:   sudo apt-get install ${apt[*]}
  brew:  $brew
  conda: $conda
then run make again.
MSG
exit 1
