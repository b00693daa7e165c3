#!/usr/bin/env bash
# Regenerate the locks: the exact versions `make demo`, `make test` and CI install.
#   constraints.txt                 the project's venv (pyproject.toml's ranges, resolved today)
#   tools/triton/constraints.txt    the Triton server's own venv (from tools/triton/requirements.txt)
# Each is resolved in a fresh venv from PyPI and frozen. `make lock` runs this, then the whole
# suite against the new locks; commit them only when it passes.
# The pins hold for the interpreter and platform they were resolved on (CI's kind: CPython
# 3.11, Linux x86_64), and say so in a marker on every line; elsewhere pyproject.toml's
# ranges apply.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

marker=$("$PY" -c 'import platform, sys; print(f"python_version == \"{sys.version_info[0]}.{sys.version_info[1]}\" and sys_platform == \"{sys.platform}\" and platform_machine == \"{platform.machine()}\"")')

freeze() {  # venv, output file, header lines: every installed distribution pinned, with the marker
	local venv=$1 out=$2
	shift 2
	{
		printf '%s\n' "$@"
		echo "# Resolved on $("$venv/bin/python" -c 'import platform; print(f"CPython {platform.python_version()}, {platform.system()} {platform.machine()}")') on $(date -u +%Y-%m-%d) by tools/lock.sh."
		"$venv/bin/python" -m pip freeze --all --exclude facestream | LC_ALL=C sort -f | sed "s/\$/ ; $marker/"
	} > "$out.new"
	mv "$out.new" "$out"
	echo "lock: wrote $out ($(grep -vc '^#' "$out") pins)"
}

echo "lock: resolving the project's venv ('.[demo,test]') in a fresh venv"
"$PY" -m venv "$work/project"
"$work/project/bin/python" -m pip install --quiet --upgrade pip setuptools
"$work/project/bin/python" -m pip install --quiet '.[demo,test]'
freeze "$work/project" constraints.txt \
	"# The versions the suite last passed with: \`make demo\`, \`make test\`, \`make check-install\` and CI" \
	"# install with \`pip install -c constraints.txt\` (and build with it as --build-constraint)." \
	"# pyproject.toml keeps the compatible ranges for installs into other environments." \
	"# Regenerate with \`make lock\` (tools/lock.sh), which then runs the suite against it."

echo "lock: resolving the Triton server's venv (tools/triton/requirements.txt) in a fresh venv"
"$PY" -m venv "$work/triton"
"$work/triton/bin/python" -m pip install --quiet --upgrade pip setuptools
"$work/triton/bin/python" -m pip install --quiet -r tools/triton/requirements.txt
freeze "$work/triton" tools/triton/constraints.txt \
	"# The Triton server's own venv, every package pinned: tools/triton/env.py installs" \
	"# requirements.txt (the top level) with this file as constraints. Regenerate with \`make lock\`."
