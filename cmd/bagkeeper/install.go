package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/agent/hooktools"
)

const installUsage = `Usage: bagkeeper install --to DIR
       bagkeeper install --charm SRC --charm-to DST

Prepares a pod's shared volumes, as the chart's init containers do:

  --to DIR             copies this bagkeeper binary and the hook tool binary
                       into DIR/bin and links the hook tools in DIR/tools, so
                       that a charm container of another image can run
                       'DIR/bin/bagkeeper hook-runner' with the tools on its
                       PATH;
  --charm SRC --charm-to DST
                       copies the charm directory SRC (as the charm's image
                       holds it) into DST, a volume the sidecar and the charm
                       container share. Files, directories and symbolic links
                       are copied with their permissions; files already in
                       DST are replaced.

Both can be given at once. A file is written under a temporary name and
renamed, so a container that restarts midway leaves no half-written binary.`

func cmdInstall(e *env, args []string) error {
	fs := newFlagSet("install", installUsage)
	var to, charm, charmTo, hookTool string
	fs.StringVar(&to, "to", "", "`dir`ectory to copy the binaries (bin/) and link the hook tools (tools/) into")
	fs.StringVar(&charm, "charm", "", "the charm `dir`ectory to copy")
	fs.StringVar(&charmTo, "charm-to", "", "`dir`ectory to copy the charm into")
	fs.StringVar(&hookTool, "hook-tool", defaultHookTool(), "`path` of the hook tool binary to copy")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	if (charm == "") != (charmTo == "") {
		return usageErrorf("--charm and --charm-to go together")
	}
	if to == "" && charm == "" {
		return usageErrorf("nothing to do: give --to, or --charm and --charm-to")
	}
	if to != "" {
		if err := installBinaries(e, to, hookTool); err != nil {
			return err
		}
	}
	if charm != "" {
		n, err := copyCharm(charm, charmTo)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "charm %s copied to %s (%d files)\n", charm, charmTo, n)
	}
	return nil
}

func installBinaries(e *env, to, hookTool string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	bin := filepath.Join(to, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	for src, name := range map[string]string{self: "bagkeeper", hookTool: "jujuc"} {
		if err := copyFile(src, filepath.Join(bin, name), 0o755); err != nil {
			return err
		}
	}
	abs, err := filepath.Abs(filepath.Join(bin, "jujuc"))
	if err != nil {
		return err
	}
	tools := filepath.Join(to, "tools")
	if err := agent.InstallTools(tools, abs); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "bagkeeper and jujuc copied to %s; %d hook tools linked in %s\n", bin, len(hooktools.Names()), tools)
	return nil
}

// copyFile copies src to dst with mode perm, through a temporary file in
// dst's directory.
func copyFile(src, dst string, perm fs.FileMode) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// copyCharm copies the charm tree src into dst and returns how many
// files it copied.
func copyCharm(src, dst string) (int, error) {
	if _, err := os.Stat(filepath.Join(src, "metadata.yaml")); err != nil {
		return 0, fmt.Errorf("--charm %s is not a charm directory: %w", src, err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, err
	}
	files := 0
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if rel == "." {
				return nil
			}
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			files++
			return copyFile(path, target, info.Mode().Perm())
		default:
			return fmt.Errorf("%s: not a file, directory or symbolic link", path)
		}
	})
	return files, err
}
