package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
)

// adminFlags are the flags every admin command shares.
type adminFlags struct {
	socket  string
	dataDir string
	config  string
	timeout time.Duration
	format  string
}

func (a *adminFlags) register(fs *cmdFlags, formats string) {
	a.registerSocket(fs)
	fs.DurationVar(&a.timeout, "timeout", 10*time.Second, "give up after this `long`")
	a.registerFormat(fs, formats)
}

// registerSocket registers the flags that find the sidecar.
func (a *adminFlags) registerSocket(fs *cmdFlags) {
	fs.StringVar(&a.socket, "admin-socket", "", "Unix socket `path` of the sidecar's admin API (default <data-dir>/admin.sock)")
	fs.StringVar(&a.dataDir, "data-dir", defaultDataDir, "the sidecar's data `dir`, to find its admin socket")
	fs.StringVar(&a.config, "config", "", "the sidecar's config `file` (bagkeeper run --config): its admin-socket and data-dir, when not given otherwise")
}

func (a *adminFlags) registerFormat(fs *cmdFlags, formats string) {
	if formats != "" {
		fs.StringVar(&a.format, "format", strings.Split(formats, "|")[0], "output `format`: "+formats)
	}
}

// writeFormats are the output formats of the commands that write: a line
// for people, or one JSON object for scripts.
const writeFormats = "text|json"

// report prints what a write did: text, or with --format json the object.
func (a *adminFlags) report(w io.Writer, obj map[string]any, format string, args ...any) error {
	if a.format == "json" {
		return writeJSON(w, obj)
	}
	_, err := fmt.Fprintf(w, format, args...)
	return err
}

func (a *adminFlags) dial() (adminpb.AdminClient, func(), error) {
	path := a.socket
	if path == "" {
		path = filepath.Join(a.dataDir, "admin.sock")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(adminpb.MaxReply), grpc.MaxCallSendMsgSize(adminpb.MaxRequest)))
	if err != nil {
		return nil, nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	return adminpb.NewAdminClient(conn), func() { conn.Close() }, nil
}

func (a *adminFlags) call(fn func(ctx context.Context, c adminpb.AdminClient) error) error {
	c, closeFn, err := a.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if err := fn(ctx, c); err != nil {
		return friendly(err, a)
	}
	return nil
}

// friendly turns a gRPC error into what an operator needs to read.
func friendly(err error, a *adminFlags) error {
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := s.Message()
	// Only an error dialing the admin socket itself means no sidecar: the
	// sidecar's own answers may name peers that refused a connection.
	if strings.Contains(msg, "dial unix") && (strings.Contains(msg, "connect: no such file") || strings.Contains(msg, "connect: connection refused")) {
		path := a.socket
		if path == "" {
			path = filepath.Join(a.dataDir, "admin.sock")
		}
		return fmt.Errorf("no sidecar answers at %s: is `bagkeeper run` running with this --data-dir or --admin-socket?", path)
	}
	if strings.Contains(msg, "permission denied") {
		return fmt.Errorf("%s (the admin socket is only for the sidecar's own user)", msg)
	}
	return fmt.Errorf("%s", msg)
}

func checkFormat(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return usageErrorf("--format must be one of %s, got %q", strings.Join(allowed, ", "), format)
}

const statusUsage = `Usage: bagkeeper status [flags]

Shows the application's raft group as this pod's sidecar sees it: every
member with its suffrage, address, raft state, applied index and last contact
with the leader (each member is asked), every unit with its holder and state,
and every relation; for a relation between applications, the revision of
the remote application's view this group holds and, on the raft leader, the
stream to the provider of an offer this application consumes.

With --url it asks a sidecar's HTTP port instead of its admin socket (GET
/status: read-only, no bag content), as the chart's 'helm test' pod does
from outside the pods. With --check it exits 1 unless the group is healthy:
a raft leader is known and every voter answers.`

