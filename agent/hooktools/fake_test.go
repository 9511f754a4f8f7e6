package hooktools

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeContext is a Context for tests. Its fields are the fixture; the
// methods record what the tools did.
type fakeContext struct {
	unit string // "u/0"

	hookRelation int // -1: not a relation hook
	remoteUnit   string
	remoteApp    string

	relations   map[int]*fakeRelation
	relationErr map[int]error // Relation(id) fails with this error

	leader         bool
	leaderErr      error
	leaderSettings map[string]string
	leaderGetErr   error
	leaderSetErr   error
	leaderWrites   []map[string]string

	config map[string]any

	state      map[string]string
	stateCalls []string // "set k=v", "delete k"
	stateErr   error    // returned by SetCharmState

	logs []string // "LEVEL message"

	unitStatus   Status
	appStatus    Status
	unitStatuses map[string]Status
	statusErr    error
	statusSets   []string // "unit maintenance/msg", "app active/"

	version    string
	versionErr error

	network      map[string]NetworkInfo
	privateAddr  string
	publicAddr   string
	ports        map[string][]PortRange
	goalState    GoalState
	goalStateErr error
}

// newFakeContext returns the shared fixture of Juju's jujuc tests: unit
// u/0 with relations peer0:0 and peer1:1 (each with this unit's bag
// {private-address: u-0.testing.invalid} and remote application
// "remoteApp"), running in relation relid (-1 for none) with the given
// remote unit and application (the application defaults to the unit's).
func newFakeContext(relid int, remoteUnit, remoteApp string) *fakeContext {
	if remoteApp == "" && remoteUnit != "" {
		remoteApp = unitApplication(remoteUnit)
	}
	f := &fakeContext{
		unit:         "u/0",
		hookRelation: relid,
		remoteUnit:   remoteUnit,
		remoteApp:    remoteApp,
		relations:    map[int]*fakeRelation{},
		relationErr:  map[int]error{},
		config: map[string]any{
			"empty":               nil,
			"monsters":            false,
			"spline-reticulation": 45.0,
			"title":               "My Title",
			"username":            "admin001",
		},
		state:        map[string]string{},
		unitStatuses: map[string]Status{},
		network:      map[string]NetworkInfo{},
		privateAddr:  "192.168.0.99",
		publicAddr:   "gimli.minecraft.testing.invalid",
		ports:        map[string][]PortRange{},
	}
	for id := 0; id < 2; id++ {
		f.addRelation(id, "peer"+strconv.Itoa(id)).local["private-address"] = "u-0.testing.invalid"
	}
	return f
}

// addRelation adds (or replaces) a relation with an empty local bag.
func (f *fakeContext) addRelation(id int, endpoint string) *fakeRelation {
	r := &fakeRelation{
		ctx:       f,
		id:        id,
		endpoint:  endpoint,
		remoteApp: "remoteApp",
		members:   map[string]map[string]string{},
		local:     map[string]string{},
		appBags:   map[string]map[string]string{},
		modelUUID: "deadbeef-0bad-400d-8000-4b1d0d06f00d",
	}
	f.relations[id] = r
	return r
}

func (f *fakeContext) UnitName() string { return f.unit }
func (f *fakeContext) AppName() string  { return unitApplication(f.unit) }

func (f *fakeContext) HookRelation() (int, bool) {
	return f.hookRelation, f.hookRelation >= 0
}

func (f *fakeContext) RemoteUnit() string { return f.remoteUnit }
func (f *fakeContext) RemoteApp() string  { return f.remoteApp }

func (f *fakeContext) Relation(id int) (Relation, error) {
	if err := f.relationErr[id]; err != nil {
		return nil, err
	}
	if r, ok := f.relations[id]; ok {
		return r, nil
	}
	return nil, ErrRelationNotFound
}

