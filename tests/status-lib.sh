# status-lib.sh — the run tests/test_status.sh and test_status_page.sh look
# at: lenet on 2 local workers with --http on 127.0.0.1:$port, its URL and
# token read from the coordinator's line (docs/status.md). --min-share 0:
# on a loaded machine a worker measured slow would go on standby and come
# back as a new member (a row more); these tests are about the page.
# Sets: tmp, pids, url, token, run_pid; uses $port, $epochs.
status_start() {
  "$RAGTAG" train "$top_srcdir/examples/lenet.cfg" --workers 2 --threads 1 --epochs "$epochs" \
    --batch 64 --val 0.1 --log-every 20 --progress lines --metrics "$tmp/m.jsonl" \
    --min-share 0 --http "127.0.0.1:$port" >"$tmp/run.log" 2>&1 &
  run_pid=$!
  pids="$pids $run_pid"
  for _ in $(seq 100); do
    grep -q "status page on" "$tmp/run.log" && break
    sleep 0.1
  done
  line=$(grep -o "status page on http://[^ ]*" "$tmp/run.log" | head -n 1)
  url=${line#status page on }
  token=${url#*token=}
  url=${url%%\?*}
  url=${url%/}
  [ -n "$token" ] && [ "$token" != "$url" ]
}
# Whether the run ended well.
status_finish() {
  wait "$run_pid"; st=$?
  [ $st -eq 0 ] && grep -q "replicas identical" "$tmp/run.log"
}
