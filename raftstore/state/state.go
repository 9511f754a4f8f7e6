package state

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
)

// State is one immutable version of the replicated state: what the state
// machine held after applying the entry at Index. A *State never changes
// once published, so a reader may keep one for as long as it likes and see
// a consistent view (a hook context does exactly that). Maps and slices
// reachable from a State are shared with later versions and must be treated
// as read-only.
type State struct {
	index     uint64
	meta      *meta
	relations *iradix.Tree[*Relation]   // key: relKey(id)
	bags      *iradix.Tree[*Bag]        // key: relKey(id) + owner
	units     *iradix.Tree[*Unit]       // key: numKey(number)
	charm     *iradix.Tree[Settings]    // key: unit name
	cursors   *iradix.Tree[[]byte]      // key: unit name
	sessions  *iradix.Tree[*session]    // key: client id
	claimants *iradix.Tree[*Claimant]   // key: member id
	divergent *iradix.Tree[*Divergence] // key: member id
	statuses  *iradix.Tree[*Status]     // key: owner (unit or application name)
	extras    *iradix.Tree[*UnitExtra]  // key: unit name
	secrets   *iradix.Tree[*Secret]     // key: secret id (secrets.go)
	// actions (actions.go)
	actions *iradix.Tree[*Action] // key: numKey(id)
	// bagsOf is derived, not in snapshots: for each owner, the raft index
	// of the latest change to one of its bags (BagsChangedAt).
	bagsOf *iradix.Tree[uint64] // key: owner
}

// meta holds the scalar parts of the state. Replaced, never mutated.
type meta struct {
	app          string
	clusterID    string
	nextUnit     int64
	nextRelation int64
	leader       Settings
	leaderRev    uint64
	lease        Lease
	// sessionsSwept is when expired client sessions were last dropped.
	sessionsSwept time.Time
	// generation counts the recoveries of the group (see StartGeneration).
	generation        uint64
	generationPlan    string
	generationStarted time.Time
}

// Relation is one relation the application takes part in.
type Relation struct {
	ID        int64
	Endpoint  string
	Interface string
	// Peer is true for the application's peer relations; such relations have
	// no remote application.
	Peer           bool
	RemoteApp      string
	RemoteEndpoint string
	Created        time.Time
	// Offered is true when this application is the side offering the
	// endpoint and the remote application consumes the offer.
	Offered bool
	// RemoteSource identifies the remote group the last remote view came
	// from (opaque; its cluster id, say), and RemoteRevision is that view's
	// revision (see SetRemoteViewOp). Both are empty until a view is applied.
	RemoteSource   string
	RemoteRevision uint64
	// RemoteModel is the uuid of the remote application's model, as its
	// last view said ("" until one said).
	RemoteModel string
}

// Key returns the "endpoint:id" form Juju shows.
func (r *Relation) Key() string {
	return r.Endpoint + ":" + strconv.FormatInt(r.ID, 10)
}

// Bag is one relation data bag: a unit's or an application's settings in
// one relation.
type Bag struct {
	RelationID int64
	// Owner is a unit name ("app/3") or an application name ("app").
	Owner string
	Data  Settings
	// Revision counts the changes of this bag; it grows by one for each
	// command that really changed the data.
	Revision uint64
	// ModifiedIndex is the raft index of the last change.
	ModifiedIndex uint64
}

// UnitState is where a unit is in its life.
type UnitState int

// Unit states. A unit is created active, may be released and claimed again
// any number of times, and is removed once, for good.
const (
	UnitActive   UnitState = 1
	UnitReleased UnitState = 2
	UnitRemoved  UnitState = 3
)

func (s UnitState) String() string {
	switch s {
	case UnitActive:
		return "active"
	case UnitReleased:
		return "released"
	case UnitRemoved:
		return "removed"
	}
	return "unknown"
}

// Unit is one unit of the application.
type Unit struct {
	Name   string
	Number int64
	State  UnitState
	// Member is the raft server id of the member holding the unit, or for a
	// released or removed unit the last one that held it.
	Member string
	// Pod is the pod name of that member.
	Pod      string
	Created  time.Time
	Claimed  time.Time
	Released time.Time
	Removed  time.Time
	// Reason says why the unit was last released or removed.
	Reason string
	// ByOrdinal: the unit was last claimed by its pod's ordinal, so only
	// that pod can hold it.
	ByOrdinal bool
	// Epoch grows by one each time a member claims the unit. A command
	// fenced with an older epoch is refused: its holder was taken over.
	Epoch uint64
}

