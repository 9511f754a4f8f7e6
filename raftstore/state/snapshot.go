package state

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// SnapshotVersion is the snapshot format this build writes and reads.
// Version 2 adds client sessions, waiting claimants, unit epochs and a
// checksum.
const SnapshotVersion = 2

// maxSnapshotRecord bounds one record; the biggest is a full bag.
const maxSnapshotRecord = MaxBagSize + 1<<20

// WriteSnapshot streams s to w as length-delimited SnapshotRecord messages:
// a header, one record per relation, bag, unit, charm state, cursor,
// status, unit extras, client session, waiting claimant and secret (its
// content sealed, see secrets.go), and an end
// record carrying the count and a CRC-32C of everything before it, so that
// a truncated or damaged snapshot is refused on restore. Memory use is one
// record at a time. The encoding is deterministic: the same State always
// gives the same bytes (HashState relies on it).
func WriteSnapshot(w io.Writer, s *State) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	hw := &crcWriter{w: bw}
	var n uint64
	enc := protodelim.MarshalOptions{MarshalOptions: proto.MarshalOptions{Deterministic: true}}
	put := func(r *storepb.SnapshotRecord) error {
		n++
		_, err := enc.MarshalTo(hw, r)
		return err
	}
	m := s.meta
	hdr := &storepb.SnapshotHeader{
		Version:                   SnapshotVersion,
		App:                       m.app,
		ClusterId:                 m.clusterID,
		NextUnit:                  m.nextUnit,
		NextRelation:              m.nextRelation,
		LeaderSettings:            m.leader.Map(),
		LeaderSettingsRevision:    m.leaderRev,
		Lease:                     leaseToPB(m.lease),
		Index:                     s.index,
		SessionsSweptUnixNano:     unixNano(m.sessionsSwept),
		Generation:                m.generation,
		GenerationPlan:            m.generationPlan,
		GenerationStartedUnixNano: unixNano(m.generationStarted),
	}
	if err := put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Header{Header: hdr}}); err != nil {
		return err
	}
	for _, r := range s.Relations() {
		rec := &storepb.RelationRecord{Id: r.ID, Endpoint: r.Endpoint, Interface: r.Interface, Peer: r.Peer, RemoteApp: r.RemoteApp, RemoteEndpoint: r.RemoteEndpoint, CreatedUnixNano: unixNano(r.Created),
			Offered: r.Offered, RemoteSource: r.RemoteSource, RemoteRevision: r.RemoteRevision, RemoteModel: r.RemoteModel}
		if err := put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Relation{Relation: rec}}); err != nil {
			return err
		}
	}
	var err error
	walk(s.bags, func(_ []byte, b *Bag) bool {
		rec := &storepb.BagRecord{RelationId: b.RelationID, Owner: b.Owner, Data: b.Data.Map(), Revision: b.Revision, ModifiedIndex: b.ModifiedIndex}
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Bag{Bag: rec}})
		return err == nil
	})
	if err != nil {
		return err
	}
	for _, u := range s.Units() {
		if err := put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Unit{Unit: unitToPB(u)}}); err != nil {
			return err
		}
	}
	walk(s.charm, func(k []byte, v Settings) bool {
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_CharmState{CharmState: &storepb.CharmStateRecord{Unit: string(k), Data: v.Map()}}})
		return err == nil
	})
	if err != nil {
		return err
	}
	walk(s.cursors, func(k []byte, v []byte) bool {
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Cursor{Cursor: &storepb.CursorRecord{Unit: string(k), Cursor: v}}})
		return err == nil
	})
	if err != nil {
		return err
	}
	walk(s.statuses, func(_ []byte, v *Status) bool {
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Status{Status: &storepb.StatusRecord{Owner: v.Owner, Status: v.Status, Message: v.Message, DataJson: v.DataJSON, SinceUnixNano: unixNano(v.Since)}}})
		return err == nil
	})
	if err != nil {
		return err
	}
	walk(s.extras, func(k []byte, v *UnitExtra) bool {
		rec := &storepb.UnitExtraRecord{Unit: string(k), WorkloadVersion: v.WorkloadVersion, HookError: v.HookError, HookErrorMessage: v.HookErrorMessage, HookErrorSinceUnixNano: unixNano(v.HookErrorSince)}
		rec.HookErrorOutputTail, rec.HookErrorExitCode, rec.HookErrorAttempt, rec.HookErrorNextAttemptUnixNano = []byte(v.HookErrorOutputTail), int32(v.HookErrorExitCode), uint32(v.HookErrorAttempt), unixNano(v.HookErrorNextAttempt)
		rec.RetryRequests = v.RetryRequests
		for _, h := range v.History {
			rec.History = append(rec.History, hookRecordPB(h))
		}
		for _, p := range v.Ports {
			rec.Ports = append(rec.Ports, &storepb.Port{Endpoint: p.Endpoint, From: int32(p.From), To: int32(p.To), Protocol: p.Protocol})
		}
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_UnitExtra{UnitExtra: rec}})
		return err == nil
	})
	if err != nil {
		return err
	}
	walk(s.sessions, func(k []byte, v *session) bool {
		rec := &storepb.SessionRecord{ClientId: string(k), LastActiveUnixNano: unixNano(v.lastActive), LowestPending: v.lowestPending}
		for _, r := range v.results() {
			var res storepb.Result
			if uerr := proto.Unmarshal(r.result, &res); uerr != nil {
				err = uerr
				return false
			}
			rec.Results = append(rec.Results, &storepb.SessionResult{Sequence: r.seq, Result: &res})
		}
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Session{Session: rec}})
		return err == nil
	})
	if err != nil {
		return err
	}
	walk(s.divergent, func(_ []byte, d *Divergence) bool {
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Divergence{Divergence: &storepb.DivergenceRecord{MemberId: d.Member, Index: d.Index, Hash: d.Hash, Expected: d.Expected, SinceUnixNano: unixNano(d.Since)}}})
		return err == nil
	})
	if err != nil {
		return err
	}
	walk(s.claimants, func(_ []byte, c *Claimant) bool {
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Claimant{Claimant: &storepb.ClaimantRecord{MemberId: c.Member, Pod: c.Pod, SinceUnixNano: unixNano(c.Since)}}})
		return err == nil
	})
	if err != nil {
		return err
	}
	// Secrets (secrets.go): their content stays sealed.
	walk(s.secrets, func(_ []byte, v *Secret) bool {
		err = put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_Secret{Secret: secretToPB(v)}})
		return err == nil
	})
	if err != nil {
		return err
	}
	if err := writeActions(s, put); err != nil { // actions.go
		return err
	}
	if err := put(&storepb.SnapshotRecord{Record: &storepb.SnapshotRecord_End{End: &storepb.SnapshotEnd{Records: n + 1, Crc32C: hw.sum}}}); err != nil {
		return err
	}
	return bw.Flush()
}

