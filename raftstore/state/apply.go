package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Limits enforced when commands are applied. They are part of the
// replicated behaviour: every member must use the same values.
const (
	// MaxBagSize bounds the total bytes of keys and values of one bag
	// (Juju's relation settings limit).
	MaxBagSize = 16 << 20
	// MaxCharmStateKey, MaxCharmStateValue and MaxCharmStateSize bound a
	// unit's charm state.
	MaxCharmStateKey   = 256
	MaxCharmStateValue = 64 << 10
	MaxCharmStateSize  = 2 << 20
	// MaxLeaderSettingsSize bounds the leader settings.
	MaxLeaderSettingsSize = 16 << 20
	// MaxCursorSize bounds an event-delivery cursor.
	MaxCursorSize = 1 << 20
	// MaxCommandSize bounds one encoded command, hence one raft entry: a
	// hook's commit may change a full unit bag and a full application bag
	// at once, with room to spare for the rest.
	MaxCommandSize = 2*MaxBagSize + 1<<20
)

// txn builds the next State from the current one. Tables are copied on
// first write only; if any op fails the txn is dropped and the current
// State stays as it was, which is what makes a command all-or-none.
type txn struct {
	base  *State
	index uint64
	now   time.Time

	meta      *meta
	relations *iradix.Txn[*Relation]
	bags      *iradix.Txn[*Bag]
	units     *iradix.Txn[*Unit]
	charm     *iradix.Txn[Settings]
	cursors   *iradix.Txn[[]byte]
	statuses  *iradix.Txn[*Status]
	extras    *iradix.Txn[*UnitExtra]
	claimants *iradix.Txn[*Claimant]
	divergent *iradix.Txn[*Divergence]
	secrets   *iradix.Txn[*Secret] // secrets.go
	actions   *iradix.Txn[*Action] // actions.go
	// bagOwners are the owners whose bags this command wrote (State.bagsOf).
	bagOwners map[string]struct{}
}

// bagWritten records that one of owner's bags is written or deleted.
func (t *txn) bagWritten(owner string) {
	if t.bagOwners == nil {
		t.bagOwners = map[string]struct{}{}
	}
	t.bagOwners[owner] = struct{}{}
}

func newTxn(base *State, index uint64, now time.Time) *txn {
	return &txn{base: base, index: index, now: now}
}

func (t *txn) m() *meta {
	if t.meta == nil {
		c := *t.base.meta
		t.meta = &c
	}
	return t.meta
}

func (t *txn) readMeta() *meta {
	if t.meta != nil {
		return t.meta
	}
	return t.base.meta
}

func (t *txn) rel() *iradix.Txn[*Relation] {
	if t.relations == nil {
		t.relations = t.base.relations.Txn()
	}
	return t.relations
}

func (t *txn) bag() *iradix.Txn[*Bag] {
	if t.bags == nil {
		t.bags = t.base.bags.Txn()
	}
	return t.bags
}

func (t *txn) unit() *iradix.Txn[*Unit] {
	if t.units == nil {
		t.units = t.base.units.Txn()
	}
	return t.units
}

func (t *txn) charmTxn() *iradix.Txn[Settings] {
	if t.charm == nil {
		t.charm = t.base.charm.Txn()
	}
	return t.charm
}

func (t *txn) statusTxn() *iradix.Txn[*Status] {
	if t.statuses == nil {
		t.statuses = t.base.statuses.Txn()
	}
	return t.statuses
}

func (t *txn) divergentTxn() *iradix.Txn[*Divergence] {
	if t.divergent == nil {
		t.divergent = t.base.divergent.Txn()
	}
	return t.divergent
}

func (t *txn) claimantTxn() *iradix.Txn[*Claimant] {
	if t.claimants == nil {
		t.claimants = t.base.claimants.Txn()
	}
	return t.claimants
}

func (t *txn) extraTxn() *iradix.Txn[*UnitExtra] {
	if t.extras == nil {
		t.extras = t.base.extras.Txn()
	}
	return t.extras
}

// extra returns a copy of a unit's extras for modification.
func (t *txn) extra(unit string) *UnitExtra {
	e, ok := t.extraTxn().Get([]byte(unit))
	if !ok {
		return &UnitExtra{}
	}
	c := *e
	return &c
}

func (t *txn) cursorTxn() *iradix.Txn[[]byte] {
	if t.cursors == nil {
		t.cursors = t.base.cursors.Txn()
	}
	return t.cursors
}

// getRelation, getUnit and getBag read through the txn so later ops of a
// command see the effects of earlier ones.
func (t *txn) getRelation(id int64) (*Relation, bool) {
	if t.relations != nil {
		return t.relations.Get(relKey(id))
	}
	return t.base.relations.Get(relKey(id))
}

func (t *txn) getUnit(n int64) (*Unit, bool) {
	if t.units != nil {
		return t.units.Get(numKey(n))
	}
	return t.base.units.Get(numKey(n))
}

func (t *txn) getBag(relationID int64, owner string) (*Bag, bool) {
	if t.bags != nil {
		return t.bags.Get(bagKey(relationID, owner))
	}
	return t.base.bags.Get(bagKey(relationID, owner))
}

func (t *txn) relationRoot() *iradix.Node[*Relation] {
	if t.relations != nil {
		return t.relations.Root()
	}
	return t.base.relations.Root()
}

func (t *txn) unitRoot() *iradix.Node[*Unit] {
	if t.units != nil {
		return t.units.Root()
	}
	return t.base.units.Root()
}

