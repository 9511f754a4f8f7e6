package discovery_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/bagkeeper/bagkeeper/sidecar/discovery"
)

// A sidecar combines its sources in a Multi, uses whatever answered, logs
// what failed, and looks up again when the peers file changes. An empty
// answer only means "try again later".
func ExampleMulti() {
	static, err := discovery.NewStatic([]string{"peer-1.app:7000", "peer-0.app:7000"})
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, err := os.MkdirTemp("", "peers")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	file, err := discovery.NewFile(filepath.Join(dir, "peers"), slog.Default())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer file.Close()

	sources := discovery.NewMulti(static, file)
	addrs, err := sources.Lookup(context.Background())
	if err != nil {
		// Some source failed; addrs still holds what the others found.
		slog.Warn("peer discovery incomplete", slog.Any("error", err))
	}
	fmt.Println(addrs)
	// Output: [peer-0.app:7000 peer-1.app:7000]
}