// ReadSnapshot reads a stream written by WriteSnapshot into a new State.
func ReadSnapshot(r io.Reader) (*State, error) {
	br := &crcReader{r: bufio.NewReaderSize(r, 64<<10)}
	opts := protodelim.UnmarshalOptions{MaxSize: maxSnapshotRecord}
	s := newState()
	rel, bags, units := s.relations.Txn(), s.bags.Txn(), s.units.Txn()
	charm, cursors, sessions, claimants := s.charm.Txn(), s.cursors.Txn(), s.sessions.Txn(), s.claimants.Txn()
	divergent := s.divergent.Txn()
	statuses, extras := s.statuses.Txn(), s.extras.Txn()
	secrets := s.secrets.Txn()
	actions := s.actions.Txn() // actions.go
	var n uint64
	sawHeader := false
	for {
		var rec storepb.SnapshotRecord
		before := br.sum
		if err := opts.UnmarshalFrom(br, &rec); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("snapshot ends after %d records without its end record (truncated?)", n)
			}
			return nil, fmt.Errorf("snapshot record %d: %w", n+1, err)
		}
		n++
		if !sawHeader {
			h := rec.GetHeader()
			if h == nil {
				return nil, errors.New("snapshot does not start with a header")
			}
			if h.GetVersion() != SnapshotVersion {
				return nil, fmt.Errorf("snapshot format version %d is not supported by this bagkeeper (it reads version %d)", h.GetVersion(), SnapshotVersion)
			}
			s.index = h.GetIndex()
			s.meta = &meta{
				app: h.GetApp(), clusterID: h.GetClusterId(),
				nextUnit: h.GetNextUnit(), nextRelation: h.GetNextRelation(),
				leader: SettingsOf(h.GetLeaderSettings()), leaderRev: h.GetLeaderSettingsRevision(),
				lease:         leaseFromPB(h.GetLease()),
				sessionsSwept: fromUnixNano(h.GetSessionsSweptUnixNano()),
				generation:    h.GetGeneration(), generationPlan: h.GetGenerationPlan(),
				generationStarted: fromUnixNano(h.GetGenerationStartedUnixNano()),
			}
			sawHeader = true
			continue
		}
		switch x := rec.GetRecord().(type) {
		case *storepb.SnapshotRecord_Relation:
			r := x.Relation
			rel.Insert(relKey(r.GetId()), &Relation{ID: r.GetId(), Endpoint: r.GetEndpoint(), Interface: r.GetInterface(), Peer: r.GetPeer(), RemoteApp: r.GetRemoteApp(), RemoteEndpoint: r.GetRemoteEndpoint(), Created: fromUnixNano(r.GetCreatedUnixNano()),
				Offered: r.GetOffered(), RemoteSource: r.GetRemoteSource(), RemoteRevision: r.GetRemoteRevision(), RemoteModel: r.GetRemoteModel()})
		case *storepb.SnapshotRecord_Bag:
			// A bag with no data is restored all the same: a remote unit's
			// bag, even empty, is what makes the unit a member of its relation.
			b := x.Bag
			data := SettingsOf(b.GetData())
			bags.Insert(bagKey(b.GetRelationId(), b.GetOwner()), &Bag{RelationID: b.GetRelationId(), Owner: intern(b.GetOwner()), Data: data, Revision: b.GetRevision(), ModifiedIndex: b.GetModifiedIndex()})
		case *storepb.SnapshotRecord_Unit:
			u := unitFromPB(x.Unit)
			units.Insert(numKey(u.Number), u)
		case *storepb.SnapshotRecord_CharmState:
			charm.Insert([]byte(x.CharmState.GetUnit()), SettingsOf(x.CharmState.GetData()))
		case *storepb.SnapshotRecord_Cursor:
			cursors.Insert([]byte(x.Cursor.GetUnit()), x.Cursor.GetCursor())
		case *storepb.SnapshotRecord_Session:
			x2 := x.Session
			var results []sessionResult
			for _, r := range x2.GetResults() {
				enc, err := proto.Marshal(r.GetResult())
				if err != nil {
					return nil, err
				}
				results = append(results, sessionResult{seq: r.GetSequence(), result: enc})
			}
			sessions.Insert([]byte(x2.GetClientId()), newSession(fromUnixNano(x2.GetLastActiveUnixNano()), x2.GetLowestPending(), results))
		case *storepb.SnapshotRecord_Divergence:
			d := x.Divergence
			divergent.Insert([]byte(d.GetMemberId()), &Divergence{Member: d.GetMemberId(), Index: d.GetIndex(), Hash: d.GetHash(), Expected: d.GetExpected(), Since: fromUnixNano(d.GetSinceUnixNano())})
		case *storepb.SnapshotRecord_Claimant:
			c := x.Claimant
			claimants.Insert([]byte(c.GetMemberId()), &Claimant{Member: c.GetMemberId(), Pod: c.GetPod(), Since: fromUnixNano(c.GetSinceUnixNano())})
		case *storepb.SnapshotRecord_Status:
			st := x.Status
			statuses.Insert([]byte(st.GetOwner()), &Status{Owner: st.GetOwner(), Status: st.GetStatus(), Message: st.GetMessage(), DataJSON: st.GetDataJson(), Since: fromUnixNano(st.GetSinceUnixNano())})
		case *storepb.SnapshotRecord_UnitExtra:
			e := x.UnitExtra
			ue := &UnitExtra{WorkloadVersion: e.GetWorkloadVersion(), HookError: e.GetHookError(), HookErrorMessage: e.GetHookErrorMessage(), HookErrorSince: fromUnixNano(e.GetHookErrorSinceUnixNano())}
			ue.HookErrorOutputTail, ue.HookErrorExitCode, ue.HookErrorAttempt, ue.HookErrorNextAttempt = string(e.GetHookErrorOutputTail()), int(e.GetHookErrorExitCode()), int(e.GetHookErrorAttempt()), fromUnixNano(e.GetHookErrorNextAttemptUnixNano())
			ue.RetryRequests = e.GetRetryRequests()
			for _, h := range e.GetHistory() {
				ue.History = append(ue.History, hookRecordFromPB(h))
			}
			for _, p := range e.GetPorts() {
				ue.Ports = append(ue.Ports, Port{Endpoint: p.GetEndpoint(), From: int(p.GetFrom()), To: int(p.GetTo()), Protocol: p.GetProtocol()})
			}
			extras.Insert([]byte(e.GetUnit()), ue)
		case *storepb.SnapshotRecord_Secret:
			secrets.Insert([]byte(x.Secret.GetId()), secretFromPB(x.Secret))
		case *storepb.SnapshotRecord_Action: // actions.go
			a := actionFromPB(x.Action)
			actions.Insert(numKey(a.ID), a)
		case *storepb.SnapshotRecord_End:
			if x.End.GetRecords() != n {
				return nil, fmt.Errorf("snapshot end record counts %d records, read %d", x.End.GetRecords(), n)
			}
			if x.End.GetCrc32C() != before {
				return nil, fmt.Errorf("snapshot: %w: CRC-32C of its %d records is %08x, its end record says %08x", ErrCorrupt, n-1, before, x.End.GetCrc32C())
			}
			s.relations, s.bags, s.units = rel.CommitOnly(), bags.CommitOnly(), units.CommitOnly()
			s.charm, s.cursors, s.sessions, s.claimants = charm.CommitOnly(), cursors.CommitOnly(), sessions.CommitOnly(), claimants.CommitOnly()
			s.statuses, s.extras = statuses.CommitOnly(), extras.CommitOnly()
			s.divergent = divergent.CommitOnly()
			s.secrets = secrets.CommitOnly()
			s.actions = actions.CommitOnly() // actions.go
			s.bagsOf = bagsChangedAt(s.bags)
			return s, nil
		default:
			return nil, fmt.Errorf("snapshot record %d is of a kind this bagkeeper does not know (written by a newer version?)", n)
		}
	}
}

