package state

import (
	"crypto/rand"
	"encoding/hex"
	"sort"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// NewCommand wraps ops into a command. The member that proposes it gives
// it its request id, and the leader stamps the time.
func NewCommand(ops ...*storepb.Op) *storepb.Command {
	return &storepb.Command{Version: CommandVersion, Ops: ops}
}

// NewID returns a random 128-bit id, in hex (client and cluster ids).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// The functions below build one Op each.

// InitClusterOp names the application of a new cluster.
func InitClusterOp(app, clusterID string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_InitCluster{InitCluster: &storepb.InitCluster{App: app, ClusterId: clusterID}}}
}

// EnsureRelationOp creates a relation unless it exists.
func EnsureRelationOp(endpoint, iface string, peer bool, remoteApp, remoteEndpoint string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_EnsureRelation{EnsureRelation: &storepb.EnsureRelation{Endpoint: endpoint, Interface: iface, Peer: peer, RemoteApp: remoteApp, RemoteEndpoint: remoteEndpoint}}}
}

// OfferedRelationOp creates, unless it exists, a relation in which this
// application offers endpoint and remoteApp consumes the offer.
func OfferedRelationOp(endpoint, iface, remoteApp, remoteEndpoint string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_EnsureRelation{EnsureRelation: &storepb.EnsureRelation{Endpoint: endpoint, Interface: iface, RemoteApp: remoteApp, RemoteEndpoint: remoteEndpoint, Offered: true}}}
}

// SetRemoteViewOp replaces what the relation holds of remoteApp's side
// with the view of revision revision from source: remoteApp's application
// bag app and the bags of its units, keyed by unit name (a unit with nil
// or empty data is in the relation all the same). The units are put in the
// op ordered by name, so the same view always encodes the same way.
func SetRemoteViewOp(relationID int64, remoteApp, source string, revision uint64, app map[string]string, units map[string]map[string]string) *storepb.Op {
	names := make([]string, 0, len(units))
	for u := range units {
		names = append(names, u)
	}
	sort.Strings(names)
	views := make([]*storepb.RemoteUnitView, 0, len(names))
	for _, u := range names {
		views = append(views, &storepb.RemoteUnitView{Unit: u, Data: units[u]})
	}
	return &storepb.Op{Op: &storepb.Op_SetRemoteView{SetRemoteView: &storepb.SetRemoteView{
		RelationId: relationID, RemoteApp: remoteApp, Source: source, Revision: revision, App: app, Units: views}}}
}

// RemoveRelationOp deletes a relation and its bags.
func RemoveRelationOp(id int64) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_RemoveRelation{RemoveRelation: &storepb.RemoveRelation{RelationId: id}}}
}

// UpdateBagOp sets and deletes keys of one bag.
func UpdateBagOp(relationID int64, owner string, set map[string]string, del ...string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_UpdateBag{UpdateBag: &storepb.UpdateBag{RelationId: relationID, Owner: owner, Set: set, Delete: del}}}
}

// CheckBagOp requires a bag to be at a revision.
func CheckBagOp(relationID int64, owner string, revision uint64) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_CheckBag{CheckBag: &storepb.CheckBag{RelationId: relationID, Owner: owner, Revision: revision}}}
}

// ClaimUnitOp claims a unit for a member; ordinal < 0 means "any", and
// then a new unit is created only while there are fewer than scale (0: no
// limit).
func ClaimUnitOp(member, pod string, ordinal int64, scale uint32) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_ClaimUnit{ClaimUnit: &storepb.ClaimUnit{MemberId: member, Pod: pod, Ordinal: ordinal, Scale: scale}}}
}

// ForgetClaimantOp drops a member waiting for a unit.
func ForgetClaimantOp(member string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_ForgetClaimant{ForgetClaimant: &storepb.ForgetClaimant{MemberId: member}}}
}

// ReleaseUnitOp releases a unit; expectMember, if set, must hold it.
func ReleaseUnitOp(unit, expectMember, reason string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_ReleaseUnit{ReleaseUnit: &storepb.ReleaseUnit{Unit: unit, ExpectMember: expectMember, Reason: reason}}}
}

