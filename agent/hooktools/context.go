package hooktools

import (
	"errors"
	"time"
)

// Context is what a hook tool sees of the running hook. The agent's hook
// context implements it; tests use fakes. Methods return the errors listed
// in their comments with exactly the texts charms depend on; the tools add
// any prefix the Juju tool adds ("cannot read leadership settings: ...").
//
// Reads see one snapshot of the store taken when the hook started, plus
// this hook's own buffered writes. Writes to relation bags, charm state and
// ports are buffered and committed when the hook exits 0; status,
// application version, leader settings and logs take effect at once.
type Context interface {
	// UnitName is this unit ("app/3"); AppName its application.
	UnitName() string
	AppName() string

	// HookRelation returns the relation of the running relation hook, or
	// ok=false outside relation hooks.
	HookRelation() (id int, ok bool)
	// RemoteUnit and RemoteApp are JUJU_REMOTE_UNIT and JUJU_REMOTE_APP of
	// the running hook ("" when absent).
	RemoteUnit() string
	RemoteApp() string

	// Relation returns a relation by id, or ErrRelationNotFound.
	Relation(id int) (Relation, error)
	// RelationIDs returns the ids of the live relations on endpoint.
	RelationIDs(endpoint string) []int

	// IsLeader reports whether this unit holds the leadership lease with
	// at least 30 seconds left.
	IsLeader() (bool, error)
	// LeaderSettings returns the leader settings.
	LeaderSettings() (map[string]string, error)
	// WriteLeaderSettings merges settings into the leader settings at once
	// (an empty value deletes). A non-leader gets ErrNotLeader.
	WriteLeaderSettings(settings map[string]string) error

	// Config returns the charm config: values are nil, bool, int64, float64
	// or string; keys with no value and no default map to nil.
	Config() map[string]any

	// CharmState returns this unit's charm state.
	CharmState() map[string]string
	// SetCharmState buffers state-set: an empty value is stored as empty.
	SetCharmState(key, value string) error
	// DeleteCharmState buffers state-delete.
	DeleteCharmState(key string) error

	// Log records a juju-log line at level (TRACE, DEBUG, INFO, WARNING,
	// ERROR, CRITICAL).
	Log(level, message string)

	// UnitStatus and AppStatus return the current workload statuses.
	// AppStatus also returns the status of every unit; a non-leader gets
	// ErrIsNotLeader.
	UnitStatus() (Status, error)
	AppStatus() (app Status, units map[string]Status, err error)
	// SetUnitStatus and SetAppStatus take effect at once. SetAppStatus by a
	// non-leader returns ErrIsNotLeader.
	SetUnitStatus(s Status) error
	SetAppStatus(s Status) error

	// SetApplicationVersion takes effect at once.
	SetApplicationVersion(version string) error

	// NetworkInfo returns the network info of a binding (an endpoint name)
	// as seen from relation relationID (-1 for none), or ErrNoNetworkConfig.
	// The binding "" is the application's default binding; only unit-get
	// asks for it (network-get rejects an empty binding name).
	NetworkInfo(binding string, relationID int) (NetworkInfo, error)

	// OpenPort and ClosePort buffer port changes for the endpoints given
	// ("" = all endpoints). OpenedPorts returns this unit's open ports with
	// the buffered changes applied.
	OpenPort(endpoint string, p PortRange) error
	ClosePort(endpoint string, p PortRange) error
	OpenedPorts() map[string][]PortRange

	// GoalState returns the goal state of this unit and its relations.
	GoalState() (GoalState, error)
}

// UnitAddresser is implemented by a Context that knows this unit's
// addresses the way Juju's unit-get reports them. It is optional: without
// it, unit-get prints the first address of the default binding
// (NetworkInfo("", -1)) for both settings.
type UnitAddresser interface {
	// PrivateAddress is printed by unit-get private-address when the
	// default binding has no address.
	PrivateAddress() (string, error)
	// PublicAddress is printed by unit-get public-address.
	PublicAddress() (string, error)
}

// Relation is one relation as a hook sees it.
type Relation interface {
	// ID is the relation id; Endpoint this application's endpoint name.
	ID() int
	Endpoint() string
	// Key is "endpoint:id".
	Key() string
	// RemoteApp is the other application ("" for peer relations, whose
	// units are this application's).
	RemoteApp() string
	// Peer reports whether this is a peer relation.
	Peer() bool
	// Members returns the remote units in the relation ("app/N"), in any
	// order. For a peer relation, the other units of this application.
	Members() []string
	// ReadUnit returns a unit's bag: this unit's own includes this hook's
	// buffered writes. A unit that is not in the relation gives
	// ErrPermissionDenied.
	ReadUnit(unit string) (map[string]string, error)
	// ReadApp returns an application's bag. This application's own bag of
	// a non-peer relation is readable by the leader only (others get
	// ErrPermissionDenied); the leader sees its buffered writes.
	ReadApp(app string) (map[string]string, error)
	// WriteUnit buffers a change of this unit's bag: an empty value
	// deletes the key.
	WriteUnit(settings map[string]string) error
	// WriteApp buffers a change of this application's bag. A non-leader
	// gets ErrCannotWriteSettings.
	WriteApp(settings map[string]string) error
	// ModelUUID is the model uuid of the remote side.
	ModelUUID() string
}

// Status is a workload status.
type Status struct {
	Status  string
	Message string
	Data    map[string]any
	Since   time.Time
}

// NetworkInfo is what network-get reports for a binding.
type NetworkInfo struct {
	Interfaces       []NetworkInterface
	IngressAddresses []string
	EgressSubnets    []string
}

// NetworkInterface is one bind address entry.
type NetworkInterface struct {
	MACAddress    string
	InterfaceName string
	Addresses     []InterfaceAddress
}

// InterfaceAddress is one address of an interface.
type InterfaceAddress struct {
	Hostname string
	Address  string
	CIDR     string
}

// PortRange is a range of ports of one protocol ("tcp", "udp" or "icmp").
// ICMP has no ports: its From and To are -1, as in Juju. The tools pass
// valid ranges only, with the protocol in lower case.
type PortRange struct {
	From, To int
	Protocol string
}

// GoalState is what goal-state reports.
type GoalState struct {
	Units     map[string]GoalStatus
	Relations map[string]map[string]GoalStatus
}

// GoalStatus is the status and since-time of a goal-state entry.
type GoalStatus struct {
	Status string
	Since  *time.Time
}

// Errors a Context returns; the tools print their text as Juju does.
var (
	ErrRelationNotFound    = errors.New("relation not found")
	ErrPermissionDenied    = errors.New("permission denied")
	ErrCannotWriteSettings = errors.New("cannot write relation settings")
	ErrNotLeader           = errors.New("cannot write settings: not the leader")
	// ErrIsNotLeader is what Juju's hook context answers a non-leader
	// asking for the application's status or setting it.
	ErrIsNotLeader     = errors.New("this unit is not the leader")
	ErrNoNetworkConfig = errors.New("no network config found")
)