// commit returns the new State. Requests are handled by the caller.
func (t *txn) commit() *State {
	s := *t.base
	s.index = t.index
	if t.meta != nil {
		s.meta = t.meta
	}
	if t.relations != nil {
		s.relations = t.relations.CommitOnly()
	}
	if t.bags != nil {
		s.bags = t.bags.CommitOnly()
	}
	if len(t.bagOwners) > 0 {
		of := s.bagsOf.Txn()
		for owner := range t.bagOwners {
			of.Insert([]byte(owner), t.index)
		}
		s.bagsOf = of.CommitOnly()
	}
	if t.units != nil {
		s.units = t.units.CommitOnly()
	}
	if t.charm != nil {
		s.charm = t.charm.CommitOnly()
	}
	if t.cursors != nil {
		s.cursors = t.cursors.CommitOnly()
	}
	if t.statuses != nil {
		s.statuses = t.statuses.CommitOnly()
	}
	if t.extras != nil {
		s.extras = t.extras.CommitOnly()
	}
	if t.claimants != nil {
		s.claimants = t.claimants.CommitOnly()
	}
	if t.divergent != nil {
		s.divergent = t.divergent.CommitOnly()
	}
	if t.secrets != nil {
		s.secrets = t.secrets.CommitOnly()
	}
	if t.actions != nil { // actions.go
		s.actions = t.actions.CommitOnly()
	}
	return &s
}

// applyOp applies one op inside the txn.
func (t *txn) applyOp(op *storepb.Op) (*storepb.OpResult, *CommandError) {
	if _, ok := op.GetOp().(*storepb.Op_InitCluster); !ok && t.readMeta().app == "" {
		return nil, opErr(storepb.ErrorCode_INVALID, "the cluster has not been initialised yet")
	}
	if res, err, ok := t.applySecretOp(op); ok { // secrets.go
		return res, err
	}
	switch o := op.GetOp().(type) {
	case *storepb.Op_InitCluster:
		return t.initCluster(o.InitCluster)
	case *storepb.Op_EnsureRelation:
		return t.ensureRelation(o.EnsureRelation)
	case *storepb.Op_RemoveRelation:
		return t.removeRelation(o.RemoveRelation)
	case *storepb.Op_UpdateBag:
		return t.updateBag(o.UpdateBag)
	case *storepb.Op_CheckBag:
		return t.checkBag(o.CheckBag)
	case *storepb.Op_SetRemoteView:
		return t.setRemoteView(o.SetRemoteView)
	case *storepb.Op_ClaimUnit:
		return t.claimUnit(o.ClaimUnit)
	case *storepb.Op_ReleaseUnit:
		return t.releaseUnit(o.ReleaseUnit)
	case *storepb.Op_RemoveUnit:
		return t.removeUnit(o.RemoveUnit)
	case *storepb.Op_UpdateCharmState:
		return t.updateCharmState(o.UpdateCharmState)
	case *storepb.Op_UpdateLeaderSettings:
		return t.updateLeaderSettings(o.UpdateLeaderSettings)
	case *storepb.Op_ClaimLease:
		return t.claimLease(o.ClaimLease)
	case *storepb.Op_CheckLease:
		return t.checkLease(o.CheckLease)
	case *storepb.Op_SetCursor:
		return t.setCursor(o.SetCursor)
	case *storepb.Op_PatchCursor:
		return t.patchCursor(o.PatchCursor)
	case *storepb.Op_SetStatus:
		return t.setStatus(o.SetStatus)
	case *storepb.Op_SetHookError:
		return t.setHookError(o.SetHookError)
	case *storepb.Op_SetWorkloadVersion:
		return t.setWorkloadVersion(o.SetWorkloadVersion)
	case *storepb.Op_UpdatePorts:
		return t.updatePorts(o.UpdatePorts)
	case *storepb.Op_ReleaseLease:
		return t.releaseLease(o.ReleaseLease)
	case *storepb.Op_ForgetClaimant:
		return t.forgetClaimant(o.ForgetClaimant)
	case *storepb.Op_HashState:
		return &storepb.OpResult{}, nil
	case *storepb.Op_ReportDivergence:
		return t.reportDivergence(o.ReportDivergence)
	case *storepb.Op_StartGeneration:
		if g := o.StartGeneration; g.GetGeneration() > t.readMeta().generation {
			m := t.m()
			m.generation, m.generationPlan, m.generationStarted = g.GetGeneration(), g.GetPlan(), t.now
		}
		return &storepb.OpResult{}, nil
	// ---- actions (actions.go) ----
	case *storepb.Op_EnqueueAction:
		return t.enqueueAction(o.EnqueueAction)
	case *storepb.Op_StartAction:
		return t.startAction(o.StartAction)
	case *storepb.Op_LogAction:
		return t.logAction(o.LogAction)
	case *storepb.Op_FinishAction:
		return t.finishAction(o.FinishAction)
	// ---- end of actions ----
	// ---- failed hooks (hookhistory.go) ----
	case *storepb.Op_RecordHook:
		return t.recordHook(o.RecordHook)
	case *storepb.Op_RequestHookRetry:
		return t.requestHookRetry(o.RequestHookRetry)
	// ---- end of failed hooks ----
	case *storepb.Op_ForgetDivergence:
		t.divergentTxn().Delete([]byte(o.ForgetDivergence.GetMemberId()))
		return &storepb.OpResult{}, nil
	}
	return nil, opErr(storepb.ErrorCode_UNSUPPORTED, "unknown operation (written by a newer bagkeeper?)")
}

