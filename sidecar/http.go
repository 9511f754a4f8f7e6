package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/bagkeeper/bagkeeper/agent"
	"github.com/bagkeeper/bagkeeper/raftstore"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/sidecar/adminpb"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxLeaderSilence is how long a follower may go without hearing from the
// leader and still call itself ready.
const maxLeaderSilence = 5 * time.Second

// catchUpGrace is how long a member that had caught up may trail the
// commit index before it counts as behind again.
const catchUpGrace = 2 * time.Second

// readinessSource is what readiness needs to know of the raft member.
type readinessSource interface {
	Status() raftstore.Status
	CaughtUp(index uint64) bool
	State() *state.State
}

// readiness decides whether the pod is ready: it holds its unit and its
// state machine has caught up with the leader's commit index.
type readiness struct {
	src      readinessSource
	caughtUp atomic.Int64 // when the member last had applied all committed entries (unix nanos)
}

// check reports whether a member holding unit (as member id) is ready, and
// if not, why.
func (r *readiness) check(member, unit string, now time.Time) (bool, string) {
	st := r.src.Status()
	if st.Damage != nil {
		return false, st.Damage.String()
	}
	if st.Diverged != "" {
		return false, st.Diverged
	}
	if st.WriteFailure != nil {
		return false, st.WriteFailure.String()
	}
	if st.Outdated != "" {
		return false, st.Outdated
	}
	if unit == "" {
		if st.LeaderAddress == "" {
			return false, "no leader known yet (bootstrapping or looking for the cluster; see the log)"
		}
		return false, "no unit claimed yet"
	}
	if held, ok := r.src.State().UnitHeldBy(member); !ok || held.Name != unit {
		return false, "unit " + unit + " is not held by this member"
	}
	if !st.IsLeader() {
		if st.LeaderAddress == "" {
			return false, "no leader known"
		}
		if st.LastContact.IsZero() || now.Sub(st.LastContact) > maxLeaderSilence {
			return false, "not heard from the leader recently"
		}
	}
	// A member is caught up when its state machine has applied everything
	// committed. A leader's commit index and a follower's trail the newest
	// write by a few entries under a stream of writes; only a lag that lasts
	// means the member is not caught up (a member that just joined, or that
	// is replaying its log after a restart, never was).
	if r.src.CaughtUp(st.LeaderCommitIndex) {
		r.caughtUp.Store(now.UnixNano())
		return true, ""
	}
	if last := r.caughtUp.Load(); last == 0 || now.Sub(time.Unix(0, last)) > catchUpGrace {
		return false, fmt.Sprintf("catching up: the state machine has applied %d of the leader's %d", st.StateIndex, st.LeaderCommitIndex)
	}
	return true, ""
}

// Ready reports whether this pod holds its unit and its state machine has
// caught up with the leader's commit index; if not, it says why.
func (s *Sidecar) Ready() (bool, string) {
	if lost := s.unitLost.Load().(string); lost != "" {
		return false, lost
	}
	if w := s.waiting.Load().(string); w != "" && s.Unit() == "" {
		return false, w
	}
	ok, why := s.ready.check(string(s.node.ID()), s.Unit(), time.Now())
	if ok && s.agent != nil {
		// Once caught up: a unit agent that cannot read the application's
		// secrets does not start (a pod of an application with secrets
		// needs the key its secrets were sealed with).
		if err := agent.CheckSecretsKey(s.node.State(), s.secretsKey); err != nil {
			if !s.secretsKeyLogged.Swap(true) {
				s.log.Error("secrets key check failed", "err", err)
			}
			return false, "the unit agent does not start: " + err.Error()
		}
	}
	return ok, why
}

func (s *Sidecar) startHTTP() error {
	if s.cfg.HTTPBind == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		// Alive means the process serves requests; it never depends on
		// leadership or peers (restarting a pod cannot fix those).
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := s.Ready(); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready: %s\n", s.Unit())
	})
	mux.HandleFunc("GET /startupz", func(w http.ResponseWriter, r *http.Request) {
		// Started means every socket is up: the hook tools' socket that
		// a charm container's hook runner connects to, and the admin
		// socket. A native sidecar's startup probe holds the pod's other
		// containers back until then.
		if !s.started.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "started")
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		// What `bagkeeper status` shows, read-only, for a client outside
		// the pod (the chart's `helm test` pod): members, units and
		// relations, never a bag's content.
		if !s.started.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		st, err := s.adminAPI.Status(ctx, &adminpb.StatusRequest{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		b, err := protojson.Marshal(st)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	if s.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", s.cfg.HTTPBind)
	if err != nil {
		return fmt.Errorf("--http-bind %s: %w", s.cfg.HTTPBind, err)
	}
	s.httpLn = ln
	s.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// HTTPAddr returns the address the probe and metrics server listens on.
func (s *Sidecar) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}