// bagsChangedAt builds State.bagsOf for a restored state: each owner's
// latest bag change that its bags still show.
func bagsChangedAt(bags *iradix.Tree[*Bag]) *iradix.Tree[uint64] {
	latest := map[string]uint64{}
	walk(bags, func(_ []byte, b *Bag) bool {
		latest[b.Owner] = max(latest[b.Owner], b.ModifiedIndex)
		return true
	})
	of := iradix.New[uint64]().Txn()
	for owner, i := range latest {
		of.Insert([]byte(owner), i)
	}
	return of.CommitOnly()
}

func walk[T any](t *iradix.Tree[T], fn func(k []byte, v T) bool) {
	it := t.Root().Iterator()
	for k, v, ok := it.Next(); ok; k, v, ok = it.Next() {
		if !fn(k, v) {
			return
		}
	}
}

func leaseToPB(l Lease) *storepb.Lease {
	return &storepb.Lease{Unit: l.Unit, MemberId: l.Member, AcquiredUnixNano: unixNano(l.Acquired), ExpiresUnixNano: unixNano(l.Expires), Epoch: l.Epoch}
}

func leaseFromPB(l *storepb.Lease) Lease {
	return Lease{Unit: l.GetUnit(), Member: l.GetMemberId(), Acquired: fromUnixNano(l.GetAcquiredUnixNano()), Expires: fromUnixNano(l.GetExpiresUnixNano()), Epoch: l.GetEpoch()}
}

