package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/agent/hooktools"
	"github.com/bagkeeper/bagkeeper/agent/toolpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
)

// The largest messages of the hook-tool socket, which the agent and the
// tool client (cmd/jujuc, whose tests check it) must both carry.
const (
	// MaxToolRequest: a request carries at most a file or stdin of
	// hooktools.MaxFileSize (a bag's worth), and the tool's arguments,
	// which the kernel bounds to a few MiB (ARG_MAX).
	MaxToolRequest = 2 * state.MaxBagSize
	// MaxToolReply: a reply carries a tool's output, on stdout or for its
	// output file. The largest is a whole bag or the leader settings, each
	// up to MaxBagSize, as JSON or YAML, whose escapes make it up to 9
	// times larger: JSON writes '<' as \u003c, so the entry {"<":"<"} of 2
	// bytes takes 18 (with its quotes, colon and comma); YAML's worst is
	// 15 bytes for 2. The extra MiB is for the braces and the rest.
	MaxToolReply = 9*state.MaxBagSize + 1<<20
)

// server serves the hook tools (and the remote hook runner) on the agent's
// Unix socket. Three checks guard it: the socket file is owner/group only;
// every connection's peer credentials (SO_PEERCRED) must be the agent's
// user, root, or a user allowed by configuration; and a tool call must name
// the context id of the hook running now.
//
// A connection refused by the credential check is not served by the gRPC
// server that has the services: another one, with none, answers every call
// on it with PermissionDenied and a message that says why, so that the
// caller's tool prints the reason instead of "the unit agent closed the
// connection".
type server struct {
	a      *Agent
	ln     *credListener
	grpc   *grpc.Server
	refuse *grpc.Server // serves the refused connections
}

func (a *Agent) serve() (*server, error) {
	if a.cfg.ToolsDir != "" && a.cfg.ToolBinary != "" {
		if err := InstallTools(a.cfg.ToolsDir, a.cfg.ToolBinary); err != nil {
			return nil, err
		}
	}
	self, extra := os.Getuid(), slices.Clone(a.cfg.AllowedUIDs)
	allow := a.cfg.allowUID
	if allow == nil {
		allow = func(uid int) bool { return uid == self || uid == 0 || slices.Contains(extra, uid) }
	}
	refused := newConnQueue(a.cfg.Listener.Addr())
	s := &server{a: a, ln: &credListener{Listener: a.cfg.Listener, allow: allow, extra: extra, refused: refused, a: a}}
	s.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(MaxToolRequest), grpc.MaxSendMsgSize(MaxToolReply))
	toolpb.RegisterHookToolsServer(s.grpc, &toolServer{a: a})
	if rr, ok := a.cfg.Runner.(*RemoteRunner); ok {
		toolpb.RegisterHookRunnerServer(s.grpc, &runnerServer{r: rr, stopping: a.cfg.RunnerStopping, logger: a.logger()})
	}
	// No service is registered: every call, whatever its method, goes to
	// refuseCall. A refused caller gets a minute, then its connection is
	// closed.
	s.refuse = grpc.NewServer(grpc.UnknownServiceHandler(refuseCall),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: time.Minute, MaxConnectionAgeGrace: 5 * time.Second}))
	go func() { _ = s.grpc.Serve(s.ln) }()
	go func() { _ = s.refuse.Serve(refused) }()
	return s, nil
}

func (s *server) close() {
	s.ln.refused.Close() // first: the listener never waits for it again
	s.grpc.Stop()
	s.refuse.Stop()
}

// InstallTools creates a symlink per hook tool in dir, pointing at binary
// (replacing older links).
func InstallTools(dir, binary string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hook tools directory %s: %w", dir, err)
	}
	abs, err := filepath.Abs(binary)
	if err != nil {
		return err
	}
	for _, name := range hooktools.Names() {
		link := filepath.Join(dir, name)
		_ = os.Remove(link)
		if err := os.Symlink(abs, link); err != nil {
			return fmt.Errorf("hook tool %s: %w", name, err)
		}
	}
	return nil
}

// credListener returns the connections of allowed users; those of other
// users go to refused, marked with the reason.
type credListener struct {
	net.Listener
	allow   func(uid int) bool
	extra   []int // Config.AllowedUIDs, for the message
	refused *connQueue
	a       *Agent
}

func (l *credListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && l.allow(uid) {
			return c, nil
		}
		l.a.logger().Warn("hook tool connection refused", "uid", uid, "err", err)
		l.refused.put(&refusedConn{Conn: c, why: l.refusal(uid, err)})
	}
}

