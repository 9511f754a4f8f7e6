package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLogLinesHaveEveryKeyOnce(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(newUniqueKeys(slog.NewJSONHandler(&buf, nil)))
	l = l.With("app", "web", "pod", "web-0").With("app", "web", "unit", "web/0")
	l.Info("this unit is now the application leader", "unit", "web/0", "member", "web-0/x")
	l.Warn("failed to contact", "server-id", "web-1/y", "time", 3*time.Second, "unit", "web/1", "unit", "web/2", "app", "web")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	for _, line := range lines {
		// A JSON object with a repeated key decodes, keeping the last; count
		// the keys in the text instead.
		for _, key := range []string{`"app":`, `"unit":`, `"time":`, `"pod":`} {
			if n := strings.Count(line, key); n != 1 {
				t.Errorf("%s appears %d times in %s", key, n, line)
			}
		}
	}
	var second map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if second["time_"] != float64(3*time.Second) || second["unit_"] != "web/1" || second["unit__"] != "web/2" || second["unit"] != "web/0" {
		t.Fatalf("renamed keys lost their values: %v", second)
	}
}
