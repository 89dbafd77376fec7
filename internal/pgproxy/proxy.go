package pgproxy

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Startup request codes: the first message of a connection carries no type
// byte; these codes tell a startup message from the requests the server
// answers with a single byte (or, for a cancel, not at all).
const (
	codeCancel = 80877102
	codeSSL    = 80877103
	codeGSSEnc = 80877104

	dialTimeout = 5 * time.Second
	bufSize     = 64 << 10
	// maxMessage bounds a message's declared length: a larger one means the
	// framing was lost (or the peer is not PostgreSQL).
	maxMessage = 1 << 30
)

// Which selects the connections Proxy.Cut closes.
type Which int

const (
	// InTransaction selects connections in the middle of a transaction:
	// the server reported the connection in a (possibly failed) transaction
	// at its last ReadyForQuery, or the client sent a query or sync the
	// server has not answered yet.
	InTransaction Which = iota
	// All selects every connection.
	All
)

// Stats counts what a proxy did.
type Stats struct {
	// Conns is the number of sessions: client connections that sent a
	// startup message.
	Conns int64
	// Cancels is the number of cancel requests forwarded (each on a
	// connection of its own).
	Cancels int64
	// Cuts is the number of connections Cut closed.
	Cuts int64
	// CommitCuts is the number of connections cut after the server
	// committed their COMMIT, before the client heard of it.
	CommitCuts int64
	// CommitHolds is the number of COMMIT answers held back (HoldAtCommit).
	CommitHolds int64
}

// Proxy forwards TCP connections to a PostgreSQL server. Its methods are
// safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
	// commitCuts is how many COMMITs still get cut (CutAtCommit).
	commitCuts int
	// holds are the armed holds not yet taken by a COMMIT, first first.
	holds []*Hold

	nConns, nCancels, nCuts, nCommitCuts, nCommitHolds atomic.Int64

	amu      sync.Mutex
	activity chan struct{} // closed at the next client message
}

// Listen starts a proxy on a free port of 127.0.0.1 that forwards every
// connection to target ("host:port").
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Close stops accepting connections, closes every open one and waits for
// the proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

// Activity returns a channel that is closed when a client next sends a
// message: a test waits on it for work to be in flight before it cuts.
func (p *Proxy) Activity() <-chan struct{} {
	p.amu.Lock()
	defer p.amu.Unlock()
	if p.activity == nil {
		p.activity = make(chan struct{})
	}
	return p.activity
}

func (p *Proxy) active() {
	p.amu.Lock()
	if p.activity != nil {
		close(p.activity)
		p.activity = nil
	}
	p.amu.Unlock()
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.nConns.Load(), Cancels: p.nCancels.Load(), Cuts: p.nCuts.Load(), CommitCuts: p.nCommitCuts.Load(),
		CommitHolds: p.nCommitHolds.Load()}
}

// Cut closes up to max of the connections which selects (all of them when
// max < 0) and returns how many it closed.
func (p *Proxy) Cut(which Which, max int) int {
	p.mu.Lock()
	var victims []*conn
	for c := range p.conns {
		if max >= 0 && len(victims) >= max {
			break
		}
		if c.selected(which) {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.close()
	}
	p.nCuts.Add(int64(len(victims)))
	return len(victims)
}

// CutAtCommit arms the proxy for the next n COMMITs, of any connections:
// each is forwarded to the server, and when the server answers that it
// committed, the connection is cut instead of forwarding the answer. A
// COMMIT the server does not commit (the transaction had failed) is
// forwarded normally and does not count.
func (p *Proxy) CutAtCommit(n int) {
	p.mu.Lock()
	p.commitCuts += n
	p.mu.Unlock()
}

// ArmedCommitCuts returns how many COMMITs the proxy still has to cut.
func (p *Proxy) ArmedCommitCuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.commitCuts
}

// Hold is one armed HoldAtCommit: the COMMIT whose answer it holds back.
// Its methods are safe for concurrent use.
type Hold struct {
	held, release         chan struct{}
	heldOnce, releaseOnce sync.Once
}

// Held returns a channel that is closed once the server has committed the
// COMMIT and the proxy holds its answer back.
func (h *Hold) Held() <-chan struct{} { return h.held }

// Release forwards the held answer to the client (at once, when the answer
// comes later). Releasing a hold whose connection closed does nothing. It
// is safe to call more than once.
func (h *Hold) Release() { h.releaseOnce.Do(func() { close(h.release) }) }

