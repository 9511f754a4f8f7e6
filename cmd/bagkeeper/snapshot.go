package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/backup"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

const snapshotUsage = `Usage: bagkeeper snapshot save|status|restore ...

Backups of the application's replicated state: relations and their bags,
units and their claims, charm state, hook cursors, statuses, leader
settings, secrets (their content sealed, as the store holds it) and
actions. See docs/operations.md, "Backups: bagkeeper snapshot".

  bagkeeper snapshot save [flags] FILE
      ask this pod's running sidecar for a copy of the state as of now
      (every write committed before the command started is in it), and
      write it to FILE
  bagkeeper snapshot status [flags] FILE     (or: snapshot verify)
      check FILE's checksum, decode it and say what it holds
  bagkeeper snapshot restore --data-dir DIR [--app NAME] FILE
      write a new data dir from which 'bagkeeper run' starts a NEW group
      (a new cluster id) holding FILE's state; the other pods join it with
      empty data dirs

Run 'bagkeeper snapshot <subcommand> --help' for each one's flags.`

func cmdSnapshot(e *env, args []string) error {
	if len(args) == 0 {
		return usageErrorf("expected 'snapshot save', 'snapshot status' or 'snapshot restore'")
	}
	switch args[0] {
	case "save":
		return cmdSnapshotSave(e, args[1:])
	case "status", "verify":
		return cmdSnapshotStatus(e, args[0], args[1:])
	case "restore":
		return cmdSnapshotRestore(e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(e.stdout, snapshotUsage)
		return nil
	}
	return usageErrorf("unknown subcommand %q: expected save, status (or verify) or restore", args[0])
}

const snapshotSaveUsage = `Usage: bagkeeper snapshot save [flags] FILE

Asks this pod's running sidecar (through its admin socket) for a copy of
the application's replicated state and writes it to FILE. The copy is read
linearizably: the raft leader confirms its commit index, and the member
that answers waits until it has applied it, so even a follower's copy holds
every write committed before the command started. Any member may be asked;
nothing is written to the raft log.

The file has a header (application, cluster id, raft index and term, time,
length) and a SHA-256 checksum over all of it; the state is in the state
machine's own snapshot encoding. It is written to FILE.tmp, synced, read
back and checked, and only then named FILE: FILE is never half written. An
existing FILE is refused unless --force.

Progress (bytes written) goes to standard error for a large state; the last
line, on standard output, gives the raft index, the size and the SHA-256 of
the file (--format json: the same as a JSON object).`

// snapshotProgressFrom is the file size from which save reports progress.
const snapshotProgressFrom = 4 << 20

func cmdSnapshotSave(e *env, args []string) error {
	var a adminFlags
	var force bool
	fs := newFlagSet("snapshot save", snapshotSaveUsage)
	a.register(fs, "text|json")
	// A large state takes longer than an ordinary admin call.
	a.timeout = 10 * time.Minute
	fs.Lookup("timeout").DefValue = a.timeout.String()
	fs.BoolVar(&force, "force", false, "replace FILE if it exists")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("expected exactly one FILE, got %q", rest)
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	path := rest[0]
	var hdr *backup.Header
	var sum [32]byte
	var size int64
	err = a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		stream, err := c.SaveSnapshot(ctx, &adminpb.SaveSnapshotRequest{})
		if err != nil {
			return err
		}
		first, err := stream.Recv()
		if err != nil {
			return err
		}
		size = first.GetSize()
		r := &chunkReader{next: stream.Recv, buf: first.GetData(), total: size, stderr: e.stderr, last: time.Now()}
		hdr, sum, err = backup.WriteStream(path, r, force)
		if r.err != nil && !errors.Is(r.err, io.EOF) {
			return r.err
		}
		if err != nil {
			return err
		}
		r.report(true)
		if hdr.Index != first.GetIndex() || hdr.ClusterID != first.GetClusterId() {
			return fmt.Errorf("the sidecar announced index %d of cluster %s and sent index %d of %s", first.GetIndex(), first.GetClusterId(), hdr.Index, hdr.ClusterID)
		}
		return nil
	})
	if err != nil {
		var ex *backup.Exists
		if errors.As(err, &ex) {
			return usageErrorf("%v", ex)
		}
		return err
	}
	digest := hex.EncodeToString(sum[:])
	if a.format == "json" {
		return writeJSON(e.stdout, map[string]any{
			"file": path, "app": hdr.App, "cluster_id": hdr.ClusterID, "index": hdr.Index, "term": hdr.Term,
			"time": hdr.Time.UTC().Format(time.RFC3339Nano), "size": size, "sha256": digest, "member": hdr.Member,
		})
	}
	fmt.Fprintf(e.stdout, "saved %s: index %d, %d bytes, sha256 %s\n", path, hdr.Index, size, digest)
	return nil
}