// Claimant is a member waiting for a unit: every unit is active and the
// application's declared scale is reached.
type Claimant struct {
	Member string
	Pod    string
	Since  time.Time
}

// Lease is the application leadership lease.
type Lease struct {
	Unit     string
	Member   string
	Acquired time.Time
	Expires  time.Time
	// Epoch grows by one each time the lease changes holder.
	Epoch uint64
}

// HeldBy reports whether unit holds the lease at time now.
func (l Lease) HeldBy(unit string, now time.Time) bool {
	return l.Unit != "" && l.Unit == unit && now.Before(l.Expires)
}

// Status is a workload status set by a charm (status-set) for a unit or
// the application.
type Status struct {
	Owner   string
	Status  string
	Message string
	// DataJSON is a JSON object, or empty.
	DataJSON []byte
	Since    time.Time
}

// Port is a range of ports of one protocol opened for an endpoint ("" =
// all endpoints); icmp has no ports.
type Port struct {
	Endpoint string
	From, To int
	Protocol string
}

func (p Port) String() string {
	if p.Protocol == "icmp" {
		return "icmp"
	}
	if p.From == p.To {
		return strconv.Itoa(p.From) + "/" + p.Protocol
	}
	return strconv.Itoa(p.From) + "-" + strconv.Itoa(p.To) + "/" + p.Protocol
}

// UnitExtra is what a unit has besides its identity: its workload
// version, its open ports and the hook error it is in, if any.
type UnitExtra struct {
	WorkloadVersion  string
	Ports            []Port
	HookError        string
	HookErrorMessage string
	HookErrorSince   time.Time

	// ---- failed hooks (hookhistory.go) ----
	// Of the hook failing: the last of what it wrote (at most
	// MaxHookOutputTail bytes), its exit status, which attempt of its
	// consecutive failures failed last (0 in records of older versions),
	// and when the agent tries it again by its own clock.
	HookErrorOutputTail  string
	HookErrorExitCode    int
	HookErrorAttempt     int
	HookErrorNextAttempt time.Time
	// RetryRequests counts the retries operators asked for (a hook
	// failing is run again when it moves).
	RetryRequests uint64
	// History holds the unit's last MaxHookHistory hooks, oldest first.
	History []HookRecord
	// ---- end of failed hooks ----
}

func newState() *State {
	return &State{
		meta:      &meta{},
		relations: iradix.New[*Relation](),
		bags:      iradix.New[*Bag](),
		units:     iradix.New[*Unit](),
		charm:     iradix.New[Settings](),
		cursors:   iradix.New[[]byte](),
		sessions:  iradix.New[*session](),
		claimants: iradix.New[*Claimant](),
		divergent: iradix.New[*Divergence](),
		statuses:  iradix.New[*Status](),
		extras:    iradix.New[*UnitExtra](),
		secrets:   iradix.New[*Secret](),
		actions:   iradix.New[*Action](), // actions.go
		bagsOf:    iradix.New[uint64](),
	}
}

// Index is the raft index of the last command applied to this state.
func (s *State) Index() uint64 { return s.index }

// App is the application the group serves; empty before the cluster's
// first command.
func (s *State) App() string { return s.meta.app }

// ClusterID is the random id chosen when the cluster was bootstrapped.
func (s *State) ClusterID() string { return s.meta.clusterID }

// Generation is how many times the group was recovered after losing its
// majority, the recovery plan that started the current generation, and
// when (zero values for a group never recovered).
func (s *State) Generation() (generation uint64, plan string, started time.Time) {
	return s.meta.generation, s.meta.generationPlan, s.meta.generationStarted
}

// Relations returns every relation, ordered by id.
func (s *State) Relations() []*Relation {
	var out []*Relation
	it := s.relations.Root().Iterator()
	for _, r, ok := it.Next(); ok; _, r, ok = it.Next() {
		out = append(out, r)
	}
	return out
}

