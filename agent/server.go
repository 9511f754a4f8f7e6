package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bagkeeper/bagkeeper/agent/hooktools"
	"github.com/bagkeeper/bagkeeper/agent/toolpb"
)

// server serves the hook tools (and the remote hook runner) on the agent's
// Unix socket. Three checks guard it: the socket file is owner/group only;
// every connection's peer credentials (SO_PEERCRED) must be the agent's
// user, root, or a user allowed by configuration; and a tool call must name
// the context id of the hook running now.
type server struct {
	a    *Agent
	ln   net.Listener
	grpc *grpc.Server
}

func (a *Agent) serve() (*server, error) {
	if a.cfg.ToolsDir != "" && a.cfg.ToolBinary != "" {
		if err := InstallTools(a.cfg.ToolsDir, a.cfg.ToolBinary); err != nil {
			return nil, err
		}
	}
	s := &server{a: a, ln: &credListener{Listener: a.cfg.Listener, allowed: a.cfg.AllowedUIDs, a: a}}
	// A tool call carries up to a whole bag (16 MiB) on stdin or stdout.
	s.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(32<<20), grpc.MaxSendMsgSize(32<<20))
	toolpb.RegisterHookToolsServer(s.grpc, &toolServer{a: a})
	if rr, ok := a.cfg.Runner.(*RemoteRunner); ok {
		toolpb.RegisterHookRunnerServer(s.grpc, &runnerServer{r: rr})
	}
	go func() { _ = s.grpc.Serve(s.ln) }()
	return s, nil
}

func (s *server) close() {
	s.grpc.Stop()
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

// credListener accepts only connections from allowed users.
type credListener struct {
	net.Listener
	allowed []int
	a       *Agent
}

func (l *credListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && (uid == os.Getuid() || uid == 0 || slices.Contains(l.allowed, uid)) {
			return c, nil
		}
		l.a.log.Warn("hook tool connection refused", "uid", uid, "err", err)
		c.Close()
	}
}

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
	r *RemoteRunner
}

func (s *runnerServer) Hooks(hello *toolpb.RunnerHello, stream toolpb.HookRunner_HooksServer) error {
	queue, detach, err := s.r.attach()
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	defer detach()
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