func (f *fakeContext) RelationIDs(endpoint string) []int {
	var ids []int
	for id, r := range f.relations {
		if r.endpoint == endpoint && !r.dead {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	return ids
}

func (f *fakeContext) IsLeader() (bool, error) { return f.leader, f.leaderErr }

func (f *fakeContext) LeaderSettings() (map[string]string, error) {
	return maps.Clone(f.leaderSettings), f.leaderGetErr
}

func (f *fakeContext) WriteLeaderSettings(settings map[string]string) error {
	f.leaderWrites = append(f.leaderWrites, maps.Clone(settings))
	return f.leaderSetErr
}

func (f *fakeContext) Config() map[string]any { return maps.Clone(f.config) }

func (f *fakeContext) CharmState() map[string]string { return maps.Clone(f.state) }

func (f *fakeContext) SetCharmState(key, value string) error {
	f.stateCalls = append(f.stateCalls, "set "+key+"="+value)
	if f.stateErr != nil {
		return f.stateErr
	}
	f.state[key] = value
	return nil
}

func (f *fakeContext) DeleteCharmState(key string) error {
	f.stateCalls = append(f.stateCalls, "delete "+key)
	delete(f.state, key)
	return nil
}

func (f *fakeContext) Log(level, message string) {
	f.logs = append(f.logs, level+" "+message)
}

func (f *fakeContext) UnitStatus() (Status, error) { return f.unitStatus, f.statusErr }

func (f *fakeContext) AppStatus() (Status, map[string]Status, error) {
	return f.appStatus, f.unitStatuses, f.statusErr
}

func (f *fakeContext) SetUnitStatus(s Status) error {
	f.statusSets = append(f.statusSets, "unit "+s.Status+"/"+s.Message)
	f.unitStatus = s
	return f.statusErr
}

func (f *fakeContext) SetAppStatus(s Status) error {
	f.statusSets = append(f.statusSets, "app "+s.Status+"/"+s.Message)
	f.appStatus = s
	return f.statusErr
}

func (f *fakeContext) SetApplicationVersion(version string) error {
	if f.versionErr != nil {
		return f.versionErr
	}
	f.version = version
	return nil
}

func (f *fakeContext) NetworkInfo(binding string, relationID int) (NetworkInfo, error) {
	ni, ok := f.network[binding]
	if !ok {
		return NetworkInfo{}, ErrNoNetworkConfig
	}
	return ni, nil
}

func (f *fakeContext) PrivateAddress() (string, error) { return f.privateAddr, nil }
func (f *fakeContext) PublicAddress() (string, error)  { return f.publicAddr, nil }

func (f *fakeContext) OpenPort(endpoint string, p PortRange) error {
	if !slices.Contains(f.ports[endpoint], p) {
		f.ports[endpoint] = append(f.ports[endpoint], p)
	}
	return nil
}

func (f *fakeContext) ClosePort(endpoint string, p PortRange) error {
	if i := slices.Index(f.ports[endpoint], p); i >= 0 {
		f.ports[endpoint] = slices.Delete(f.ports[endpoint], i, i+1)
	}
	return nil
}

func (f *fakeContext) OpenedPorts() map[string][]PortRange {
	out := make(map[string][]PortRange)
	for k, v := range f.ports {
		out[k] = slices.Clone(v)
	}
	return out
}

// portsString renders the open ports per endpoint, sorted, for assertions:
// `"": [80/tcp 99/tcp], foo: [1337/tcp]`.
func (f *fakeContext) portsString() string {
	var parts []string
	for _, ep := range slices.Sorted(maps.Keys(f.ports)) {
		ranges := slices.Clone(f.ports[ep])
		sortPortRanges(ranges)
		var rs []string
		for _, p := range ranges {
			rs = append(rs, p.String())
		}
		parts = append(parts, fmt.Sprintf("%q: [%s]", ep, strings.Join(rs, " ")))
	}
	return strings.Join(parts, ", ")
}

func (f *fakeContext) GoalState() (GoalState, error) { return f.goalState, f.goalStateErr }

// fakeRelation is one relation of a fakeContext.
type fakeRelation struct {
	ctx       *fakeContext
	id        int
	endpoint  string
	key       *string // overrides "endpoint:id" when set
	remoteApp string
	peer      bool
	dead      bool
	members   map[string]map[string]string // remote unit -> bag
	local     map[string]string            // this unit's bag
	appBags   map[string]map[string]string // application -> bag
	modelUUID string

	unitWrites []map[string]string // WriteUnit calls
	appWrites  []map[string]string // WriteApp calls
	writeErr   error               // returned by WriteUnit and WriteApp
}

func (r *fakeRelation) ID() int           { return r.id }
func (r *fakeRelation) Endpoint() string  { return r.endpoint }
func (r *fakeRelation) RemoteApp() string { return r.remoteApp }
func (r *fakeRelation) Peer() bool        { return r.peer }
func (r *fakeRelation) ModelUUID() string { return r.modelUUID }

func (r *fakeRelation) Key() string {
	if r.key != nil {
		return *r.key
	}
	return r.endpoint + ":" + strconv.Itoa(r.id)
}

func (r *fakeRelation) Members() []string {
	return slices.Collect(maps.Keys(r.members))
}

// ReadUnit mimics Juju's test double: an unknown unit is an error.
func (r *fakeRelation) ReadUnit(unit string) (map[string]string, error) {
	if unit == r.ctx.unit {
		return maps.Clone(r.local), nil
	}
	if bag, ok := r.members[unit]; ok {
		return maps.Clone(bag), nil
	}
	return nil, fmt.Errorf("unknown unit %s", unit)
}

func (r *fakeRelation) ReadApp(app string) (map[string]string, error) {
	if app == r.ctx.AppName() && !r.peer && !r.ctx.leader {
		return nil, ErrPermissionDenied
	}
	if bag, ok := r.appBags[app]; ok {
		return maps.Clone(bag), nil
	}
	if app == r.remoteApp || app == r.ctx.AppName() {
		return map[string]string{}, nil
	}
	return nil, fmt.Errorf("unknown application %s", app)
}

func (r *fakeRelation) WriteUnit(settings map[string]string) error {
	r.unitWrites = append(r.unitWrites, maps.Clone(settings))
	if r.writeErr != nil {
		return r.writeErr
	}
	merge(r.local, settings)
	return nil
}

func (r *fakeRelation) WriteApp(settings map[string]string) error {
	r.appWrites = append(r.appWrites, maps.Clone(settings))
	if !r.ctx.leader {
		return ErrCannotWriteSettings
	}
	if r.writeErr != nil {
		return r.writeErr
	}
	app := r.ctx.AppName()
	if r.appBags[app] == nil {
		r.appBags[app] = map[string]string{}
	}
	merge(r.appBags[app], settings)
	return nil
}

// merge applies relation-set semantics: an empty value deletes.
func merge(bag, changes map[string]string) {
	for k, v := range changes {
		if v == "" {
			delete(bag, k)
		} else {
			bag[k] = v
		}
	}
}

// memFiles is an in-memory file system of the hook's: paths are keys.
type memFiles struct {
	mu    sync.Mutex
	files map[string][]byte
}

func newMemFiles() *memFiles { return &memFiles{files: map[string][]byte{}} }

func (m *memFiles) ReadFile(p string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.files[path.Clean(p)]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	return slices.Clone(data), nil
}

func (m *memFiles) WriteFile(p string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p == "" || strings.HasSuffix(p, "/") {
		return &fs.PathError{Op: "open", Path: p, Err: errors.New("is a directory")}
	}
	m.files[path.Clean(p)] = slices.Clone(data)
	return nil
}

// hookFiles is the file access of the hook's side, which the client
// performs for the tools.
type hookFiles interface {
	ReadFile(path string) ([]byte, error)
	WriteFile(path string, data []byte) error
}

// clientRun runs a tool as jujuc does: it sends the request with
// ClientFiles, answers NeedStdin with stdin (failing the test if there is
// none) and NeedFile with the file read from files (or the error reading
// it), and writes an output file into files, a failure to write it
// failing the tool.
func clientRun(t testing.TB, ctx Context, req Request, stdin *string, files hookFiles) Response {
	t.Helper()
	req.ClientFiles = true
	for round := 0; ; round++ {
		if round == 3 {
			t.Fatalf("%s %q: still asking after %d calls", req.Command, req.Args, round)
		}
		resp, err := Run(ctx, req)
		if err != nil {
			t.Fatalf("Run %s %q: %v", req.Command, req.Args, err)
		}
		switch {
		case resp.NeedStdin:
			if req.StdinSet {
				t.Fatalf("%s %q asked for stdin again", req.Command, req.Args)
			}
			req.StdinSet = true
			if stdin != nil {
				req.Stdin = []byte(*stdin)
			} else {
				t.Errorf("%s %q asked for stdin, the case has none", req.Command, req.Args)
			}
		case resp.NeedFile != "":
			if req.FilePath == resp.NeedFile {
				t.Fatalf("%s %q asked twice for %s", req.Command, req.Args, resp.NeedFile)
			}
			req.FilePath, req.File, req.FileErr = resp.NeedFile, nil, ""
			if req.File, err = files.ReadFile(resp.NeedFile); err != nil {
				req.FileErr = err.Error()
			}
		default:
			if resp.OutputPath != "" {
				if err := files.WriteFile(resp.OutputPath, resp.Output); err != nil {
					resp.Stderr = append(resp.Stderr, "ERROR "+err.Error()+"\n"...)
					resp.Code = 1
				}
			}
			return resp
		}
	}
}