func cmdStatus(e *env, args []string) error {
	var a adminFlags
	var url string
	var check bool
	fs := newFlagSet("status", statusUsage)
	a.register(fs, "table|json")
	fs.StringVar(&url, "url", "", "ask the sidecar at this HTTP `url` (e.g. http://web-0.web-peers:7401) instead of the admin socket")
	fs.BoolVar(&check, "check", false, "exit 1 unless a raft leader is known and every voter answers")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	if err := checkFormat(a.format, "table", "json"); err != nil {
		return err
	}
	show := func(st *adminpb.StatusResponse) error {
		if a.format == "json" {
			if err := writeJSON(e.stdout, statusJSON(st)); err != nil {
				return err
			}
		} else {
			printStatus(e.stdout, st, time.Now())
		}
		if check {
			return checkHealthy(st)
		}
		return nil
	}
	if url != "" {
		st, err := statusOverHTTP(url, a.timeout)
		if err != nil {
			return err
		}
		return show(st)
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		st, err := c.Status(ctx, &adminpb.StatusRequest{})
		if err != nil {
			return err
		}
		return show(st)
	})
}

// statusOverHTTP reads a sidecar's status from its HTTP port.
func statusOverHTTP(url string, timeout time.Duration) (*adminpb.StatusResponse, error) {
	url = strings.TrimSuffix(url, "/")
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, usageErrorf("--url %q: give it as http://host:port", url)
	}
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get(url + "/status")
	if err != nil {
		return nil, fmt.Errorf("asking the sidecar at %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, adminpb.MaxReply))
	if err != nil {
		return nil, fmt.Errorf("reading the status from %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the sidecar at %s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	st := &adminpb.StatusResponse{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, st); err != nil {
		return nil, fmt.Errorf("the answer from %s is not a sidecar's status: %w", url, err)
	}
	return st, nil
}

// checkHealthy says why the group is not healthy, or nil.
func checkHealthy(st *adminpb.StatusResponse) error {
	var why []string
	if st.GetLeader() == "" {
		why = append(why, "no raft leader is known")
	}
	for _, m := range st.GetMembers() {
		if m.GetSuffrage() == "Voter" && !m.GetReachable() {
			why = append(why, fmt.Sprintf("voter %s (%s) does not answer", m.GetId(), m.GetAddress()))
		}
		if m.GetDiverged() != "" {
			why = append(why, fmt.Sprintf("member %s diverged", m.GetId()))
		}
	}
	if len(why) > 0 {
		return fmt.Errorf("unhealthy: %s", strings.Join(why, "; "))
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// statusJSON is the stable JSON shape of `status --format=json`.
func statusJSON(st *adminpb.StatusResponse) map[string]any {
	members := []map[string]any{}
	for _, m := range st.GetMembers() {
		mm := map[string]any{
			"id": m.GetId(), "address": m.GetAddress(), "suffrage": strings.ToLower(m.GetSuffrage()),
			"leader": m.GetLeader(), "reachable": m.GetReachable(),
		}
		if m.GetReachable() {
			mm["raft_state"] = m.GetRaftState()
			mm["applied_index"] = m.GetAppliedIndex()
			if lc := m.GetLastContactNanos(); lc >= 0 {
				mm["last_contact_seconds"] = time.Duration(lc).Seconds()
			}
			mm["version"] = m.GetVersion()
			if ls := m.GetLogStore(); ls != "" {
				mm["log_store"] = ls
			}
		} else {
			mm["error"] = m.GetError()
		}
		if d := m.GetDiverged(); d != "" {
			mm["diverged"] = d
		}
		members = append(members, mm)
	}
	units := []map[string]any{}
	for _, u := range st.GetUnits() {
		units = append(units, map[string]any{
			"name": u.GetName(), "state": u.GetState(), "member": u.GetMember(), "pod": u.GetPod(),
			"since": time.Unix(0, u.GetSinceUnixNano()).UTC().Format(time.RFC3339), "reason": u.GetReason(),
			"workload_status": u.GetWorkloadStatus(), "workload_message": u.GetWorkloadMessage(), "hook_error": u.GetHookError(),
			"hook_error_attempt": u.GetHookErrorAttempt(), "hook_error_next_attempt": rfc3339OrEmpty(u.GetHookErrorNextAttemptUnixNano()),
			"leader": u.GetName() == st.GetLeaderUnit(), "lost": lost(st, u),
		})
	}
	waiting := []map[string]any{}
	for _, c := range st.GetWaiting() {
		waiting = append(waiting, map[string]any{"member": c.GetMember(), "pod": c.GetPod(), "since": time.Unix(0, c.GetSinceUnixNano()).UTC().Format(time.RFC3339)})
	}
	relations := []map[string]any{}
	for _, r := range st.GetRelations() {
		m := map[string]any{
			"id": r.GetId(), "key": r.GetKey(), "interface": r.GetInterface(), "peer": r.GetPeer(),
			"remote_app": r.GetRemoteApp(), "remote_endpoint": r.GetRemoteEndpoint(), "bags": r.GetBags(),
		}
		if !r.GetPeer() {
			m["offered"], m["remote_source"], m["remote_revision"] = r.GetOffered(), r.GetRemoteSource(), r.GetRemoteRevision()
		}
		if s := r.GetStream(); s != nil {
			m["stream"] = map[string]any{"connected": s.GetConnected(), "address": s.GetAddress(), "last_error": s.GetLastError(),
				"since": time.Unix(0, s.GetSinceUnixNano()).UTC().Format(time.RFC3339)}
		}
		relations = append(relations, m)
	}
	return map[string]any{
		"app": st.GetApp(), "cluster_id": st.GetClusterId(), "self": st.GetSelf(), "unit": st.GetUnit(),
		"leader": st.GetLeader(), "term": st.GetTerm(), "commit_index": st.GetCommitIndex(), "applied_index": st.GetAppliedIndex(),
		"ready": st.GetReady(), "not_ready_reason": st.GetNotReadyReason(),
		"members": members, "units": units, "waiting": waiting, "relations": relations,
		"relations_file_error": st.GetRelationsFileError(),
		"leader_unit":          st.GetLeaderUnit(), "lease_expires": leaseExpires(st),
	}
}

// lost says whether an active unit's holder does not answer (or is no
// member any more): its pod is gone or cut off, and runs no hooks.
func lost(st *adminpb.StatusResponse, u *adminpb.Unit) bool {
	if u.GetState() != "active" {
		return false
	}
	for _, m := range st.GetMembers() {
		if m.GetId() == u.GetMember() {
			return !m.GetReachable()
		}
	}
	return true
}

// leaseExpires is when the leadership lease ends unless renewed (RFC 3339),
// or "" when no unit holds it.
func leaseExpires(st *adminpb.StatusResponse) string {
	if st.GetLeaderUnit() == "" {
		return ""
	}
	return time.Unix(0, st.GetLeaseExpiresUnixNano()).UTC().Format(time.RFC3339)
}

func printStatus(w io.Writer, st *adminpb.StatusResponse, now time.Time) {
	ready := "ready"
	if !st.GetReady() {
		ready = "not ready: " + st.GetNotReadyReason()
	}
	leader := st.GetLeader()
	if leader == "" {
		leader = "(none known)"
	}
	fmt.Fprintf(w, "Application %s   cluster %s   term %d   applied %d of %d\n", st.GetApp(), st.GetClusterId(), st.GetTerm(), st.GetAppliedIndex(), st.GetCommitIndex())
	fmt.Fprintf(w, "This pod     %s holding %s, %s\n", st.GetSelf(), orDash(st.GetUnit()), ready)
	fmt.Fprintf(w, "Leader       %s\n", leader)
	appLeader := "(none: no unit holds the lease)"
	if u := st.GetLeaderUnit(); u != "" {
		appLeader = fmt.Sprintf("%s (lease runs %s more unless renewed)", u, roundDuration(time.Unix(0, st.GetLeaseExpiresUnixNano()).Sub(now)))
	}
	fmt.Fprintf(w, "App leader   %s\n\n", appLeader)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSUFFRAGE\tADDRESS\tSTATE\tAPPLIED\tLAST CONTACT\tLOG STORE")
	for _, m := range st.GetMembers() {
		state, applied, contact, logStore := "unreachable", "-", "-", "-"
		if m.GetReachable() {
			state, applied = m.GetRaftState(), strconv.FormatUint(m.GetAppliedIndex(), 10)
			logStore = orDash(m.GetLogStore()) // a member of an older version does not say
			switch lc := m.GetLastContactNanos(); {
			case m.GetLeader():
				contact = "(leader)"
			case lc < 0:
				contact = "never"
			default:
				contact = roundDuration(time.Duration(lc)) + " ago"
			}
		}
		if m.GetDiverged() != "" {
			state += " DIVERGED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.GetId(), strings.ToLower(m.GetSuffrage()), m.GetAddress(), state, applied, contact, logStore)
	}
	tw.Flush()
	for _, m := range st.GetMembers() {
		if d := m.GetDiverged(); d != "" {
			fmt.Fprintf(w, "%s: state diverged from the group's %s; it serves nothing: move its data dir away and restart it\n", m.GetId(), d)
		}
	}
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UNIT\tSTATE\tHOLDER\tSINCE\tWORKLOAD\tREASON")
	units := st.GetUnits()
	sort.SliceStable(units, func(i, j int) bool { return unitNumber(units[i].GetName()) < unitNumber(units[j].GetName()) })
	for _, u := range units {
		since := time.Unix(0, u.GetSinceUnixNano())
		workload := u.GetWorkloadStatus()
		if m := u.GetWorkloadMessage(); m != "" {
			workload += ": " + m
		}
		if h := u.GetHookError(); h != "" {
			workload = "error: hook failed: " + h + hookRetryNote(u, now)
		}
		name, state, reason := u.GetName(), u.GetState(), u.GetReason()
		if name == st.GetLeaderUnit() {
			name += "*" // the application leader, as juju status marks it
		}
		if lost(st, u) {
			state, reason = "lost", "its pod's member does not answer"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\t%s\n", name, state, u.GetMember(), roundDuration(now.Sub(since)), orDash(workload), orDash(reason))
	}
	if len(units) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t\t")
	}
	for _, c := range st.GetWaiting() {
		fmt.Fprintf(tw, "(waiting)\t-\t%s\t%s ago\t-\tpod %s waits for a unit: the declared scale is reached\n", c.GetMember(), roundDuration(now.Sub(time.Unix(0, c.GetSinceUnixNano()))), c.GetPod())
	}
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RELATION\tINTERFACE\tREMOTE\tBAGS\tREMOTE VIEW\tSTREAM")
	for _, r := range st.GetRelations() {
		remote, view := "(peer)", "-"
		switch {
		case r.GetOffered():
			remote = r.GetRemoteApp() + ":" + r.GetRemoteEndpoint() + " (consumes our offer)"
		case !r.GetPeer():
			remote = r.GetRemoteApp() + ":" + r.GetRemoteEndpoint() + " (offer we consume)"
		}
		if !r.GetPeer() {
			view = "none yet"
			if r.GetRemoteRevision() > 0 {
				view = fmt.Sprintf("revision %d", r.GetRemoteRevision())
			}
		}
		stream := "-"
		if s := r.GetStream(); s != nil {
			since := roundDuration(now.Sub(time.Unix(0, s.GetSinceUnixNano())))
			if s.GetConnected() {
				stream = fmt.Sprintf("open to %s for %s", s.GetAddress(), since)
			} else {
				stream = fmt.Sprintf("down for %s: %s", since, s.GetLastError())
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.GetKey(), orDash(r.GetInterface()), remote, r.GetBags(), view, stream)
	}
	if len(st.GetRelations()) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t\t")
	}
	tw.Flush()
	if e := st.GetRelationsFileError(); e != "" {
		fmt.Fprintf(w, "\nThe relations file is not loaded; the previous one stays in force: %s\n", e)
	}
}

// hookRetryNote says which attempt of a failed hook failed last and when
// the next is due: " (attempt 3, next in 40s)"; "" when unknown (a failure
// recorded by an older version).
func hookRetryNote(u *adminpb.Unit, now time.Time) string {
	n := u.GetHookErrorAttempt()
	if n == 0 {
		return ""
	}
	next := u.GetHookErrorNextAttemptUnixNano()
	if next == 0 {
		return fmt.Sprintf(" (attempt %d)", n)
	}
	if d := time.Unix(0, next).Sub(now); d > 0 {
		return fmt.Sprintf(" (attempt %d, next in %s)", n, roundDuration(d))
	}
	return fmt.Sprintf(" (attempt %d, next due now)", n)
}

// rfc3339OrEmpty formats unix nanoseconds as RFC 3339 (UTC), "" for 0.
func rfc3339OrEmpty(n int64) string {
	if n == 0 {
		return ""
	}
	return time.Unix(0, n).UTC().Format(time.RFC3339Nano)
}

func unitNumber(name string) int64 {
	i := strings.LastIndexByte(name, '/')
	n, _ := strconv.ParseInt(name[i+1:], 10, 64)
	return n
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func roundDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

const bagsUsage = `Usage: bagkeeper bags [flags] [OWNER]
       bagkeeper bags set --relation REL OWNER key=value ... [key= ...]

Reads relation data bags through this pod's sidecar. OWNER is a unit
(app/0) or an application name; without it every bag is shown; an OWNER
that is neither a unit of this application nor an application in its
relations is an error. --relation takes an id (3) or endpoint:id (peers:3);
with an endpoint, the relation must be on it.

The read is linearizable: it shows every write committed before it was
asked, whichever pod answers (the leader confirms it still leads, and this
pod's copy catches up first); without a leader it fails. --stale reads this
pod's copy as it is, which works without a leader but may be behind; on a
pod that is not ready it says so on stderr.

'bags set' writes keys of one bag through raft, as an operator's repair
tool; 'key=' deletes a key. Charms write their bags with relation-set.`

func cmdBags(e *env, args []string) error {
	if len(args) > 0 && args[0] == "set" {
		return cmdBagsSet(e, args[1:])
	}
	var a adminFlags
	var rel string
	var stale bool
	fs := newFlagSet("bags", bagsUsage)
	a.register(fs, "yaml|json")
	fs.StringVar(&rel, "relation", "", "only this relation: `id` or endpoint:id")
	fs.BoolVar(&stale, "stale", false, "read this pod's copy as it is, without asking the leader (may be behind)")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 1 {
		return usageErrorf("expected at most one OWNER, got %q", rest)
	}
	if err := checkFormat(a.format, "yaml", "json"); err != nil {
		return err
	}
	relID, endpoint := int64(-1), ""
	if rel != "" {
		if relID, endpoint, err = parseRelation(rel); err != nil {
			return err
		}
	}
	owner := ""
	if len(rest) == 1 {
		owner = rest[0]
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		resp, err := c.GetBags(ctx, &adminpb.GetBagsRequest{RelationId: relID, Endpoint: endpoint, Owner: owner, Stale: stale})
		if err != nil {
			return err
		}
		if why := resp.GetNotReadyReason(); why != "" {
			fmt.Fprintf(e.stderr, "warning: stale read at raft index %d from a pod that is not ready (%s): it may be behind\n", resp.GetIndex(), why)
		}
		out := map[string]map[string]map[string]string{}
		for _, b := range resp.GetBags() {
			if out[b.GetRelation()] == nil {
				out[b.GetRelation()] = map[string]map[string]string{}
			}
			data := b.GetData()
			if data == nil {
				data = map[string]string{}
			}
			out[b.GetRelation()][b.GetOwner()] = data
		}
		if a.format == "json" {
			return writeJSON(e.stdout, out)
		}
		if len(out) == 0 {
			fmt.Fprintln(e.stdout, "{}")
			return nil
		}
		enc := yaml.NewEncoder(e.stdout)
		enc.SetIndent(2)
		return enc.Encode(out)
	})
}

// parseRelation accepts "3" or "endpoint:3". The sidecar checks that
// relation 3 is on that endpoint.
func parseRelation(s string) (int64, string, error) {
	endpoint, idPart := "", s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		endpoint, idPart = s[:i], s[i+1:]
	}
	id, err := strconv.ParseInt(idPart, 10, 64)
	if err != nil || id < 0 || (endpoint == "" && idPart != s) {
		return 0, "", usageErrorf("relation %q: expected an id or endpoint:id", s)
	}
	return id, endpoint, nil
}

func cmdBagsSet(e *env, args []string) error {
	var a adminFlags
	var rel string
	fs := newFlagSet("bags set", bagsUsage)
	a.register(fs, writeFormats)
	fs.StringVar(&rel, "relation", "", "the relation: `id` or endpoint:id (required)")
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	if rel == "" {
		return usageErrorf("--relation is required")
	}
	relID, endpoint, err := parseRelation(rel)
	if err != nil {
		return err
	}
	if len(rest) < 2 {
		return usageErrorf("expected OWNER and at least one key=value")
	}
	set, del := map[string]string{}, []string{}
	seen := map[string]bool{}
	for _, kv := range rest[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usageErrorf("expected \"key=value\", got %q", kv)
		}
		if seen[k] {
			return usageErrorf("key %q specified more than once", k)
		}
		seen[k] = true
		if v == "" {
			del = append(del, k)
		} else {
			set[k] = v
		}
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		resp, err := c.SetBag(ctx, &adminpb.SetBagRequest{RelationId: relID, Endpoint: endpoint, Owner: rest[0], Set: set, Delete: del})
		if err != nil {
			return err
		}
		return a.report(e.stdout, map[string]any{"relation_id": relID, "owner": rest[0], "set": set, "deleted": del, "index": resp.GetIndex()},
			"committed at raft index %d\n", resp.GetIndex())
	})
}

const relationUsage = `Usage: bagkeeper relation ensure --endpoint NAME [--interface NAME] (--peer | --remote-app APP --remote-endpoint NAME)
       bagkeeper relation remove REL

ensure creates a relation unless one with the same endpoint and remote side
exists, and prints its key (endpoint:id). The unit agent creates peer
relations from the charm's metadata itself; this command is for operators
and demos. On a sidecar that runs a charm, the endpoint must be one of the
charm's (a peer endpoint with --peer, a provides or requires endpoint
without).

remove ends a relation made with ensure (REL: id or endpoint:id): its bags
go, and every unit runs relation-departed and relation-broken for it. Peer
relations last as long as the application, and relations with other
applications made through the relations file end when they leave that
file: both are refused.`

func cmdRelation(e *env, args []string) error {
	if len(args) > 0 && args[0] == "remove" {
		return cmdRelationRemove(e, args[1:])
	}
	if len(args) == 0 || args[0] != "ensure" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
			fmt.Fprintln(e.stdout, relationUsage)
			return nil
		}
		return usageErrorf("expected 'relation ensure' or 'relation remove'")
	}
	var a adminFlags
	var endpoint, iface, remoteApp, remoteEndpoint string
	var peer bool
	fs := newFlagSet("relation ensure", relationUsage)
	a.register(fs, writeFormats)
	fs.StringVar(&endpoint, "endpoint", "", "this application's endpoint `name`")
	fs.StringVar(&iface, "interface", "", "interface `name`")
	fs.BoolVar(&peer, "peer", false, "a peer relation (among this application's units)")
	fs.StringVar(&remoteApp, "remote-app", "", "the other application's `name`")
	fs.StringVar(&remoteEndpoint, "remote-endpoint", "", "the other application's endpoint `name`")
	rest, err := parse(e, fs, args[1:])
	if err != nil {
		return err
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	if endpoint == "" {
		return usageErrorf("--endpoint is required")
	}
	if peer == (remoteApp != "") {
		return usageErrorf("give either --peer or --remote-app with --remote-endpoint")
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		resp, err := c.EnsureRelation(ctx, &adminpb.EnsureRelationRequest{Endpoint: endpoint, Interface: iface, Peer: peer, RemoteApp: remoteApp, RemoteEndpoint: remoteEndpoint})
		if err != nil {
			return err
		}
		return a.report(e.stdout, map[string]any{"relation": fmt.Sprintf("%s:%d", endpoint, resp.GetRelationId()), "relation_id": resp.GetRelationId()},
			"%s:%d\n", endpoint, resp.GetRelationId())
	})
}