// chunkReader reads a SaveSnapshot stream as one file, telling stderr how
// far it got now and then.
type chunkReader struct {
	next   func() (*adminpb.SnapshotChunk, error)
	buf    []byte
	err    error
	read   int64
	total  int64
	stderr io.Writer
	last   time.Time
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		m, err := r.next()
		if err != nil {
			r.err = err
			continue
		}
		r.buf = m.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	r.read += int64(n)
	r.report(false)
	return n, nil
}

// report prints progress at most once a second for a large file, and at
// the end if it printed any before.
func (r *chunkReader) report(final bool) {
	if r.total < snapshotProgressFrom || (!final && time.Since(r.last) < time.Second) || (final && r.last.IsZero()) {
		return
	}
	r.last = time.Now()
	if final {
		r.last = time.Time{}
	}
	fmt.Fprintf(r.stderr, "snapshot save: %d of %d bytes written (%d%%)\n", r.read, r.total, r.read*100/max(r.total, 1))
}

const snapshotStatusUsage = `Usage: bagkeeper snapshot status [flags] FILE
       bagkeeper snapshot verify [flags] FILE

Checks a snapshot file written by 'bagkeeper snapshot save': its format,
its length and its SHA-256 checksum over header and body, then decodes the
state it holds. Prints the application, its cluster id, the raft index and
term, when it was saved and by which member, the file's SHA-256, and how
many units (active ones), relations, bags, bag keys, charm states, secrets
and actions it holds. Exits 1, saying why, for a file that is damaged (a
changed byte anywhere), truncated, or not a snapshot file. Needs no
sidecar.`

func cmdSnapshotStatus(e *env, name string, args []string) error {
	var format string
	fs := newFlagSet("snapshot "+name, snapshotStatusUsage)
	fs.StringVar(&format, "format", "text", "output `format`: text|json")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("expected exactly one FILE, got %q", rest)
	}
	if err := checkFormat(format, "text", "json"); err != nil {
		return err
	}
	hdr, st, sum, err := backup.ReadFile(rest[0])
	if err != nil {
		return err
	}
	c := st.Count()
	digest := hex.EncodeToString(sum[:])
	if format == "json" {
		out := map[string]any{
			"file": rest[0], "app": hdr.App, "cluster_id": hdr.ClusterID, "index": hdr.Index, "term": hdr.Term,
			"time": hdr.Time.UTC().Format(time.RFC3339Nano), "member": hdr.Member, "bagkeeper_version": hdr.Version,
			"body_length": hdr.BodyLength, "sha256": digest, "counts": c,
		}
		if hdr.RestoredFrom != "" {
			out["restored_from"] = hdr.RestoredFrom
		}
		return writeJSON(e.stdout, out)
	}
	w := e.stdout
	fmt.Fprintf(w, "file          %s (checksum OK)\n", rest[0])
	fmt.Fprintf(w, "sha256        %s\n", digest)
	fmt.Fprintf(w, "application   %s\n", hdr.App)
	fmt.Fprintf(w, "cluster id    %s\n", hdr.ClusterID)
	if hdr.RestoredFrom != "" {
		fmt.Fprintf(w, "restored from cluster %s\n", hdr.RestoredFrom)
	}
	fmt.Fprintf(w, "raft index    %d (term %d)\n", hdr.Index, hdr.Term)
	fmt.Fprintf(w, "saved         %s by %s (bagkeeper %s)\n", hdr.Time.UTC().Format(time.RFC3339), orDash(hdr.Member), orDash(hdr.Version))
	fmt.Fprintf(w, "units         %d (%d active)\n", c.Units, c.ActiveUnits)
	fmt.Fprintf(w, "relations     %d\n", c.Relations)
	fmt.Fprintf(w, "bags          %d\n", c.Bags)
	fmt.Fprintf(w, "keys          %d\n", c.Keys)
	fmt.Fprintf(w, "charm states  %d (%d keys)\n", c.CharmStates, c.CharmKeys)
	fmt.Fprintf(w, "secrets       %d\n", c.Secrets)
	fmt.Fprintf(w, "actions       %d\n", c.Actions)
	return nil
}