func (t *txn) initCluster(o *storepb.InitCluster) (*storepb.OpResult, *CommandError) {
	if !ValidAppName(o.GetApp()) {
		return nil, opErr(storepb.ErrorCode_INVALID, "invalid application name %q", o.GetApp())
	}
	m := t.readMeta()
	if m.app != "" {
		if m.app == o.GetApp() {
			return &storepb.OpResult{}, nil
		}
		return nil, opErr(storepb.ErrorCode_CONFLICT, "cluster already serves application %q, not %q", m.app, o.GetApp())
	}
	mm := t.m()
	mm.app = o.GetApp()
	mm.clusterID = o.GetClusterId()
	return &storepb.OpResult{}, nil
}

func (t *txn) ensureRelation(o *storepb.EnsureRelation) (*storepb.OpResult, *CommandError) {
	if !ValidEndpointName(o.GetEndpoint()) {
		return nil, opErr(storepb.ErrorCode_INVALID, "invalid endpoint name %q", o.GetEndpoint())
	}
	if o.GetPeer() {
		if o.GetRemoteApp() != "" || o.GetRemoteEndpoint() != "" {
			return nil, opErr(storepb.ErrorCode_INVALID, "a peer relation has no remote application")
		}
		if o.GetOffered() {
			return nil, opErr(storepb.ErrorCode_INVALID, "a peer relation cannot be offered")
		}
	} else {
		if !ValidAppName(o.GetRemoteApp()) {
			return nil, opErr(storepb.ErrorCode_INVALID, "invalid remote application name %q", o.GetRemoteApp())
		}
		if !ValidEndpointName(o.GetRemoteEndpoint()) {
			return nil, opErr(storepb.ErrorCode_INVALID, "invalid remote endpoint name %q", o.GetRemoteEndpoint())
		}
		if o.GetRemoteApp() == t.readMeta().app {
			return nil, opErr(storepb.ErrorCode_INVALID, "a relation to the application itself must be a peer relation")
		}
	}
	it := t.relationRoot().Iterator()
	for _, r, ok := it.Next(); ok; _, r, ok = it.Next() {
		if r.Endpoint == o.GetEndpoint() && r.RemoteApp == o.GetRemoteApp() && r.RemoteEndpoint == o.GetRemoteEndpoint() {
			if r.Peer != o.GetPeer() || r.Interface != o.GetInterface() || r.Offered != o.GetOffered() {
				return nil, opErr(storepb.ErrorCode_CONFLICT, "relation %s exists with another interface, kind or side of the offer", r.Key())
			}
			return &storepb.OpResult{RelationId: r.ID}, nil
		}
	}
	m := t.m()
	r := &Relation{
		ID:             m.nextRelation,
		Endpoint:       o.GetEndpoint(),
		Interface:      o.GetInterface(),
		Peer:           o.GetPeer(),
		RemoteApp:      o.GetRemoteApp(),
		RemoteEndpoint: o.GetRemoteEndpoint(),
		Created:        t.now,
		Offered:        o.GetOffered(),
	}
	m.nextRelation++
	t.rel().Insert(relKey(r.ID), r)
	return &storepb.OpResult{RelationId: r.ID}, nil
}

func (t *txn) removeRelation(o *storepb.RemoveRelation) (*storepb.OpResult, *CommandError) {
	if _, ok := t.getRelation(o.GetRelationId()); !ok {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "relation %d not found", o.GetRelationId())
	}
	t.rel().Delete(relKey(o.GetRelationId()))
	t.bag().DeletePrefix(relKey(o.GetRelationId()))
	t.forgetRelationSecrets(o.GetRelationId()) // secrets.go
	return &storepb.OpResult{RelationId: o.GetRelationId()}, nil
}

// checkBagOwner validates who may own a bag in a relation.
func (t *txn) checkBagOwner(r *Relation, owner string) *CommandError {
	app := t.readMeta().app
	if uapp, n, ok := ParseUnitName(owner); ok {
		if uapp == app {
			u, ok := t.getUnit(n)
			if !ok || u.State == UnitRemoved {
				return opErr(storepb.ErrorCode_NOT_FOUND, "unit %s does not exist", owner)
			}
			return nil
		}
		if !r.Peer && uapp == r.RemoteApp {
			return nil
		}
		return opErr(storepb.ErrorCode_INVALID, "unit %s is not part of relation %s", owner, r.Key())
	}
	if owner == app || (!r.Peer && owner == r.RemoteApp) {
		return nil
	}
	return opErr(storepb.ErrorCode_INVALID, "%q is neither a unit nor an application of relation %s", owner, r.Key())
}

func (t *txn) updateBag(o *storepb.UpdateBag) (*storepb.OpResult, *CommandError) {
	r, ok := t.getRelation(o.GetRelationId())
	if !ok {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "relation %d not found", o.GetRelationId())
	}
	if err := t.checkBagOwner(r, o.GetOwner()); err != nil {
		return nil, err
	}
	old, _ := t.getBag(r.ID, o.GetOwner())
	var data Settings
	if old != nil {
		data = old.Data
	}
	next, changed, err := data.merge(o.GetSet(), o.GetDelete())
	if err != nil {
		return nil, err
	}
	if next.Size() > MaxBagSize {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "relation data for %s in %s would be %d bytes, over the %d byte limit", o.GetOwner(), r.Key(), next.Size(), MaxBagSize)
	}
	if !changed {
		return &storepb.OpResult{}, nil
	}
	b := &Bag{RelationID: r.ID, Owner: intern(o.GetOwner()), Data: next, ModifiedIndex: t.index, Revision: 1}
	if old != nil {
		b.Revision = old.Revision + 1
	}
	t.bag().Insert(bagKey(r.ID, o.GetOwner()), b)
	t.bagWritten(o.GetOwner())
	return &storepb.OpResult{}, nil
}

