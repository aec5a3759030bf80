# Shared shell functions of the hack/ scripts; source it.

# debian_mirror prints the Debian mirror this machine's apt already uses: the
# URIs of the first deb822 stanza in /etc/apt/sources.list.d/debian.sources
# whose Suites field lists exactly SUITE (not -security or -updates), so no
# mirror is named in this repository. $MIRROR overrides it.
debian_mirror() {
	local suite=$1 sources=/etc/apt/sources.list.d/debian.sources mirror=${MIRROR:-}
	if [[ -z $mirror ]]; then
		[[ -r $sources ]] || {
			echo "cannot read $sources to find the Debian mirror; set MIRROR" >&2
			return 1
		}
		mirror=$(awk -v suite="$suite" '
			/^[[:space:]]*$/ { if (uris != "" && hit) { print uris; exit } uris = ""; hit = 0; next }
			/^URIs:/ { uris = $2 }
			/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) hit = 1 }
			END { if (uris != "" && hit) print uris }
		' "$sources" | head -n1)
		[[ -n $mirror ]] || {
			echo "no stanza for suite $suite in $sources; set MIRROR" >&2
			return 1
		}
	fi
	echo "$mirror"
}