// Relation returns the relation with the given id.
func (s *State) Relation(id int64) (*Relation, bool) {
	return s.relations.Get(relKey(id))
}

// FindRelation returns the relation with the given key.
func (s *State) FindRelation(endpoint, remoteApp, remoteEndpoint string) (*Relation, bool) {
	it := s.relations.Root().Iterator()
	for _, r, ok := it.Next(); ok; _, r, ok = it.Next() {
		if r.Endpoint == endpoint && r.RemoteApp == remoteApp && r.RemoteEndpoint == remoteEndpoint {
			return r, true
		}
	}
	return nil, false
}

// Bag returns one bag. A bag that was never written is reported as absent.
func (s *State) Bag(relationID int64, owner string) (*Bag, bool) {
	// The key is built on the stack: the agent looks bags up after every
	// entry applied, on every relation.
	var buf [64]byte
	k := binary.BigEndian.AppendUint64(buf[:0], uint64(relationID))
	return s.bags.Get(append(k, owner...))
}

// BagsChangedAt returns the raft index of the latest command that
// changed, created or deleted one of owner's bags (in a state restored
// from a snapshot: the latest change to one it still has), or 0. A unit
// agent checks its own bags only when this or RelationsVersion moved.
// Bags removed with their relation are not counted: that changes the
// relations.
func (s *State) BagsChangedAt(owner string) uint64 {
	i, _ := s.bagsOf.Get([]byte(owner))
	return i
}

// RelationsVersion is equal (==) for two states only if they have the
// same relations: the relations' tree is not copied unless it changes.
func (s *State) RelationsVersion() any {
	return s.relations.Root()
}

// RelationBagsVersion is equal (==) for two states only if they hold the
// same bags of relation id (it may differ when they do too). It is the
// identity of the part of the bags' tree that holds the relation's bags,
// which is copied whenever one of them is created, changed or deleted (or,
// where the relation has none, of the part a new one would go in). A unit
// agent skips a relation it found quiet while this, the relation and its
// cursor stay as they were.
func (s *State) RelationBagsVersion(id int64) any {
	var buf [8]byte
	ch, _, _ := s.bags.Root().GetWatch(binary.BigEndian.AppendUint64(buf[:0], uint64(id)))
	return ch
}

// UnitsVersion is equal (==) for two states only if they have the same
// units: the units' tree is not copied unless it changes.
func (s *State) UnitsVersion() any {
	return s.units.Root()
}

// Bags returns every bag of a relation, ordered by owner.
func (s *State) Bags(relationID int64) []*Bag {
	var out []*Bag
	s.EachBag(relationID, func(b *Bag) bool {
		out = append(out, b)
		return true
	})
	return out
}

// EachBag calls fn with every bag of a relation, ordered by owner, until
// fn returns false: Bags without the slice.
func (s *State) EachBag(relationID int64, fn func(*Bag) bool) {
	s.bags.Root().WalkPrefix(relKey(relationID), func(_ []byte, b *Bag) bool { return !fn(b) })
}

// EachUnitBag calls fn with every bag of a relation owned by a unit of
// app ("app/N"), ordered by owner, until fn returns false. It visits only
// those bags, not the relation's others (the other application's units',
// the application bags).
func (s *State) EachUnitBag(relationID int64, app string, fn func(*Bag) bool) {
	// The prefix is built on the stack when it fits: the agent walks the
	// remote units' bags of every relation after every entry applied.
	var buf [64]byte
	k := binary.BigEndian.AppendUint64(buf[:0], uint64(relationID))
	k = append(append(k, app...), '/')
	s.bags.Root().WalkPrefix(k, func(_ []byte, b *Bag) bool { return !fn(b) })
}

// Units returns every unit, removed ones included, ordered by number.
func (s *State) Units() []*Unit {
	var out []*Unit
	s.EachUnit(func(u *Unit) bool {
		out = append(out, u)
		return true
	})
	return out
}

// EachUnit calls fn with every unit, removed ones included, ordered by
// number, until fn returns false.
func (s *State) EachUnit(fn func(*Unit) bool) {
	it := s.units.Root().Iterator()
	for _, u, ok := it.Next(); ok && fn(u); _, u, ok = it.Next() {
	}
}