// RemoveUnitOp removes a unit; releasedBefore, if non-zero (unix
// nanoseconds), requires it to have been released since then.
func RemoveUnitOp(unit string, releasedBefore int64, reason string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_RemoveUnit{RemoveUnit: &storepb.RemoveUnit{Unit: unit, OnlyReleasedBeforeUnixNano: releasedBefore, Reason: reason}}}
}

// UpdateCharmStateOp sets and deletes keys of a unit's charm state.
func UpdateCharmStateOp(unit string, set map[string]string, del ...string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_UpdateCharmState{UpdateCharmState: &storepb.UpdateCharmState{Unit: unit, Set: set, Delete: del}}}
}

// UpdateLeaderSettingsOp sets and deletes leader settings.
func UpdateLeaderSettingsOp(set map[string]string, del ...string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_UpdateLeaderSettings{UpdateLeaderSettings: &storepb.UpdateLeaderSettings{Set: set, Delete: del}}}
}

// ClaimLeaseOp takes or renews the leadership lease.
func ClaimLeaseOp(unit, member string, durationNanos int64) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_ClaimLease{ClaimLease: &storepb.ClaimLease{Unit: unit, MemberId: member, DurationNanos: durationNanos}}}
}

// CheckLeaseOp requires unit to hold the leadership lease.
func CheckLeaseOp(unit string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_CheckLease{CheckLease: &storepb.CheckLease{Unit: unit}}}
}

// SetCursorOp stores a unit's event-delivery cursor.
func SetCursorOp(unit string, cursor []byte) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_SetCursor{SetCursor: &storepb.SetCursor{Unit: unit, Cursor: cursor}}}
}

// AdvanceCursorOp: see cursorpatch.go.

// SetStatusOp sets the workload status of a unit or (owner = application
// name) of the application.
func SetStatusOp(owner, status, message string, dataJSON []byte) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_SetStatus{SetStatus: &storepb.SetStatus{Owner: owner, Status: status, Message: message, DataJson: dataJSON}}}
}

// SetHookErrorOp records (hook != "") or clears a unit's hook error.
func SetHookErrorOp(unit, hook, message string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_SetHookError{SetHookError: &storepb.SetHookError{Unit: unit, Hook: hook, Message: message}}}
}

// SetWorkloadVersionOp sets a unit's workload version.
func SetWorkloadVersionOp(unit, version string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_SetWorkloadVersion{SetWorkloadVersion: &storepb.SetWorkloadVersion{Unit: unit, Version: version}}}
}

// UpdatePortsOp opens and closes ports of a unit.
func UpdatePortsOp(unit string, open, close []Port) *storepb.Op {
	conv := func(ps []Port) []*storepb.Port {
		out := make([]*storepb.Port, 0, len(ps))
		for _, p := range ps {
			out = append(out, &storepb.Port{Endpoint: p.Endpoint, From: int32(p.From), To: int32(p.To), Protocol: p.Protocol})
		}
		return out
	}
	return &storepb.Op{Op: &storepb.Op_UpdatePorts{UpdatePorts: &storepb.UpdatePorts{Unit: unit, Open: conv(open), Close: conv(close)}}}
}

// ReleaseLeaseOp gives up the leadership lease if unit holds it.
func ReleaseLeaseOp(unit string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_ReleaseLease{ReleaseLease: &storepb.ReleaseLease{Unit: unit}}}
}

// HashStateOp marks a point at which every member hashes its state.
func HashStateOp() *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_HashState{HashState: &storepb.HashState{}}}
}

// ReportDivergenceOp records that member's state hash at index differs
// from the expected one.
func ReportDivergenceOp(member string, index uint64, hash, expected []byte) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_ReportDivergence{ReportDivergence: &storepb.ReportDivergence{MemberId: member, Index: index, Hash: hash, Expected: expected}}}
}

// ForgetDivergenceOp drops the record of member's divergence.
func ForgetDivergenceOp(member string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_ForgetDivergence{ForgetDivergence: &storepb.ForgetDivergence{MemberId: member}}}
}

// StartGenerationOp records that a recovery plan started generation.
func StartGenerationOp(generation uint64, plan string) *storepb.Op {
	return &storepb.Op{Op: &storepb.Op_StartGeneration{StartGeneration: &storepb.StartGeneration{Generation: generation, Plan: plan}}}
}
