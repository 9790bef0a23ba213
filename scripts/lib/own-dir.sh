# Sourced by the scripts that empty or replace a directory a user may name (an output, a work or a bundle
# directory): they touch only a directory that is new, empty, or marked as made by one of these scripts.
#   own_dir DIR WHO      refuses (one line naming WHO and the fix, exit 2) when DIR exists, is not empty and lacks
#                        the mark; else makes DIR and marks it (.engram-own-dir). Call it before removing anything.
#   mark_dir DIR         marks a directory the script has just made (after it replaced DIR wholesale)
own_dir() {
    local dir=$1 who=$2
    if [ -e "$dir" ] && [ ! -d "$dir" ]; then
        echo "$who: $dir is not a directory; name a new or empty directory" >&2; exit 2
    fi
    if [ -d "$dir" ] && [ ! -e "$dir/.engram-own-dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
        echo "$who: $dir holds files these scripts did not make; name a new or empty directory, or move them away" >&2
        exit 2
    fi
    mkdir -p "$dir" && touch "$dir/.engram-own-dir"
}
mark_dir() { touch "$1/.engram-own-dir"; }
