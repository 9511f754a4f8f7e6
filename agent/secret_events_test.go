package agent

import (
	"testing"
	"time"

	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

func sealedForTest(text string) *storepb.SealedContent {
	return &storepb.SealedContent{KeyId: []byte("keyid-aa"), Nonce: make([]byte, 12), Ciphertext: []byte(text)}
}

func TestSecretEventsForOwnersAndConsumers(t *testing.T) {
	w := newWorld(t)
	w.units(2)
	rel := w.peers()
	w.lead("app/0")
	a0 := &unitAgent{w: w, unit: "app/0", pod: "p0", config: "c"}
	a1 := &unitAgent{w: w, unit: "app/1", pod: "p1", config: "c"}
	a0.drain()
	a1.drain()
	const id = "cu3kq1rt4g0s73b0abcd"
	w.do(state.CreateSecretOp(id, "app/0", "db", "", "", time.Time{}, sealedForTest("1")),
		state.GrantSecretOp(id, "app/0", rel, "app/1"), state.TrackSecretOp(id, "app/1", 1, true, "mine"))
	expectHooks(t, a0.drain())
	expectHooks(t, a1.drain())

	// A new revision: the consumer is told once; the owner is not told of
	// revision 1 while the consumer follows it.
	w.do(state.UpdateSecretOp(&storepb.UpdateSecret{Id: id, Owner: "app/0", Content: sealedForTest("2")}))
	h, ok := Next(a1.view(), a1.cur)
	if !ok || h.Name != HookSecretChanged || h.Secret.ID != id || h.Secret.Label != "mine" || h.Secret.Revision != 0 {
		t.Fatalf("consumer's next hook: %+v", h)
	}
	expectHooks(t, a1.drain(), "secret-changed")
	expectHooks(t, a1.drain())
	expectHooks(t, a0.drain())

	// The consumer refreshes: revision 1 is followed by no one.
	w.do(state.TrackSecretOp(id, "app/1", 2, false, ""))
	h, _ = Next(a0.view(), a0.cur)
	if h.Name != HookSecretRemove || h.Secret.Revision != 1 || h.Secret.Label != "db" {
		t.Fatalf("owner's next hook: %+v", h)
	}
	expectHooks(t, a0.drain(), "secret-remove")
	expectHooks(t, a1.drain())

	// An application secret expires: only the leader is told, once.
	const app = "cu3kq1rt4g0s73b0abce"
	w.do(state.CreateSecretOp(app, "app", "", "", "", t0.Add(30*time.Second), sealedForTest("a")))
	expectHooks(t, a0.drain())
	w.Advance(40 * time.Second)
	expectHooks(t, a0.drain(), "secret-expired")
	expectHooks(t, a1.drain())

	// Rotation is due for the owner until the hook's commit reschedules it.
	w.do(state.UpdateSecretOp(&storepb.UpdateSecret{Id: id, Owner: "app/0", SetRotatePolicy: true, RotatePolicy: "hourly"}))
	expectHooks(t, a0.drain())
	w.Advance(time.Hour)
	w.lead("app/0")
	h, ok = Next(a0.view(), a0.cur)
	if !ok || h.Name != HookSecretRotate || h.Secret.ID != id {
		t.Fatalf("owner's next hook: %+v", h)
	}
	w.do(state.SecretRotatedOp(id, h.Secret.Due))
	if h, _ := Next(a0.view(), a0.cur); h.Name == HookSecretRotate {
		t.Fatal("the rotation is still due after its hook committed")
	}
}