func cmdRelationRemove(e *env, args []string) error {
	var a adminFlags
	fs := newFlagSet("relation remove", relationUsage)
	a.register(fs, writeFormats)
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("expected exactly one REL (id or endpoint:id), got %q", rest)
	}
	id, endpoint, err := parseRelation(rest[0])
	if err != nil {
		return err
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		resp, err := c.RemoveRelation(ctx, &adminpb.RemoveRelationRequest{RelationId: id, Endpoint: endpoint})
		if err != nil {
			return err
		}
		return a.report(e.stdout, map[string]any{"relation": rest[0], "removed": true, "index": resp.GetIndex()},
			"relation %s removed at raft index %d\n", rest[0], resp.GetIndex())
	})
}

const unitUsage = `Usage: bagkeeper unit remove [--force] UNIT
       bagkeeper unit retry UNIT

remove removes a released unit at once (for example after scaling down):
its charm state goes, its relation bags stay readable while their
relations exist, and its number is never given to another pod without an
ordinal. Units otherwise leave only after being released and unclaimed for
--unit-remove-after. An active unit (a running pod holds it) is removed
only with --force; its pod then holds no unit until it restarts.

retry (Juju's 'resolved') asks the agent holding UNIT to run its failed
hook again now instead of waiting out its backoff (the pause after each
failure: 'bagkeeper run --hook-retry-delay', doubling up to 5 minutes). It
commits the request through raft, so it works from any pod; the agent
holding the unit runs the hook at once. It fails (exit 1) when UNIT does not
exist, was removed, or has no failed hook. 'bagkeeper show-unit UNIT' then
shows the attempt in the unit's hook history.`

