#!/usr/bin/env bash
# Runs Nomad 1.6.5's `nomad job validate` on every job file here and prints
# "file<TAB>accept|refuse<TAB>Nomad's first message". The results are kept
# in expected.tsv (column nomad), so the Go test needs no Nomad.
#
# Needs a Nomad agent answering at $NOMAD_ADDR (a throwaway dev agent bound
# to 127.0.0.1, see README's "Checking the corpus against Nomad"). Run it
# from anywhere; it validates from this directory, as file() paths are
# relative to the working directory in Nomad.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
: "${NOMAD_ADDR:?set NOMAD_ADDR to the throwaway agent, e.g. http://127.0.0.1:24946}"
for f in *.hcl; do
	case $f in *.vars.hcl) continue ;; esac
	args=()
	base=${f%.hcl}
	[ -f "$base.vars.hcl" ] && args+=(-var-file "$base.vars.hcl")
	[ -f "$base.vars.json" ] && args+=(-var-file "$base.vars.json")
	if out=$(nomad job validate "${args[@]}" "$f" 2>&1); then
		printf '%s\taccept\t\n' "$f"
	else
		msg=$(printf '%s\n' "$out" | grep -v -e '^$' -e 'error occurred' -e 'errors occurred' -e '^Job validation errors' \
			-e '^Error getting job struct' -e '^Error parsing job file' | head -1 | sed 's/^[[:space:]*]*//')
		printf '%s\trefuse\t%s\n' "$f" "$msg"
	fi
done