// Unit returns the unit with the given name ("app/3").
func (s *State) Unit(name string) (*Unit, bool) {
	app, n, ok := ParseUnitName(name)
	if !ok || app != s.meta.app {
		return nil, false
	}
	return s.units.Get(numKey(n))
}

// UnitHeldBy returns the active unit held by the given member.
func (s *State) UnitHeldBy(member string) (*Unit, bool) {
	it := s.units.Root().Iterator()
	for _, u, ok := it.Next(); ok; _, u, ok = it.Next() {
		if u.State == UnitActive && u.Member == member {
			return u, true
		}
	}
	return nil, false
}

// CharmState returns a unit's charm state (empty if it has none).
func (s *State) CharmState(unit string) Settings {
	v, _ := s.charm.Get([]byte(unit))
	return v
}

// Cursor returns a unit's event-delivery cursor (nil if none was set).
func (s *State) Cursor(unit string) []byte {
	v, _ := s.cursors.Get([]byte(unit))
	return v
}

// LeaderSettings returns the application's leader settings and their
// revision.
func (s *State) LeaderSettings() (Settings, uint64) {
	return s.meta.leader, s.meta.leaderRev
}

// Status returns the workload status of a unit or the application.
func (s *State) Status(owner string) (*Status, bool) {
	return s.statuses.Get([]byte(owner))
}

// UnitExtra returns a unit's version, ports and hook error (zero if none).
func (s *State) UnitExtra(unit string) UnitExtra {
	if e, ok := s.extras.Get([]byte(unit)); ok {
		return *e
	}
	return UnitExtra{}
}

// Divergence is a member whose state was found unlike most members' at
// the same index: its state machine diverged, and it serves nothing.
type Divergence struct {
	Member   string
	Index    uint64
	Hash     []byte
	Expected []byte
	Since    time.Time
}

// Divergences returns the members found diverged, ordered by member id.
func (s *State) Divergences() []*Divergence {
	var out []*Divergence
	walk(s.divergent, func(_ []byte, d *Divergence) bool {
		out = append(out, d)
		return true
	})
	return out
}

// Diverged returns the record of member's divergence, if it was found.
func (s *State) Diverged(member string) (*Divergence, bool) {
	return s.divergent.Get([]byte(member))
}

// Claimants returns the members waiting for a unit, ordered by member id.
func (s *State) Claimants() []*Claimant {
	var out []*Claimant
	walk(s.claimants, func(_ []byte, c *Claimant) bool {
		out = append(out, c)
		return true
	})
	return out
}

// Lease returns the application leadership lease (zero if none).
func (s *State) Lease() Lease { return s.meta.lease }

// UnitName forms the name of unit number n of app.
func UnitName(app string, n int64) string {
	return app + "/" + strconv.FormatInt(n, 10)
}

// ParseUnitName splits "app/3" into its application and number.
func ParseUnitName(name string) (app string, n int64, ok bool) {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 || i == len(name)-1 {
		return "", 0, false
	}
	digits := name[i+1:]
	if len(digits) > 1 && digits[0] == '0' {
		return "", 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 {
		return "", 0, false
	}
	app = name[:i]
	if !ValidAppName(app) {
		return "", 0, false
	}
	return app, n, true
}

// ValidAppName reports whether name is a valid Juju application name:
// lower-case letters, digits and single hyphens, starting with a letter,
// and no hyphen-separated part made only of digits.
func ValidAppName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for _, part := range strings.Split(name, "-") {
		if part == "" {
			return false
		}
		letter := false
		for _, c := range part {
			switch {
			case c >= 'a' && c <= 'z':
				letter = true
			case c >= '0' && c <= '9':
			default:
				return false
			}
		}
		if !letter {
			return false
		}
	}
	return name[0] >= 'a' && name[0] <= 'z'
}

// ValidEndpointName reports whether name is a valid relation endpoint name.
func ValidEndpointName(name string) bool {
	if name == "" || len(name) > 253 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	prevSep := false
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			prevSep = false
		case c == '-' || c == '_':
			if prevSep {
				return false
			}
			prevSep = true
		default:
			return false
		}
	}
	return !prevSep
}

func numKey(n int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	return b[:]
}

func relKey(id int64) []byte { return numKey(id) }

func bagKey(relationID int64, owner string) []byte {
	return append(relKey(relationID), owner...)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
