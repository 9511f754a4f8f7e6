package sidecar

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxLeaderSilence is how long a follower may go without hearing from the
// leader and still call itself ready.
const maxLeaderSilence = 5 * time.Second

// Ready reports whether this pod holds its unit and its state machine has
// caught up with the leader's commit index; if not, it says why.
func (s *Sidecar) Ready() (bool, string) {
	if lost := s.unitLost.Load().(string); lost != "" {
		return false, lost
	}
	unit := s.Unit()
	if unit == "" {
		if _, addr := s.node.Leader(); addr == "" {
			return false, "no leader known yet (bootstrapping or looking for the cluster; see the log)"
		}
		return false, "no unit claimed yet"
	}
	st := s.node.State()
	if held, ok := st.UnitHeldBy(string(s.node.ID())); !ok || held.Name != unit {
		return false, "unit " + unit + " is not held by this member"
	}
	r := s.node.Raft()
	if !s.node.IsLeader() {
		if _, addr := s.node.Leader(); addr == "" {
			return false, "no leader known"
		}
		if last := r.LastContact(); last.IsZero() || time.Since(last) > maxLeaderSilence {
			return false, "not heard from the leader recently"
		}
	}
	// A member is caught up when its state machine has applied everything
	// committed. A leader's commit index and a follower's trail the newest
	// write by a few entries under a stream of writes; only a lag that lasts
	// means the member is not caught up (a member that just joined, or that
	// is replaying its log after a restart, never was).
	now := time.Now()
	commit := r.CommitIndex()
	if s.node.CaughtUp(commit) {
		s.caughtUp.Store(now.UnixNano())
		return true, ""
	}
	if last := s.caughtUp.Load(); last == 0 || now.Sub(time.Unix(0, last)) > catchUpGrace {
		return false, fmt.Sprintf("catching up: the state machine has applied %d of %d", s.node.StateIndex(), commit)
	}
	return true, ""
}

// catchUpGrace is how long a member that had caught up may trail the
// commit index before it counts as behind again.
const catchUpGrace = 2 * time.Second

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
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
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