// HoldAtCommit arms the proxy for the next COMMIT of any connection: it is
// forwarded to the server, and when the server answers that it committed,
// the proxy holds the answer back — the client waits as for a slow
// network — until Hold.Release, or until the connection closes (the client
// gives up, Cut, Close), when the client never hears it. A COMMIT the
// server does not commit (the transaction had failed) is forwarded normally
// and leaves the hold armed for the next one. Holds armed together are
// taken by COMMITs in the order they were armed.
func (p *Proxy) HoldAtCommit() *Hold {
	h := &Hold{held: make(chan struct{}), release: make(chan struct{})}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h
}

// takeCommit consumes what is armed for the next COMMIT: a cut (true), a
// hold, or nothing. Cuts go first.
func (p *Proxy) takeCommit() (cut bool, hold *Hold) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.commitCuts > 0:
		p.commitCuts--
		return true, nil
	case len(p.holds) > 0:
		hold = p.holds[0]
		p.holds = p.holds[1:]
		return false, hold
	}
	return false, nil
}

// rearmHold puts back a hold whose COMMIT did not commit, first in line.
func (p *Proxy) rearmHold(h *Hold) {
	p.mu.Lock()
	p.holds = append([]*Hold{h}, p.holds...)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve dials the server for client and pumps both directions until either
// side closes or the connection is cut.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		// The server is down: the client sees its connection closed, as it
		// would see it refused.
		_ = client.Close()
		return
	}
	c := &conn{p: p, client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = c.fromClient(); c.close() }()
	go func() { defer wg.Done(); _ = c.fromServer(); c.close() }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// conn is one proxied connection.
type conn struct {
	p              *Proxy
	client, server net.Conn
	closeOnce      sync.Once
	done           chan struct{} // closed by close

	mu sync.Mutex
	// session tells that the client sent its startup message (not a cancel
	// request).
	session bool
	// rawAnswers counts single-byte answers (to SSL or GSS encryption
	// requests) the server owes the client.
	rawAnswers int
	// status is the transaction status of the last ReadyForQuery: 'I'
	// idle, 'T' in a transaction, 'E' in a failed one; 0 before the first.
	status byte
	// waiting counts queries and syncs the server has not answered with a
	// ReadyForQuery yet.
	waiting int
	// commitArmed tells that the client sent a COMMIT that is to be cut at
	// the server's answer.
	commitArmed bool
	// commitHold, when set, is the hold of the COMMIT the client sent,
	// whose answer is to be held back.
	commitHold *Hold
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

func (c *conn) selected(which Which) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if which == All {
		return c.session
	}
	return c.status != 0 && (c.status != 'I' || c.waiting > 0)
}