// setRemoteView replaces the remote side of a relation with a view the
// remote group published (see storepb.SetRemoteView).
func (t *txn) setRemoteView(o *storepb.SetRemoteView) (*storepb.OpResult, *CommandError) {
	r, ok := t.getRelation(o.GetRelationId())
	if !ok {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "relation %d not found", o.GetRelationId())
	}
	if r.Peer {
		return nil, opErr(storepb.ErrorCode_INVALID, "relation %s is a peer relation: it has no remote view", r.Key())
	}
	if o.GetRemoteApp() != r.RemoteApp {
		return nil, opErr(storepb.ErrorCode_INVALID, "a view of %q is not a view of relation %s, whose remote application is %q", o.GetRemoteApp(), r.Key(), r.RemoteApp)
	}
	if err := checkViewBag(r, r.RemoteApp, o.GetApp()); err != nil {
		return nil, err
	}
	inView := make(map[string]bool, len(o.GetUnits()))
	for _, u := range o.GetUnits() {
		if app, _, ok := ParseUnitName(u.GetUnit()); !ok || app != r.RemoteApp {
			return nil, opErr(storepb.ErrorCode_INVALID, "%q in the view of relation %s is not a unit of %s", u.GetUnit(), r.Key(), r.RemoteApp)
		}
		if inView[u.GetUnit()] {
			return nil, opErr(storepb.ErrorCode_INVALID, "unit %s is twice in the view of relation %s", u.GetUnit(), r.Key())
		}
		inView[u.GetUnit()] = true
		if err := checkViewBag(r, u.GetUnit(), u.GetData()); err != nil {
			return nil, err
		}
	}
	if o.GetSource() == r.RemoteSource && o.GetRevision() <= r.RemoteRevision {
		return &storepb.OpResult{RelationId: r.ID, Stale: true}, nil
	}

	// Remote units gone from the view have departed: their bags go.
	var departed []string
	it := t.bag().Root().Iterator()
	it.SeekPrefix(relKey(r.ID))
	for _, b, ok := it.Next(); ok; _, b, ok = it.Next() {
		if app, _, ok := ParseUnitName(b.Owner); ok && app == r.RemoteApp && !inView[b.Owner] {
			departed = append(departed, b.Owner)
		}
	}
	for _, owner := range departed {
		t.bag().Delete(bagKey(r.ID, owner))
		t.bagWritten(owner)
	}
	// Every unit in the view has a bag, empty or not; one whose data is
	// the same keeps its revision, so that nobody is told of a change.
	for _, u := range o.GetUnits() {
		old, exists := t.getBag(r.ID, u.GetUnit())
		if exists && sameData(old.Data, u.GetData()) {
			continue
		}
		t.putViewBag(r.ID, u.GetUnit(), old, u.GetData())
	}
	// The remote application's bag appears with its first data, and then
	// follows the view (emptied, it stays).
	old, exists := t.getBag(r.ID, r.RemoteApp)
	if (exists && !sameData(old.Data, o.GetApp())) || (!exists && len(o.GetApp()) > 0) {
		t.putViewBag(r.ID, r.RemoteApp, old, o.GetApp())
	}
	c := *r
	c.RemoteSource, c.RemoteRevision = o.GetSource(), o.GetRevision()
	if o.GetRemoteModel() != "" {
		c.RemoteModel = o.GetRemoteModel()
	}
	t.rel().Insert(relKey(r.ID), &c)
	return &storepb.OpResult{RelationId: r.ID}, nil
}

// checkViewBag validates one bag of a remote view as UpdateBag would a
// write: no empty key, no more than MaxBagSize bytes.
func checkViewBag(r *Relation, owner string, data map[string]string) *CommandError {
	size := 0
	for k, v := range data {
		if k == "" {
			return opErr(storepb.ErrorCode_INVALID, "empty key in the view of %s in relation %s", owner, r.Key())
		}
		size += len(k) + len(v)
	}
	if size > MaxBagSize {
		return opErr(storepb.ErrorCode_TOO_LARGE, "relation data for %s in %s would be %d bytes, over the %d byte limit", owner, r.Key(), size, MaxBagSize)
	}
	return nil
}

// sameData reports whether a bag holds exactly data.
func sameData(s Settings, data map[string]string) bool {
	if s.Len() != len(data) {
		return false
	}
	for k, v := range data {
		if got, ok := s.Get(k); !ok || got != v {
			return false
		}
	}
	return true
}

// putViewBag writes a bag of a remote view: revision 1 for a new bag, one
// more than old's otherwise.
func (t *txn) putViewBag(relationID int64, owner string, old *Bag, data map[string]string) {
	b := &Bag{RelationID: relationID, Owner: intern(owner), Data: SettingsOf(data), ModifiedIndex: t.index, Revision: 1}
	if old != nil {
		b.Revision = old.Revision + 1
	}
	t.bag().Insert(bagKey(relationID, owner), b)
	t.bagWritten(owner)
}

func (t *txn) checkBag(o *storepb.CheckBag) (*storepb.OpResult, *CommandError) {
	var rev uint64
	if b, ok := t.getBag(o.GetRelationId(), o.GetOwner()); ok {
		rev = b.Revision
	}
	if rev != o.GetRevision() {
		return nil, opErr(storepb.ErrorCode_CONFLICT, "bag of %s in relation %d is at revision %d, expected %d", o.GetOwner(), o.GetRelationId(), rev, o.GetRevision())
	}
	return &storepb.OpResult{}, nil
}

