# summary.awk reads the -v output of the e2e suite (its tests run one
# after another) and prints what a person needs: the whole output of each
# failed test, whatever follows the last test (a panic, a timeout), the
# package's result line, and the slowest tests.
#   go test -v ./test/e2e/ >LOG 2>&1; awk -f test/e2e/summary.awk LOG
/^=== RUN   [^\/]+$/ { buf = $0 "\n"; intest = 1; next }
/^--- (PASS|FAIL|SKIP): / {
	if ($2 == "FAIL:") { printf "%s%s\n", buf, $0 }
	if ($2 == "PASS:") { d = $4; gsub(/[()s]/, "", d); slow[$3] = d + 0 }
	buf = ""; intest = 0; next
}
intest { buf = buf $0 "\n"; next }
/^(ok|FAIL|PASS)([ \t]|$)/ { print; next }
/^=== (PAUSE|CONT|NAME)/ { next }
{ print }
END {
	if (intest && buf != "") { printf "%s", buf } # a test that never ended (timeout, panic)
	n = 0
	for (t in slow) { names[++n] = t }
	# the 12 slowest, slowest first
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (slow[names[j]] > slow[names[i]]) { x = names[i]; names[i] = names[j]; names[j] = x }
	if (n > 0) print "slowest e2e tests:"
	for (i = 1; i <= n && i <= 12; i++) printf "  %7.1fs %s\n", slow[names[i]], names[i]
}