func cmdUnit(e *env, args []string) error {
	if len(args) > 0 && args[0] == "retry" {
		return cmdUnitRetry(e, args[1:])
	}
	if len(args) == 0 || args[0] != "remove" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
			fmt.Fprintln(e.stdout, unitUsage)
			return nil
		}
		return usageErrorf("expected 'unit remove UNIT' or 'unit retry UNIT'")
	}
	var a adminFlags
	var force bool
	fs := newFlagSet("unit remove", unitUsage)
	a.register(fs, writeFormats)
	fs.BoolVar(&force, "force", false, "remove the unit even if a running pod holds it")
	rest, err := parse(e, fs, args[1:])
	if err != nil {
		return err
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("expected exactly one UNIT (like app/3), got %q", rest)
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		if _, err := c.RemoveUnit(ctx, &adminpb.RemoveUnitRequest{Unit: rest[0], Force: force}); err != nil {
			return err
		}
		return a.report(e.stdout, map[string]any{"unit": rest[0], "removed": true}, "unit %s removed\n", rest[0])
	})
}

func cmdUnitRetry(e *env, args []string) error {
	var a adminFlags
	fs := newFlagSet("unit retry", unitUsage)
	a.register(fs, writeFormats)
	rest, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("expected exactly one UNIT (like app/3), got %q", rest)
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		resp, err := c.RetryHook(ctx, &adminpb.RetryHookRequest{Unit: rest[0]})
		if err != nil {
			return err
		}
		if a.format == "json" {
			return writeJSON(e.stdout, map[string]any{"unit": rest[0], "hook": resp.GetHook(), "attempt": resp.GetAttempt(), "index": resp.GetIndex()})
		}
		hook := resp.GetHook()
		if hook == "" {
			hook = "its failed hook"
		}
		if n := resp.GetAttempt(); n > 0 {
			fmt.Fprintf(e.stdout, "unit %s: retry of %s requested (attempt %d failed last); see 'bagkeeper show-unit %s'\n", rest[0], hook, n, rest[0])
		} else {
			fmt.Fprintf(e.stdout, "unit %s: retry of %s requested; see 'bagkeeper show-unit %s'\n", rest[0], hook, rest[0])
		}
		return nil
	})
}

