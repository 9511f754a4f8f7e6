package hooktools

import (
	"os"
	"path/filepath"
)

// fileSystem is the file access of the tools: -o/--output writes a file,
// --file reads one. Tests substitute an in-memory one.
type fileSystem interface {
	ReadFile(path string) ([]byte, error)
	// WriteFile creates or truncates path and writes data to it.
	WriteFile(path string, data []byte) error
}

// osFiles is the real file system.
type osFiles struct{}

func (osFiles) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

func (osFiles) WriteFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o666)
}

// absPath interprets path relative to dir, the caller's working directory.
func absPath(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}
