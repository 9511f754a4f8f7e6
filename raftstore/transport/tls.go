package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

const (
	// defaultReloadDebounce lets a burst of file events (a Kubernetes secret
	// update is several renames) settle into one reload.
	defaultReloadDebounce = 100 * time.Millisecond
	// defaultRecheck is how often a handshake may stat the files, as a
	// fallback for missed or unavailable file events.
	defaultRecheck = 5 * time.Second
)

// CertReloader holds the certificate, key and CA pool of [TLSFiles] and
// keeps them current: it watches the files' directories (Kubernetes updates
// a mounted secret by swapping a "..data" symlink, which only a directory
// watch sees) and reloads after changes settle. As a fallback, handshakes
// stat the files at most every few seconds and reload when they changed.
// A reload that fails (for example on half-written files) keeps the previous
// certificates and logs an error.
//
// Configs from ServerConfig and ClientConfig read the current certificates
// on every handshake, so new connections use new files without a restart;
// established connections are not affected. Peers are verified against the
// CA pool only: the chain must be valid for any key usage, and host names
// and IPs are not checked, since pod addresses rarely appear in
// certificates. Only TLS 1.3 is offered.
//
// A CertReloader is safe for concurrent use. Close stops the watcher.
type CertReloader struct {
	files    TLSFiles
	logger   *slog.Logger
	now      func() time.Time
	recheck  time.Duration // <= 0 disables the stat fallback
	debounce time.Duration

	state atomic.Pointer[certState]

	mu        sync.Mutex // serialises reloads; guards lastCheck and sig
	lastCheck time.Time
	sig       fileSig

	watcher   *fsnotify.Watcher // nil when not watching
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

type certState struct {
	cert  *tls.Certificate
	leaf  *x509.Certificate
	pool  *x509.CertPool
	caPEM []byte
}

type reloaderOptions struct {
	watch    bool
	recheck  time.Duration
	debounce time.Duration
	now      func() time.Time
}

// NewCertReloader loads files, failing if they cannot be loaded now, and
// starts watching their directories. If the watch cannot be set up (for
// example when inotify limits are exhausted) it logs a warning and relies
// on the periodic re-check. The caller must Close it. A nil logger means
// slog.Default().
func NewCertReloader(files TLSFiles, logger *slog.Logger) (*CertReloader, error) {
	return newCertReloader(files, logger, reloaderOptions{
		watch: true, recheck: defaultRecheck, debounce: defaultReloadDebounce,
	})
}

func newCertReloader(files TLSFiles, logger *slog.Logger, o reloaderOptions) (*CertReloader, error) {
	if files.CertFile == "" || files.KeyFile == "" || files.CAFile == "" {
		return nil, errors.New("TLS needs CertFile, KeyFile and CAFile")
	}
	if logger == nil {
		logger = slog.Default()
	}
	if o.now == nil {
		o.now = time.Now
	}
	r := &CertReloader{
		files: files, logger: logger, now: o.now, recheck: o.recheck, debounce: o.debounce,
		done: make(chan struct{}),
	}
	r.sig = statFiles(files)
	r.lastCheck = r.now()
	st, err := loadCertState(files)
	if err != nil {
		return nil, err
	}
	r.state.Store(st)
	if o.watch {
		if err := r.startWatch(); err != nil {
			logger.Warn("cannot watch TLS files; relying on periodic re-checks",
				"error", err, "interval", r.recheck)
		}
	}
	return r, nil
}

// Reload re-reads the files now. On error the previous certificates stay in
// use.
func (r *CertReloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked("requested")
}

// Close stops watching the files; the certificates last loaded stay in use
// by configs already handed out. It is idempotent and always returns nil.
func (r *CertReloader) Close() error {
	r.closeOnce.Do(func() {
		close(r.done)
		if r.watcher != nil {
			_ = r.watcher.Close()
		}
		r.wg.Wait()
	})
	return nil
}

// ServerConfig returns a config for tls.Server that presents the current
// certificate and requires a client certificate that chains to the current
// CA pool. Session tickets are off, so every connection is fully verified.
func (r *CertReloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			r.maybeRecheck()
			st := r.state.Load()
			return &tls.Config{
				MinVersion:             tls.VersionTLS13,
				SessionTicketsDisabled: true,
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
					return st.cert, nil
				},
				ClientAuth: tls.RequireAnyClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					return r.verifyPeer(st.pool, cs.PeerCertificates)
				},
			}, nil
		},
	}
}

// ClientConfig returns a config for tls.Client that presents the current
// certificate and verifies the server's chain against the current CA pool.
func (r *CertReloader) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Host name verification is replaced, not skipped: VerifyConnection
		// verifies the chain against the CA pool. Peers are dialed by pod
		// names or IPs that their certificates need not list.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			r.maybeRecheck()
			return r.state.Load().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			r.maybeRecheck()
			return r.verifyPeer(r.state.Load().pool, cs.PeerCertificates)
		},
	}
}

func (r *CertReloader) verifyPeer(pool *x509.CertPool, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		CurrentTime:   r.now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return fmt.Errorf("peer certificate %q (serial %s) does not verify against CA file %s: %w",
			chain[0].Subject.String(), chain[0].SerialNumber, r.files.CAFile, err)
	}
	return nil
}