const memberUsage = `Usage: bagkeeper member remove MEMBER-ID

Removes a raft member (its id as 'bagkeeper status' shows it, pod/incarnation)
from the configuration: for a pod that is gone for good, such as after
scaling a StatefulSet down. If it is the leader, leadership is handed over
first. A voter is removed only while a quorum of healthy voters remains.
Members that stay unreachable are also removed on their own after
--dead-member-after (non-voters) or replaced after --dead-voter-after.`

func cmdMember(e *env, args []string) error {
	if len(args) == 0 || args[0] != "remove" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
			fmt.Fprintln(e.stdout, memberUsage)
			return nil
		}
		return usageErrorf("expected 'member remove MEMBER-ID'")
	}
	var a adminFlags
	fs := newFlagSet("member remove", memberUsage)
	a.register(fs, writeFormats)
	rest, err := parse(e, fs, args[1:])
	if err != nil {
		return err
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	if len(rest) != 1 || !strings.Contains(rest[0], "/") {
		return usageErrorf("expected exactly one MEMBER-ID (pod/incarnation, as in 'bagkeeper status'), got %q", rest)
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		if _, err := c.RemoveMember(ctx, &adminpb.RemoveMemberRequest{Id: rest[0]}); err != nil {
			return err
		}
		return a.report(e.stdout, map[string]any{"member": rest[0], "removed": true}, "member %s removed\n", rest[0])
	})
}

