package pods

import (
	"context"
	"flag"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain removes what an earlier run of these tests left behind when it
// was killed before its cleanups ran (a -timeout panic): the containers,
// volumes and networks labelled with the pid of a process that is gone.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		removeLeftovers()
	}
	os.Exit(m.Run())
}

func removeLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := docker(ctx, "info", "--format", "{{.ServerVersion}}"); err != nil {
		return
	}
	gone := func(label string) bool {
		pid, err := strconv.Atoi(label)
		if err != nil || pid <= 0 {
			return false
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	for _, kind := range [][]string{{"ps", "-a"}, {"volume", "ls"}, {"network", "ls"}} {
		args := append(append([]string{}, kind...), "--filter", "label=bagkeeper-pods-pid", "--format", `{{.ID}} {{.Label "bagkeeper-pods-pid"}}`)
		if kind[0] == "volume" {
			args[len(args)-1] = `{{.Name}} {{.Label "bagkeeper-pods-pid"}}`
		}
		out, err := docker(ctx, args...)
		if err != nil {
			continue
		}
		var ids []string
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && gone(f[1]) {
				ids = append(ids, f[0])
			}
		}
		if len(ids) == 0 {
			continue
		}
		rm := map[string][]string{"ps": {"rm", "-f", "-v"}, "volume": {"volume", "rm", "-f"}, "network": {"network", "rm"}}[kind[0]]
		docker(ctx, append(rm, ids...)...)
	}
}