func (t *txn) claimUnit(o *storepb.ClaimUnit) (*storepb.OpResult, *CommandError) {
	if o.GetMemberId() == "" || o.GetPod() == "" {
		return nil, opErr(storepb.ErrorCode_INVALID, "a unit claim needs a member id and a pod name")
	}
	if o.GetOrdinal() >= 0 {
		return t.claimNumber(o, o.GetOrdinal())
	}
	// Without an ordinal: the member's own unit, then one held by an
	// earlier incarnation of the same pod, then the unit released longest
	// ago, then a new number while the scale allows one.
	var samePod, oldest *Unit
	live := 0
	it := t.unitRoot().Iterator()
	for _, u, ok := it.Next(); ok; _, u, ok = it.Next() {
		if u.State != UnitRemoved {
			live++
		}
		switch {
		case u.State == UnitRemoved:
		case u.State == UnitActive && u.Member == o.GetMemberId():
			t.claimantTxn().Delete([]byte(o.GetMemberId()))
			return &storepb.OpResult{Unit: u.Name}, nil
		case u.Pod == o.GetPod():
			if samePod == nil || (u.State == UnitActive && samePod.State != UnitActive) {
				samePod = u
			}
		case u.State == UnitReleased:
			if oldest == nil || u.Released.Before(oldest.Released) {
				oldest = u
			}
		}
	}
	switch {
	case samePod != nil:
		return t.claimNumber(o, samePod.Number)
	case oldest != nil:
		return t.claimNumber(o, oldest.Number)
	case o.GetScale() > 0 && live >= int(o.GetScale()):
		// Every unit the application may have is active: wait for one to
		// be released (or taken over from an unreachable holder).
		c := &Claimant{Member: o.GetMemberId(), Pod: o.GetPod(), Since: t.now}
		if old, ok := t.claimantTxn().Get([]byte(o.GetMemberId())); ok {
			c.Since = old.Since
		}
		t.claimantTxn().Insert([]byte(o.GetMemberId()), c)
		return &storepb.OpResult{Waiting: true}, nil
	}
	return t.claimNumber(o, t.readMeta().nextUnit)
}

// claimNumber makes unit n active and held by the claiming member,
// creating it or bringing a removed unit back with no data. A claim that
// changes the unit's holder, or makes it active again, starts a new epoch.
func (t *txn) claimNumber(o *storepb.ClaimUnit, n int64) (*storepb.OpResult, *CommandError) {
	app := t.readMeta().app
	name := UnitName(app, n)
	t.claimantTxn().Delete([]byte(o.GetMemberId()))
	old, exists := t.getUnit(n)
	if exists && old.State == UnitActive && old.Member == o.GetMemberId() && old.Pod == o.GetPod() && old.ByOrdinal == (o.GetOrdinal() >= 0) {
		return &storepb.OpResult{Unit: name}, nil
	}
	u := &Unit{Name: name, Number: n, State: UnitActive, Member: o.GetMemberId(), Pod: o.GetPod(), Created: t.now, Claimed: t.now, ByOrdinal: o.GetOrdinal() >= 0, Epoch: 1}
	if exists {
		u.Epoch = old.Epoch + 1
		if old.State == UnitActive && old.Member == o.GetMemberId() {
			// The same holder, claiming it another way: not a new claim.
			u.Epoch, u.Claimed = old.Epoch, old.Claimed
		}
	}
	if exists && old.State != UnitRemoved {
		u.Created = old.Created
	} else if exists {
		// A removed unit comes back (a StatefulSet scaled up again): it starts
		// with none of its previous data.
		t.forgetUnitData(name)
	}
	t.unit().Insert(numKey(n), u)
	if m := t.readMeta(); n >= m.nextUnit {
		t.m().nextUnit = n + 1
	}
	return &storepb.OpResult{Unit: name}, nil
}

func (t *txn) reportDivergence(o *storepb.ReportDivergence) (*storepb.OpResult, *CommandError) {
	if o.GetMemberId() == "" {
		return nil, opErr(storepb.ErrorCode_INVALID, "a divergence report needs a member id")
	}
	if _, ok := t.divergentTxn().Get([]byte(o.GetMemberId())); ok {
		return &storepb.OpResult{}, nil // the first finding stands
	}
	t.divergentTxn().Insert([]byte(o.GetMemberId()), &Divergence{Member: o.GetMemberId(), Index: o.GetIndex(),
		Hash: bytes.Clone(o.GetHash()), Expected: bytes.Clone(o.GetExpected()), Since: t.now})
	return &storepb.OpResult{}, nil
}

func (t *txn) forgetClaimant(o *storepb.ForgetClaimant) (*storepb.OpResult, *CommandError) {
	t.claimantTxn().Delete([]byte(o.GetMemberId()))
	return &storepb.OpResult{}, nil
}

// checkFence refuses a command made for a unit holder that no longer holds
// the unit under the same claim.
func (t *txn) checkFence(f *storepb.Fence) *CommandError {
	u, err := t.lookupUnit(f.GetUnit())
	if err != nil {
		return &CommandError{Code: storepb.ErrorCode_FENCED, Msg: err.Msg}
	}
	switch {
	case u.State != UnitActive:
		return opErr(storepb.ErrorCode_FENCED, "unit %s is %s (%s): %s no longer holds it", u.Name, u.State, u.Reason, f.GetMemberId())
	case u.Member != f.GetMemberId() || u.Epoch != f.GetEpoch():
		return opErr(storepb.ErrorCode_FENCED, "unit %s was taken over: it is held by %s under claim %d, not by %s under claim %d", u.Name, u.Member, u.Epoch, f.GetMemberId(), f.GetEpoch())
	}
	return nil
}

