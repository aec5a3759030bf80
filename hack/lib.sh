# Shared shell functions of the hack/ scripts; source it.

# debian_mirror prints the Debian mirror this machine's apt already uses: the
# URIs of the first deb822 stanza in /etc/apt/sources.list.d/debian.sources
# whose Suites field lists exactly SUITE (not -security or -updates), so no
# mirror is named in this repository. A release the host's apt does not list
# (the image's trixie on a bookworm host) comes from the same mirror: then the
# first stanza with a plain release in its Suites (the main archive, which
# serves every release; -security and -updates are other archives or only
# updates). $MIRROR overrides it.
debian_mirror() {
	local suite=$1 sources=/etc/apt/sources.list.d/debian.sources mirror=${MIRROR:-}
	if [[ -z $mirror ]]; then
		[[ -r $sources ]] || {
			echo "cannot read $sources to find the Debian mirror; set MIRROR" >&2
			return 1
		}
		mirror=$(awk -v suite="$suite" '
			function flush() {
				if (uris != "" && hit && exact == "") exact = uris
				if (uris != "" && plain && main == "") main = uris
				uris = ""; hit = 0; plain = 0
			}
			/^[[:space:]]*$/ { flush(); next }
			/^URIs:/ { uris = $2 }
			/^Suites:/ { for (i = 2; i <= NF; i++) { if ($i == suite) hit = 1; if ($i !~ /-/) plain = 1 } }
			END { flush(); print (exact != "" ? exact : main) }
		' "$sources")
		[[ -n $mirror ]] || {
			echo "no stanza for suite $suite, nor for any release, in $sources; set MIRROR" >&2
			return 1
		}
	fi
	echo "$mirror"
}
