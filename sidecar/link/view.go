// Package link carries relations between applications: the Relations gRPC
// service a providing application serves on its relations port, and the
// consumer that a consuming application's raft leader runs, one stream per
// relation. Each side publishes its side of the relation (application bag,
// unit bags, unit membership) as a View; the receiving side commits it into
// its own raft log (state.SetRemoteViewOp), so all its units see one remote
// view and keep it while the remote application is unreachable.
//
// A View is the whole side of one relation, not a change: the state
// machine applies it as a diff and bumps the revision only of the bags that
// really changed, so a view sent twice, or again after a reconnect, fires no
// hook. A ViewMark (source, revision, digest) tells the other side what is
// already held, so nothing is sent, and nothing committed, until the side
// really differs; views older than the one applied are ignored by the state
// machine.
package link

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
	"github.com/bagkeeper/bagkeeper/sidecar/link/linkpb"
	"github.com/bagkeeper/bagkeeper/sidecar/relconf"
)

// localView returns this application's side of relation r in st: its
// application bag and every unit that is not removed, with its unit bag
// (empty when it wrote nothing). A released unit stays: its pod is being
// replaced and the unit comes back; only removal is a departure.
func localView(st *state.State, r *state.Relation, model string) *linkpb.View {
	v := &linkpb.View{Source: st.ClusterID(), Revision: st.Index(), Model: model}
	if b, ok := st.Bag(r.ID, st.App()); ok {
		v.App = b.Data.Map()
	}
	for _, u := range st.Units() {
		if u.State == state.UnitRemoved {
			continue
		}
		uv := &linkpb.UnitView{Unit: u.Name}
		if b, ok := st.Bag(r.ID, u.Name); ok {
			uv.Data = b.Data.Map()
		}
		v.Units = append(v.Units, uv)
	}
	sortUnits(v.Units)
	return v
}

// remoteMark says which view of the remote side st holds for relation r.
func remoteMark(st *state.State, r *state.Relation) *linkpb.ViewMark {
	v := &linkpb.View{Model: r.RemoteModel}
	for _, b := range st.Bags(r.ID) {
		switch app, _, ok := state.ParseUnitName(b.Owner); {
		case ok && app == r.RemoteApp:
			v.Units = append(v.Units, &linkpb.UnitView{Unit: b.Owner, Data: b.Data.Map()})
		case !ok && b.Owner == r.RemoteApp:
			v.App = b.Data.Map()
		}
	}
	sortUnits(v.Units)
	return &linkpb.ViewMark{Source: r.RemoteSource, Revision: r.RemoteRevision, Digest: digest(v)}
}

func sortUnits(units []*linkpb.UnitView) {
	slices.SortFunc(units, func(a, b *linkpb.UnitView) int { return strings.Compare(a.GetUnit(), b.GetUnit()) })
}

// digest is a hash of a view's content and model (not its source or
// revision):
// length-prefixed, keys in order, so equal content gives an equal digest.
func digest(v *linkpb.View) []byte {
	h := sha256.New()
	var n [8]byte
	str := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	bag := func(m map[string]string) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		binary.BigEndian.PutUint64(n[:], uint64(len(keys)))
		h.Write(n[:])
		for _, k := range keys {
			str(k)
			str(m[k])
		}
	}
	str(v.GetModel())
	bag(v.GetApp())
	units := slices.Clone(v.GetUnits())
	sortUnits(units)
	for _, u := range units {
		str(u.GetUnit())
		bag(u.GetData())
	}
	return h.Sum(nil)
}

// ensureRelation returns the id of the relation op (an EnsureRelation)
// makes, and commits op only when this member's state does not hold that
// relation yet: a stream opened again, after a disconnect or a leader
// change, commits nothing.
func ensureRelation(ctx context.Context, store Store, op *storepb.Op) (int64, error) {
	e := op.GetEnsureRelation()
	if r, ok := store.State().FindRelation(e.GetEndpoint(), e.GetRemoteApp(), e.GetRemoteEndpoint()); ok &&
		!r.Peer && r.Offered == e.GetOffered() && r.Interface == e.GetInterface() {
		return r.ID, nil
	}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	res, err := store.Apply(actx, state.NewCommand(op))
	if err != nil {
		return 0, err
	}
	return res.GetOps()[0].GetRelationId(), nil
}

// EntryKey is the key of the relations-file entry (relconf.Relation.Key)
// that declares the consumed relation r.
func EntryKey(r *state.Relation) string {
	return relconf.Relation{Endpoint: r.Endpoint, App: r.RemoteApp, Offer: r.RemoteEndpoint}.Key()
}

// setRemoteView is the op that commits a received view.
func setRemoteView(relationID int64, remoteApp string, v *linkpb.View) *storepb.Op {
	units := make(map[string]map[string]string, len(v.GetUnits()))
	for _, u := range v.GetUnits() {
		units[u.GetUnit()] = u.GetData()
	}
	op := state.SetRemoteViewOp(relationID, remoteApp, v.GetSource(), v.GetRevision(), v.GetApp(), units)
	op.GetSetRemoteView().RemoteModel = v.GetModel()
	return op
}