// forgetUnitData deletes a unit's bags, charm state and cursor.
func (t *txn) forgetUnitData(name string) {
	it := t.relationRoot().Iterator()
	for _, r, ok := it.Next(); ok; _, r, ok = it.Next() {
		if _, ok := t.getBag(r.ID, name); ok {
			t.bag().Delete(bagKey(r.ID, name))
			t.bagWritten(name)
		}
	}
	t.charmTxn().Delete([]byte(name))
	t.cursorTxn().Delete([]byte(name))
	t.statusTxn().Delete([]byte(name))
	t.extraTxn().Delete([]byte(name))
}

func (t *txn) lookupUnit(name string) (*Unit, *CommandError) {
	app, n, ok := ParseUnitName(name)
	if !ok || app != t.readMeta().app {
		return nil, opErr(storepb.ErrorCode_INVALID, "invalid unit name %q for application %q", name, t.readMeta().app)
	}
	u, ok := t.getUnit(n)
	if !ok {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "unit %s does not exist", name)
	}
	return u, nil
}

func (t *txn) liveUnit(name string) (*Unit, *CommandError) {
	u, err := t.lookupUnit(name)
	if err != nil {
		return nil, err
	}
	if u.State == UnitRemoved {
		return nil, opErr(storepb.ErrorCode_NOT_FOUND, "unit %s was removed", name)
	}
	return u, nil
}

func (t *txn) releaseUnit(o *storepb.ReleaseUnit) (*storepb.OpResult, *CommandError) {
	u, err := t.liveUnit(o.GetUnit())
	if err != nil {
		return nil, err
	}
	if o.GetExpectMember() != "" && u.Member != o.GetExpectMember() {
		return nil, opErr(storepb.ErrorCode_CONFLICT, "unit %s is held by %s, not %s", u.Name, u.Member, o.GetExpectMember())
	}
	if u.State == UnitReleased {
		return &storepb.OpResult{Unit: u.Name}, nil
	}
	c := *u
	c.State = UnitReleased
	c.Released = t.now
	c.Reason = o.GetReason()
	t.unit().Insert(numKey(u.Number), &c)
	return &storepb.OpResult{Unit: u.Name}, nil
}

func (t *txn) removeUnit(o *storepb.RemoveUnit) (*storepb.OpResult, *CommandError) {
	u, err := t.lookupUnit(o.GetUnit())
	if err != nil {
		return nil, err
	}
	if u.State == UnitRemoved {
		return &storepb.OpResult{Unit: u.Name}, nil
	}
	if before := o.GetOnlyReleasedBeforeUnixNano(); before != 0 {
		if u.State != UnitReleased || unixNano(u.Released) > before {
			return nil, opErr(storepb.ErrorCode_CONFLICT, "unit %s is %s (released %s), not released since before %s", u.Name, u.State, u.Released.Format(time.RFC3339), fromUnixNano(before).Format(time.RFC3339))
		}
	}
	c := *u
	c.State = UnitRemoved
	c.Removed = t.now
	c.Reason = o.GetReason()
	t.unit().Insert(numKey(u.Number), &c)
	// Relation bags stay readable while their relation exists (as in Juju);
	// charm state and the cursor go with the unit.
	t.charmTxn().Delete([]byte(u.Name))
	t.cursorTxn().Delete([]byte(u.Name))
	t.statusTxn().Delete([]byte(u.Name))
	t.extraTxn().Delete([]byte(u.Name))
	t.forgetUnitSecrets(u.Name) // secrets.go
	t.failUnitActions(u.Name)   // actions.go
	if t.readMeta().lease.Unit == u.Name {
		t.m().lease = Lease{Epoch: t.readMeta().lease.Epoch}
	}
	return &storepb.OpResult{Unit: u.Name}, nil
}

func (t *txn) updateCharmState(o *storepb.UpdateCharmState) (*storepb.OpResult, *CommandError) {
	if _, err := t.liveUnit(o.GetUnit()); err != nil {
		return nil, err
	}
	for k, v := range o.GetSet() {
		if len(k) > MaxCharmStateKey {
			return nil, opErr(storepb.ErrorCode_TOO_LARGE, "charm state key %.40q... is %d bytes, over the %d byte limit", k, len(k), MaxCharmStateKey)
		}
		if len(v) > MaxCharmStateValue {
			return nil, opErr(storepb.ErrorCode_TOO_LARGE, "charm state value of %q is %d bytes, over the %d byte limit", k, len(v), MaxCharmStateValue)
		}
	}
	cur, _ := t.charmTxn().Get([]byte(o.GetUnit()))
	next, changed, err := cur.merge(o.GetSet(), o.GetDelete())
	if err != nil {
		return nil, err
	}
	if next.Size() > MaxCharmStateSize {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "charm state of %s would be %d bytes, over the %d byte limit", o.GetUnit(), next.Size(), MaxCharmStateSize)
	}
	if changed {
		t.charmTxn().Insert([]byte(o.GetUnit()), next)
	}
	return &storepb.OpResult{}, nil
}

