//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pgServer is a PostgreSQL server the test started on a loopback address of
// its own, with a superuser that logs in with a password and every
// statement in its log.
type pgServer struct {
	t        *testing.T
	bin      string // the server's bin directory (initdb, postgres)
	psql     string
	host     string
	port     int
	password string // of the superuser postgres
	dir      string // owned by the server's user: data, log
	logFile  string
	proc     *exec.Cmd
	exited   chan struct{}
}

// pgBinDir finds the bin directory of an installed PostgreSQL server: the
// newest of Debian's /usr/lib/postgresql/<version>/bin, or the directory of
// an initdb on PATH that has postgres beside it ("" when there is none).
func pgBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(r))
		}
	}
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// startPostgres initdbs a new cluster in a temporary directory and runs its
// server on a fresh loopback address and a free port, as an unprivileged
// user (PostgreSQL refuses to run as root), with log_statement=all. It
// returns once the server accepts the superuser's connections, and stops
// it when the test ends. The test is skipped when no PostgreSQL server is
// installed (Debian: apt-get install postgresql).
func startPostgres(t *testing.T) *pgServer {
	t.Helper()
	bin := pgBinDir()
	if bin == "" {
		t.Skip("PostgreSQL server binaries (initdb, postgres) are not installed; Debian: apt-get install postgresql")
	}
	s := &pgServer{t: t, bin: bin, password: randHex(12), exited: make(chan struct{})}
	// The charm runs psql from PATH; the workload uses the server's own
	// when it has one.
	s.psql = filepath.Join(bin, "psql")
	if !isExecutable(s.psql) {
		p, err := exec.LookPath("psql")
		if err != nil {
			t.Fatalf("PostgreSQL's server is installed in %s but psql is not (Debian: postgresql-client)", bin)
		}
		s.psql = p
	}
	if _, err := exec.LookPath("psql"); err != nil {
		t.Setenv("PATH", os.Getenv("PATH")+string(os.PathListSeparator)+filepath.Dir(s.psql))
	}

	// Not t.TempDir: the server's user must be able to reach its
	// directory, and the test's temporary directories are root's, 0700.
	dir, err := os.MkdirTemp("", "bk-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s.dir = dir
	s.logFile = filepath.Join(dir, "server.log")
	cred := s.credential()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(s.password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{dir, pwFile} {
		if cred != nil {
			if err := os.Chown(f, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := s.command(context.Background(), "initdb", "-D", data, "-U", "postgres", "--pwfile", pwFile,
		"--auth-host", "scram-sha-256", "--auth-local", "reject", "--no-locale", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	// Password logins over TCP from any loopback address, nothing else.
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte("host all all 127.0.0.0/8 scram-sha-256\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	s.host = allocSubnet(t) + "1"
	s.port = freePort(t, s.host)
	logF, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s.proc = s.command(context.Background(), "postgres", "-D", data,
		"-c", "listen_addresses="+s.host,
		"-c", "port="+strconv.Itoa(s.port),
		"-c", "unix_socket_directories=",
		"-c", "log_statement=all",
		"-c", "log_line_prefix=%m [%p] %q%u@%d ",
		"-c", "log_destination=stderr",
		"-c", "logging_collector=off",
		"-c", "fsync=off",
		"-c", "max_connections=50")
	s.proc.Stdout, s.proc.Stderr = logF, logF
	// The server dies with the test binary, whatever happens to it.
	s.proc.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := s.proc.Start(); err != nil {
		logF.Close()
		t.Fatalf("starting postgres: %v", err)
	}
	go func() {
		_ = s.proc.Wait()
		logF.Close()
		close(s.exited)
	}()
	t.Cleanup(s.stop)
	waitFor(t, startTimeout, fmt.Sprintf("PostgreSQL at %s:%d to accept the superuser", s.host, s.port), func() (bool, string) {
		select {
		case <-s.exited:
			t.Fatalf("postgres exited: %s\n%s", s.proc.ProcessState, lastLines(s.log(), 20))
		default:
		}
		out, err := s.query("select 1")
		return err == nil && out == "1", fmt.Sprint(out, err)
	})
	t.Logf("PostgreSQL (%s) at %s:%d, log in %s", bin, s.host, s.port, s.logFile)
	return s
}

// credential is the user the server runs as when the test runs as root
// (nil otherwise: the test's own user).
func (s *pgServer) credential() *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	s.t.Fatal("running as root, and neither user postgres nor nobody exists to run PostgreSQL as")
	return nil
}

// command runs one of the server's programs as the server's user.
func (s *pgServer) command(ctx context.Context, prog string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, prog), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LANG=C", "LC_ALL=C", "HOME=" + s.dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.credential()}
	return cmd
}

// stop shuts the server down (fast shutdown: SIGINT), or kills it if it
// does not stop within 20 s.
func (s *pgServer) stop() {
	if s.proc == nil || s.proc.Process == nil {
		return
	}
	_ = s.proc.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		s.t.Errorf("PostgreSQL did not stop within 20s of SIGINT; killing it")
		_ = syscall.Kill(-s.proc.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
}

// adminDSN is the superuser's libpq connection string.
func (s *pgServer) adminDSN() string {
	return fmt.Sprintf("host=%s port=%d user=postgres password=%s dbname=postgres connect_timeout=5", s.host, s.port, s.password)
}

// query runs sql as the superuser and returns its output (unaligned, tuples
// only, trimmed).
func (s *pgServer) query(sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.psql, "-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-d", s.adminDSN(), "-c", sql)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=5")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("psql %q: %v: %s", sql, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// mustQuery is query failing the test on error.
func (s *pgServer) mustQuery(sql string) string {
	s.t.Helper()
	out, err := s.query(sql)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// connect logs in as a consumer would, with the credentials of a creds line
// ("host port user password database"), and runs select 1.
func (s *pgServer) connect(creds string) error {
	f := strings.Fields(creds)
	if len(f) != 5 {
		return fmt.Errorf("credentials %q: want host, port, user, password and database", creds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.psql, "-X", "-qAt", "-w", "-h", f[0], "-p", f[1], "-U", f[2], "-d", f[4], "-c", "select 1")
	cmd.Env = append(os.Environ(), "PGPASSWORD="+f[3], "PGCONNECT_TIMEOUT=5")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	if got := strings.TrimSpace(string(out)); got != "1" {
		return fmt.Errorf("select 1 said %q", got)
	}
	return nil
}

// log returns the server's log.
func (s *pgServer) log() string {
	b, _ := os.ReadFile(s.logFile)
	return string(b)
}

// statementRE matches a statement as log_statement=all logs it (its first
// line).
var statementRE = regexp.MustCompile(`(?m)^\S+ \S+ \S+ \[\d+\] (\S*) LOG:  statement: (.*)$`)

// statements returns the statements the server logged, in order, as
// "<user@database> <statement>" (a line the server is still writing
// waits for the next call).
func (s *pgServer) statements() []string {
	log := s.log()
	log = log[:strings.LastIndexByte(log, '\n')+1]
	var out []string
	for _, m := range statementRE.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1]+" "+m[2])
	}
	return out
}

// freePort returns a TCP port nothing listens on at host.
func freePort(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