// fromClient forwards the client's messages to the server.
func (c *conn) fromClient() error {
	r := bufio.NewReaderSize(c.client, bufSize)
	w := bufio.NewWriterSize(c.server, bufSize)
	var buf []byte
	// The startup phase: untyped messages, until the startup message.
	for startup := false; !startup; {
		msg, err := readMessage(r, false, &buf)
		if err != nil {
			return err
		}
		if len(msg) < 8 {
			return errors.New("pgproxy: short startup message")
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code == codeSSL || code == codeGSSEnc {
			// Counted before forwarding: the answer cannot come earlier.
			c.mu.Lock()
			c.rawAnswers++
			c.mu.Unlock()
		}
		if err := forward(w, msg, r); err != nil {
			return err
		}
		switch code {
		case codeSSL, codeGSSEnc:
		case codeCancel:
			c.p.nCancels.Add(1)
			_, err := io.Copy(io.Discard, r) // until the server closes it
			return err
		default:
			c.p.nConns.Add(1)
			c.mu.Lock()
			c.session = true
			c.mu.Unlock()
			startup = true
		}
	}
	for {
		msg, err := readMessage(r, true, &buf)
		if err != nil {
			return err
		}
		switch msg[0] {
		case 'Q':
			var cut bool
			var hold *Hold
			if isCommit(msg[5:]) {
				cut, hold = c.p.takeCommit()
			}
			c.mu.Lock()
			c.waiting++
			c.commitArmed = c.commitArmed || cut
			if hold != nil {
				c.commitHold = hold
			}
			c.mu.Unlock()
		case 'S':
			c.mu.Lock()
			c.waiting++
			c.mu.Unlock()
		}
		if err := forward(w, msg, r); err != nil {
			return err
		}
		c.p.active()
	}
}

// fromServer forwards the server's messages to the client, and cuts the
// connection at the answer to an armed COMMIT.
func (c *conn) fromServer() error {
	r := bufio.NewReaderSize(c.server, bufSize)
	w := bufio.NewWriterSize(c.client, bufSize)
	var buf []byte
	for {
		if _, err := r.Peek(1); err != nil {
			_ = w.Flush()
			return err
		}
		c.mu.Lock()
		raw := c.rawAnswers > 0
		if raw {
			c.rawAnswers--
		}
		c.mu.Unlock()
		if raw {
			b, _ := r.ReadByte()
			if b == 'S' {
				return errors.New("pgproxy: the server accepted encryption, which the proxy cannot follow")
			}
			if err := forward(w, []byte{b}, r); err != nil {
				return err
			}
			continue
		}
		msg, err := readMessage(r, true, &buf)
		if err != nil {
			_ = w.Flush()
			return err
		}
		switch msg[0] {
		case 'Z':
			c.mu.Lock()
			if len(msg) > 5 {
				c.status = msg[5]
			}
			if c.waiting > 0 {
				c.waiting--
			}
			rearm := c.commitArmed && c.waiting == 0
			if rearm {
				// The COMMIT ended without committing: not the ambiguous
				// case; the next COMMIT gets the cut.
				c.commitArmed = false
			}
			var hold *Hold
			if c.waiting == 0 {
				hold, c.commitHold = c.commitHold, nil // likewise
			}
			c.mu.Unlock()
			if rearm {
				c.p.CutAtCommit(1)
			}
			if hold != nil {
				c.p.rearmHold(hold)
			}
		case 'C':
			if strings.TrimRight(string(msg[5:]), "\x00") != "COMMIT" {
				break
			}
			c.mu.Lock()
			armed, hold := c.commitArmed, c.commitHold
			c.commitHold = nil
			c.mu.Unlock()
			if armed {
				// The server committed; the client will never know.
				c.p.nCommitCuts.Add(1)
				_ = w.Flush() // what came before the answer
				c.close()
				return nil
			}
			if hold != nil {
				// The server committed; the client hears of it when the
				// test says so, or never.
				c.p.nCommitHolds.Add(1)
				if err := w.Flush(); err != nil {
					return err
				}
				hold.heldOnce.Do(func() { close(hold.held) })
				select {
				case <-hold.release:
				case <-c.done:
					return nil
				}
			}
		}
		if err := forward(w, msg, r); err != nil {
			return err
		}
	}
}

// isCommit reports whether the text of a simple query is a COMMIT.
func isCommit(body []byte) bool {
	q := strings.TrimSpace(strings.TrimRight(string(body), "\x00"))
	q = strings.TrimSpace(strings.TrimSuffix(q, ";"))
	return strings.EqualFold(q, "commit") || strings.EqualFold(q, "end") ||
		strings.EqualFold(q, "commit transaction") || strings.EqualFold(q, "commit work")
}

// readMessage reads one message: a type byte (if typed), a length that
// counts itself, and the body. The returned slice, valid until the next
// call, holds the whole message.
func readMessage(r *bufio.Reader, typed bool, buf *[]byte) ([]byte, error) {
	head := 4
	if typed {
		head = 5
	}
	b := *buf
	if cap(b) < head {
		b = make([]byte, head, 512)
	}
	b = b[:head]
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(b[head-4 : head])
	if n < 4 || n > maxMessage {
		return nil, fmt.Errorf("pgproxy: message length %d: framing lost", n)
	}
	total := head + int(n) - 4
	if cap(b) < total {
		nb := make([]byte, total)
		copy(nb, b)
		b = nb
	}
	b = b[:total]
	if _, err := io.ReadFull(r, b[head:]); err != nil {
		return nil, err
	}
	*buf = b
	return b, nil
}

// forward writes msg and flushes when the reader has nothing more buffered,
// so that messages the peer sent together travel together.
func forward(w *bufio.Writer, msg []byte, r *bufio.Reader) error {
	if _, err := w.Write(msg); err != nil {
		return err
	}
	if r.Buffered() == 0 {
		return w.Flush()
	}
	return nil
}

// ListenFor starts a proxy to the server of dbURL (a postgres:// URL) and
// returns it with dbURL rewritten to go through it, with sslmode=disable.
func ListenFor(dbURL string) (*Proxy, string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, "", fmt.Errorf("pgproxy: parse URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, "", fmt.Errorf("pgproxy: not a postgres:// URL: scheme %q", u.Scheme)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" || strings.Contains(host, ",") {
		return nil, "", fmt.Errorf("pgproxy: URL needs one TCP host, got %q", u.Host)
	}
	p, err := Listen(net.JoinHostPort(host, cmp.Or(port, "5432")))
	if err != nil {
		return nil, "", err
	}
	u.Host = p.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return p, u.String(), nil
}