func (t *txn) updateLeaderSettings(o *storepb.UpdateLeaderSettings) (*storepb.OpResult, *CommandError) {
	m := t.readMeta()
	next, changed, err := m.leader.merge(o.GetSet(), o.GetDelete())
	if err != nil {
		return nil, err
	}
	if next.Size() > MaxLeaderSettingsSize {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "leader settings would be %d bytes, over the %d byte limit", next.Size(), MaxLeaderSettingsSize)
	}
	if changed {
		mm := t.m()
		mm.leader = next
		mm.leaderRev++
	}
	return &storepb.OpResult{}, nil
}

func (t *txn) claimLease(o *storepb.ClaimLease) (*storepb.OpResult, *CommandError) {
	u, err := t.liveUnit(o.GetUnit())
	if err != nil {
		return nil, err
	}
	if u.State != UnitActive {
		return nil, opErr(storepb.ErrorCode_CONFLICT, "unit %s is %s and cannot lead", u.Name, u.State)
	}
	if o.GetDurationNanos() <= 0 {
		return nil, opErr(storepb.ErrorCode_INVALID, "lease duration must be positive")
	}
	cur := t.readMeta().lease
	if cur.Unit != "" && cur.Unit != u.Name && t.now.Before(cur.Expires) {
		return nil, opErr(storepb.ErrorCode_NOT_LEADER, "leadership is held by %s until %s", cur.Unit, cur.Expires.Format(time.RFC3339Nano))
	}
	next := Lease{Unit: u.Name, Member: o.GetMemberId(), Acquired: cur.Acquired, Expires: t.now.Add(time.Duration(o.GetDurationNanos())), Epoch: cur.Epoch}
	if cur.Unit != u.Name || !t.now.Before(cur.Expires) {
		next.Acquired = t.now
		next.Epoch = cur.Epoch + 1
	}
	t.m().lease = next
	return &storepb.OpResult{Unit: u.Name}, nil
}

func (t *txn) checkLease(o *storepb.CheckLease) (*storepb.OpResult, *CommandError) {
	if !t.readMeta().lease.HeldBy(o.GetUnit(), t.now) {
		return nil, opErr(storepb.ErrorCode_NOT_LEADER, "%s does not hold the leadership lease", o.GetUnit())
	}
	return &storepb.OpResult{}, nil
}

func (t *txn) setCursor(o *storepb.SetCursor) (*storepb.OpResult, *CommandError) {
	if _, err := t.liveUnit(o.GetUnit()); err != nil {
		return nil, err
	}
	if o.GetCheckPrevious() {
		cur, _ := t.cursorTxn().Get([]byte(o.GetUnit()))
		if !bytes.Equal(cur, o.GetPrevious()) {
			return nil, opErr(storepb.ErrorCode_CONFLICT, "the event cursor of %s moved on since the hook was decided", o.GetUnit())
		}
	}
	if len(o.GetCursor()) > MaxCursorSize {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "cursor of %d bytes is over the %d byte limit", len(o.GetCursor()), MaxCursorSize)
	}
	t.cursorTxn().Insert([]byte(o.GetUnit()), append([]byte(nil), o.GetCursor()...))
	return &storepb.OpResult{}, nil
}

func (t *txn) patchCursor(o *storepb.PatchCursor) (*storepb.OpResult, *CommandError) {
	if _, err := t.liveUnit(o.GetUnit()); err != nil {
		return nil, err
	}
	cur, _ := t.cursorTxn().Get([]byte(o.GetUnit()))
	next, err := PatchedCursor(cur, o)
	switch {
	case errors.Is(err, errCursorMoved):
		return nil, opErr(storepb.ErrorCode_CONFLICT, "the event cursor of %s moved on since the hook was decided", o.GetUnit())
	case err != nil:
		return nil, opErr(storepb.ErrorCode_INVALID, "cursor patch for %s: %v", o.GetUnit(), err)
	case len(next) > MaxCursorSize:
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "cursor of %d bytes is over the %d byte limit", len(next), MaxCursorSize)
	}
	t.cursorTxn().Insert([]byte(o.GetUnit()), next)
	return &storepb.OpResult{}, nil
}

// Workload statuses a charm may set.
var charmStatuses = map[string]bool{"maintenance": true, "blocked": true, "waiting": true, "active": true}

// Limits of the smaller records.
const (
	maxStatusMessage   = 16 << 10
	maxStatusData      = 64 << 10
	maxWorkloadVersion = 1 << 10
	maxPorts           = 1024
)

func (t *txn) setStatus(o *storepb.SetStatus) (*storepb.OpResult, *CommandError) {
	owner := o.GetOwner()
	if owner != t.readMeta().app {
		if _, err := t.liveUnit(owner); err != nil {
			return nil, err
		}
	}
	if !charmStatuses[o.GetStatus()] {
		return nil, opErr(storepb.ErrorCode_INVALID, "invalid status %q, expected one of [maintenance blocked waiting active]", o.GetStatus())
	}
	if len(o.GetMessage()) > maxStatusMessage {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "status message of %d bytes is over the %d byte limit", len(o.GetMessage()), maxStatusMessage)
	}
	if d := o.GetDataJson(); len(d) > 0 {
		if len(d) > maxStatusData {
			return nil, opErr(storepb.ErrorCode_TOO_LARGE, "status data of %d bytes is over the %d byte limit", len(d), maxStatusData)
		}
		if !json.Valid(d) || d[0] != '{' {
			return nil, opErr(storepb.ErrorCode_INVALID, "status data must be a JSON object")
		}
	}
	t.statusTxn().Insert([]byte(owner), &Status{Owner: owner, Status: o.GetStatus(), Message: o.GetMessage(), DataJSON: append([]byte(nil), o.GetDataJson()...), Since: t.now})
	return &storepb.OpResult{}, nil
}

