#!/bin/sh
# ragtag plot (docs/status.md) on the metrics file of a short 2-worker run:
# a PNG that is not blank and an SVG that parses as XML with the expected
# series; a PDF; two files on one plot; clear errors for a bad name or a
# file that is no metrics file.
set -u
RAGTAG=${RAGTAG:-$top_builddir/src/ragtag}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"; exit 77
fi
if "$RAGTAG" plot /dev/null 2>&1 | grep -q "built without cairo"; then
  echo "SKIP: ragtag built without cairo (apt-get install libcairo2-dev)"; exit 77
fi
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
"$RAGTAG" train "$top_srcdir/examples/lenet.cfg" --workers 2 --threads 1 --epochs 2 \
  --limit 6400 --val 0.1 --log-every 10 --progress off --metrics "$tmp/m.jsonl" \
  >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; exit 1; }
grep -q '"event": "plan"' "$tmp/m.jsonl" && echo "ok: the metrics file has the plans" ||
  bad "no plan lines in the metrics file"
"$RAGTAG" plot "$tmp/m.jsonl" -o "$tmp/p.png" >"$tmp/png.log" 2>&1 || bad "plot PNG: $(cat "$tmp/png.log")"
"$RAGTAG" plot "$tmp/m.jsonl" -o "$tmp/p.svg" >"$tmp/svg.log" 2>&1 || bad "plot SVG: $(cat "$tmp/svg.log")"
cat "$tmp/svg.log"
nwin=$(sed -n 's/.* loss \([0-9]*\) .*/\1/p' "$tmp/svg.log" | head -n 1)
python3 "$top_srcdir/tests/plot_check.py" "$tmp/p.png" "$tmp/p.svg" "${nwin:-0}" || fails=$((fails + 1))
"$RAGTAG" plot "$tmp/m.jsonl" "$tmp/m.jsonl" -o "$tmp/p.pdf" >/dev/null 2>&1 &&
  head -c 5 "$tmp/p.pdf" | grep -q "%PDF-" && echo "ok: two files on one PDF" || bad "PDF of two files"
"$RAGTAG" plot "$tmp/m.jsonl" -o "$tmp/p.gif" >"$tmp/e1.log" 2>&1
grep -q "must end in .png, .svg or .pdf" "$tmp/e1.log" && echo "ok: -o x.gif is refused" || bad "-o x.gif"
echo "not json" >"$tmp/junk.jsonl"
"$RAGTAG" plot "$tmp/junk.jsonl" -o "$tmp/j.png" >"$tmp/e2.log" 2>&1
grep -q "no curves in it" "$tmp/e2.log" && echo "ok: a file without metrics is refused" || bad "junk file"
[ $fails -eq 0 ] || exit 1