const leaderUsage = `Usage: bagkeeper leader transfer [flags] [MEMBER]

Moves raft leadership (the member that orders the group's writes) to
MEMBER, a voter as 'bagkeeper status' names it (pod/incarnation), or,
without MEMBER, to the most up-to-date other voter; for example before
draining the leader's node. It prints the previous and the new leader.
It does not move the application's leader unit (Juju's leader, which
'bagkeeper status' shows as App leader): that follows its unit.`

func cmdLeader(e *env, args []string) error {
	if len(args) == 0 || args[0] != "transfer" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
			fmt.Fprintln(e.stdout, leaderUsage)
			return nil
		}
		return usageErrorf("expected 'leader transfer [MEMBER]'")
	}
	var a adminFlags
	fs := newFlagSet("leader transfer", leaderUsage)
	a.register(fs, writeFormats)
	rest, err := parse(e, fs, args[1:])
	if err != nil {
		return err
	}
	if err := checkFormat(a.format, "text", "json"); err != nil {
		return err
	}
	if len(rest) > 1 {
		return usageErrorf("expected at most one MEMBER, got %q", rest)
	}
	member := ""
	if len(rest) == 1 {
		member = rest[0]
		if !strings.Contains(member, "/") {
			return usageErrorf("MEMBER %q: give a member id as bagkeeper status shows it (pod/incarnation)", member)
		}
	}
	return a.call(func(ctx context.Context, c adminpb.AdminClient) error {
		resp, err := c.TransferLeadership(ctx, &adminpb.TransferLeadershipRequest{Member: member})
		if err != nil {
			return err
		}
		if a.format == "json" {
			moved := resp.GetLeader() != "" && resp.GetLeader() != resp.GetPrevious()
			return writeJSON(e.stdout, map[string]any{"previous": resp.GetPrevious(), "leader": resp.GetLeader(), "moved": moved})
		}
		if resp.GetLeader() == "" || resp.GetLeader() == resp.GetPrevious() {
			fmt.Fprintf(e.stdout, "leadership handed over by %s; no new leader known yet\n", orDash(resp.GetPrevious()))
			return nil
		}
		fmt.Fprintf(e.stdout, "leader: %s (was %s)\n", resp.GetLeader(), orDash(resp.GetPrevious()))
		return nil
	})
}
