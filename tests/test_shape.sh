#!/bin/sh
# test_shape.sh — no function in the code of ragtag's layers is longer than
# about 100 lines (docs/architecture.md: one screen for the training loop,
# short named functions everywhere else). Counts a function from its opening
# brace at column 0 to the closing one (the project's style), so tables,
# which open with "= {", do not count. Prints each offender, file:line.
limit=${SHAPE_LIMIT:-100}
top=${top_srcdir:-$(dirname "$0")/..}
cd "$top" || exit 1
# (not the C that protoc-c generates from a .proto: *.pb-c.c)
files=$(ls base/*.c backends/*.c backends/*/*.c src/*.c src/layers/*.c net/*.c app/*.c 2>/dev/null |
  grep -v '\.pb-c\.c$')
[ -n "$files" ] || { echo "FAIL: no sources found under $top"; exit 1; }
out=$(awk -v limit="$limit" '
FNR == 1 { sig = ""; inside = 0 }
!inside && /^\{/ {
    inside = 1; start = FNR
    name = sig; sub(/\(.*/, "", name); n = split(name, w, /[^A-Za-z0-9_]+/)
    name = w[n] != "" ? w[n] : w[n - 1]
    next
}
inside && /^\}/ {
    inside = 0; len = FNR - start + 1; sig = ""
    if (len > limit) printf "%s:%d: %s is %d lines (limit %d)\n", FILENAME, start, name, len, limit
    next
}
!inside { if ($0 ~ /^[ \t]*$/ || $0 ~ /;[ \t]*$/ || $0 ~ /^#/) sig = ""; else sig = sig " " $0 }
' $files)
if [ -n "$out" ]; then
    echo "$out"
    echo "FAIL: functions above $limit lines: cut them into named steps"
    exit 1
fi
echo "PASS: every function of $(echo "$files" | wc -w) files is at most $limit lines"