// refusal is the message of a caller refused: its uid, and who may call.
func (l *credListener) refusal(uid int, err error) string {
	if err != nil {
		return "permission denied: cannot tell which user called the unit agent's socket: " + err.Error()
	}
	allowed := fmt.Sprintf("the agent's uid %d and root; bagkeeper run --hook-uids allows others", os.Getuid())
	if len(l.extra) > 0 {
		uids := make([]string, len(l.extra))
		for i, u := range l.extra {
			uids[i] = strconv.Itoa(u)
		}
		allowed = fmt.Sprintf("the agent's uid %d, root, and --hook-uids %s", os.Getuid(), strings.Join(uids, ","))
	}
	return fmt.Sprintf("permission denied: uid %d may not use the unit agent's socket (allowed: %s)", uid, allowed)
}

// refusedConn is a refused connection. Its remote address carries the
// reason, which is how refuseCall finds it (as the peer's address).
type refusedConn struct {
	net.Conn
	why string
}

func (c *refusedConn) RemoteAddr() net.Addr { return refusedAddr{c.Conn.RemoteAddr(), c.why} }

type refusedAddr struct {
	net.Addr
	why string
}

// refuseCall answers any call on a refused connection.
func refuseCall(_ any, stream grpc.ServerStream) error {
	why := "permission denied"
	if p, ok := peer.FromContext(stream.Context()); ok {
		if a, ok := p.Addr.(refusedAddr); ok {
			why = a.why
		}
	}
	return status.Error(codes.PermissionDenied, why)
}

// connQueue is a net.Listener whose connections are handed to it by put.
type connQueue struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// put hands c to Accept; once the queue is closed, it closes c instead.
func (q *connQueue) put(c net.Conn) {
	select {
	case q.conns <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

func peerUID(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, errors.New("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if serr != nil {
		return -1, serr
	}
	return int(cred.Uid), nil
}

type toolServer struct {
	toolpb.UnimplementedHookToolsServer
	a *Agent
}

func (t *toolServer) Run(ctx context.Context, req *toolpb.RunRequest) (*toolpb.RunResponse, error) {
	if req.GetCommand() == "" {
		return nil, status.Error(codes.InvalidArgument, "bad request: command not specified")
	}
	if !filepath.IsAbs(req.GetDir()) {
		return nil, status.Error(codes.InvalidArgument, "bad request: Dir is not absolute")
	}
	hc := t.a.running.Load()
	if hc == nil || hc.id != req.GetContextId() {
		return nil, status.Errorf(codes.PermissionDenied, "bad request: bad context: %s", req.GetContextId())
	}
	resp, err := hooktools.Run(hc, hooktools.Request{
		Command: req.GetCommand(), Args: req.GetArgs(), Dir: req.GetDir(),
		Stdin: req.GetStdin(), StdinSet: req.GetStdinSet(),
		ClientFiles: req.GetClientFiles(),
		FilePath:    string(req.GetFilePath()), File: req.GetFile(), FileErr: string(req.GetFileError()),
	})
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "bad request: %v", err)
	}
	return &toolpb.RunResponse{
		Code: int32(resp.Code), Stdout: resp.Stdout, Stderr: resp.Stderr,
		NeedStdin: resp.NeedStdin, NeedFile: []byte(resp.NeedFile),
		OutputPath: []byte(resp.OutputPath), Output: resp.Output,
	}, nil
}

type runnerServer struct {
	toolpb.UnimplementedHookRunnerServer
	r        *RemoteRunner
	stopping func(ctx context.Context)
	logger   *slog.Logger
}

func (s *runnerServer) Stopping(ctx context.Context, hello *toolpb.RunnerHello) (*toolpb.DoneAck, error) {
	s.logger.Info("the hook runner's container is stopping; running the stop hook", "runner", hello.GetName())
	if s.stopping != nil {
		s.stopping(ctx)
	}
	return &toolpb.DoneAck{}, nil
}

func (s *runnerServer) Hooks(hello *toolpb.RunnerHello, stream toolpb.HookRunner_HooksServer) error {
	queue, detach, err := s.r.attach()
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	defer detach()
	// The header tells the runner at once that it is attached.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case h := <-queue:
			if err := stream.Send(h); err != nil {
				return err
			}
		}
	}
}

func (s *runnerServer) Done(ctx context.Context, res *toolpb.HookResult) (*toolpb.DoneAck, error) {
	if err := s.r.done(res); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &toolpb.DoneAck{}, nil
}