func unitToPB(u *Unit) *storepb.UnitRecord {
	return &storepb.UnitRecord{
		Name: u.Name, Number: u.Number, State: storepb.UnitState(u.State), MemberId: u.Member, Pod: u.Pod,
		CreatedUnixNano: unixNano(u.Created), ClaimedUnixNano: unixNano(u.Claimed),
		ReleasedUnixNano: unixNano(u.Released), RemovedUnixNano: unixNano(u.Removed), Reason: u.Reason, ByOrdinal: u.ByOrdinal,
		Epoch: u.Epoch,
	}
}

func unitFromPB(u *storepb.UnitRecord) *Unit {
	return &Unit{
		Name: u.GetName(), Number: u.GetNumber(), State: UnitState(u.GetState()), Member: u.GetMemberId(), Pod: u.GetPod(),
		Created: fromUnixNano(u.GetCreatedUnixNano()), Claimed: fromUnixNano(u.GetClaimedUnixNano()),
		Released: fromUnixNano(u.GetReleasedUnixNano()), Removed: fromUnixNano(u.GetRemovedUnixNano()), Reason: u.GetReason(), ByOrdinal: u.GetByOrdinal(),
		Epoch: u.GetEpoch(),
	}
}

// crcWriter computes the CRC-32C of what it writes.
type crcWriter struct {
	w   io.Writer
	sum uint32
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.sum = crc32.Update(c.sum, castagnoli, p[:n])
	return n, err
}

// crcReader computes the CRC-32C of what is read through it.
type crcReader struct {
	r   *bufio.Reader
	sum uint32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.sum = crc32.Update(c.sum, castagnoli, p[:n])
	return n, err
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.sum = crc32.Update(c.sum, castagnoli, []byte{b})
	}
	return b, err
}