func (t *txn) setHookError(o *storepb.SetHookError) (*storepb.OpResult, *CommandError) {
	if _, err := t.liveUnit(o.GetUnit()); err != nil {
		return nil, err
	}
	if len(o.GetOutputTail()) > MaxHookOutputTail {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "hook output tail of %d bytes is over the %d byte limit", len(o.GetOutputTail()), MaxHookOutputTail)
	}
	e := t.extra(o.GetUnit())
	if e.HookError == o.GetHook() && e.HookErrorMessage == o.GetMessage() && e.HookErrorOutputTail == string(o.GetOutputTail()) &&
		e.HookErrorExitCode == int(o.GetExitCode()) && e.HookErrorAttempt == int(o.GetAttempt()) && e.HookErrorNextAttempt.Equal(fromUnixNano(o.GetNextAttemptUnixNano())) {
		return &storepb.OpResult{}, nil
	}
	if e.HookError != o.GetHook() || e.HookErrorMessage != o.GetMessage() {
		e.HookErrorSince = t.now
	}
	e.HookError, e.HookErrorMessage = o.GetHook(), o.GetMessage()
	e.HookErrorOutputTail, e.HookErrorExitCode, e.HookErrorAttempt, e.HookErrorNextAttempt = string(o.GetOutputTail()), int(o.GetExitCode()), int(o.GetAttempt()), fromUnixNano(o.GetNextAttemptUnixNano())
	if o.GetHook() == "" {
		e.HookErrorMessage, e.HookErrorSince = "", time.Time{}
		e.HookErrorOutputTail, e.HookErrorExitCode, e.HookErrorAttempt, e.HookErrorNextAttempt = "", 0, 0, time.Time{}
	}
	t.extraTxn().Insert([]byte(o.GetUnit()), e)
	return &storepb.OpResult{}, nil
}

func (t *txn) setWorkloadVersion(o *storepb.SetWorkloadVersion) (*storepb.OpResult, *CommandError) {
	if _, err := t.liveUnit(o.GetUnit()); err != nil {
		return nil, err
	}
	if len(o.GetVersion()) > maxWorkloadVersion {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "workload version of %d bytes is over the %d byte limit", len(o.GetVersion()), maxWorkloadVersion)
	}
	e := t.extra(o.GetUnit())
	e.WorkloadVersion = o.GetVersion()
	t.extraTxn().Insert([]byte(o.GetUnit()), e)
	return &storepb.OpResult{}, nil
}

func portFromPB(p *storepb.Port) (Port, *CommandError) {
	q := Port{Endpoint: p.GetEndpoint(), From: int(p.GetFrom()), To: int(p.GetTo()), Protocol: p.GetProtocol()}
	switch {
	case q.Protocol == "icmp":
		if q.From != 0 || q.To != 0 {
			return q, opErr(storepb.ErrorCode_INVALID, "protocol \"icmp\" has no ports")
		}
	case q.Protocol == "tcp" || q.Protocol == "udp":
		if q.From < 0 || q.To > 65535 || q.From > q.To {
			return q, opErr(storepb.ErrorCode_INVALID, "invalid port range %d-%d/%s", q.From, q.To, q.Protocol)
		}
	default:
		return q, opErr(storepb.ErrorCode_INVALID, "invalid protocol %q, expected \"tcp\", \"udp\", or \"icmp\"", q.Protocol)
	}
	if q.Endpoint != "" && !ValidEndpointName(q.Endpoint) {
		return q, opErr(storepb.ErrorCode_INVALID, "invalid endpoint name %q", q.Endpoint)
	}
	return q, nil
}

func (t *txn) updatePorts(o *storepb.UpdatePorts) (*storepb.OpResult, *CommandError) {
	if _, err := t.liveUnit(o.GetUnit()); err != nil {
		return nil, err
	}
	e := t.extra(o.GetUnit())
	set := map[Port]bool{}
	for _, p := range e.Ports {
		set[p] = true
	}
	for _, p := range o.GetOpen() {
		q, err := portFromPB(p)
		if err != nil {
			return nil, err
		}
		set[q] = true
	}
	for _, p := range o.GetClose() {
		q, err := portFromPB(p)
		if err != nil {
			return nil, err
		}
		delete(set, q)
	}
	if len(set) > maxPorts {
		return nil, opErr(storepb.ErrorCode_TOO_LARGE, "unit %s would have %d port ranges open, over the limit of %d", o.GetUnit(), len(set), maxPorts)
	}
	ports := make([]Port, 0, len(set))
	for p := range set {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool {
		a, b := ports[i], ports[j]
		if a.Endpoint != b.Endpoint {
			return a.Endpoint < b.Endpoint
		}
		if a.Protocol != b.Protocol {
			return a.Protocol < b.Protocol
		}
		if a.From != b.From {
			return a.From < b.From
		}
		return a.To < b.To
	})
	e.Ports = ports
	t.extraTxn().Insert([]byte(o.GetUnit()), e)
	return &storepb.OpResult{}, nil
}

func (t *txn) releaseLease(o *storepb.ReleaseLease) (*storepb.OpResult, *CommandError) {
	if cur := t.readMeta().lease; cur.Unit == o.GetUnit() && cur.Unit != "" {
		t.m().lease = Lease{Epoch: cur.Epoch}
	}
	return &storepb.OpResult{}, nil
}