const snapshotRestoreUsage = `Usage: bagkeeper snapshot restore --data-dir DIR [--app NAME] FILE

Writes a NEW data dir, DIR, from which 'bagkeeper run --data-dir DIR' starts
a new raft group holding the state saved in FILE. Nothing runs: the sidecars
of the application must all be stopped (scaled to 0), and DIR must not
exist or be empty (a file system's lost+found aside). FILE is checked (as
'snapshot status' does) first; with --app, a file of another application is
refused.

DIR then holds only the state, staged for a new group with a NEW cluster id,
so that the new group is never taken for the old one: a pod that still has
a data dir of the old group is refused when it asks to join, and must start
with an empty one. The first 'bagkeeper run' on DIR (whatever its
--bootstrap-expect) makes its member the only voter of the new group, which
it leads; the group's raft log goes on after FILE's raft index. Start the
other pods with empty data dirs: they join it, get every bag, and become
voters as usual.

The new group keeps the relations and their bags (revisions included), the
units (a unit stays held by its old member until its pod claims it again by
ordinal or pod name; one whose pod never comes back is released and removed
by the usual rules), charm state, hook cursors, statuses, leader settings,
secrets (sealed: give the pods the same --secrets-key-file) and actions. It
does not keep the old members, the raft log, the recovery generation, the
leadership lease (it has expired; the leader unit is chosen anew), client
sessions, waiting claimants or divergence reports.`

func cmdSnapshotRestore(e *env, args []string) error {
	var dataDir, app string
	fs := newFlagSet("snapshot restore", snapshotRestoreUsage)
	fs.StringVar(&dataDir, "data-dir", "", "the new data `dir` to write (must not exist or be empty); required")
	fs.StringVar(&app, "app", "", "refuse a snapshot of any other application than this `name`")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("expected exactly one FILE, got %q", rest)
	}
	if dataDir == "" {
		return usageErrorf("--data-dir is required: the new data dir to write")
	}
	hdr, st, _, err := backup.ReadFile(rest[0])
	if err != nil {
		return err
	}
	staged, err := raftstore.StageRestore(dataDir, app, hdr, st, time.Now())
	if err != nil {
		return err
	}
	c := st.Count()
	fmt.Fprintf(e.stdout, "restored %s into %s: application %s, raft index %d, %d units, %d relations, %d bags\n", rest[0], dataDir, staged.App, staged.Index, c.Units, c.Relations, c.Bags)
	fmt.Fprintf(e.stdout, "new cluster id %s (the snapshot's group was %s)\n", staged.ClusterID, staged.RestoredFrom)
	fmt.Fprintf(e.stdout, "Start 'bagkeeper run --data-dir %s' in the first pod, then the other pods with empty data dirs.\n", dataDir)
	return nil
}
