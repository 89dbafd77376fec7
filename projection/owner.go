package projection

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file holds the fenced owner (Config.Owner; docs/owner.md has the
// design). A processor that owns the gate key of an inline projection is,
// while it holds the lease, the only writer of that key's gate state but
// for writers it is told about, and it stops inserting the empty version
// rows that guard the aggregates the fast path takes as new (inline_gate.go):
//
//   - The lease: a session advisory lock on a connection of the owner's own
//     (it ends with the process), and a row of the owners table whose token
//     every new owner bumps. Taking it holds the key's fence exclusively,
//     which waits for the other writers' transactions in flight.
//   - Every owned transaction reads the row FOR SHARE first and checks the
//     token and the other writers' count it last saw; a change fails the
//     attempt with errOwnership, and the batch is retried at once, guarded.
//   - Every other writer of the key's gate state — another processor's
//     batch, a batch of this one that could not claim its aggregates,
//     an operator's action — takes the fence shared and bumps the count
//     first (queueFence): it waits for the owner's transaction in flight,
//     and the owner's next one sees it.
//   - Inside the process, an owned batch claims its aggregates, all or
//     none; one that cannot runs as another writer would.
//   - The memory that lets the owner drop a guard: the aggregates that have
//     no row but a version row that holds something (parked, quarantined,
//     a gap), read when the lease is taken, kept by the owner's commits and
//     read again after another writer's. An aggregate in it keeps its
//     guard.

// errOwnership fails an owned attempt whose lease moved (another owner
// took it, or another writer wrote): the batch is retried at once.
var errOwnership = errors.New("projection: the lease's state moved")

// ownerRetry is how long an owner waits before trying again to take a
// lease someone else holds.
const ownerRetry = time.Second

// ownerRereadMin and ownerRereadMax bound how long an owner waits, after
// another writer's transaction, before reading its memory again (guarding
// every new aggregate meanwhile): the wait doubles while other writers
// keep writing, since each read scans the key's version rows.
const (
	ownerRereadMin = 10 * time.Millisecond
	ownerRereadMax = 10 * time.Second
)

// ownerPendingBound bounds the aggregates an owner remembers as pending
// before it reads them again from the database.
const ownerPendingBound = 1 << 16

// owner is the ownership of a processor with Config.Owner.
type owner struct {
	p      *Processor
	holder string

	connMu sync.Mutex // serializes the use of conn

	mu      sync.Mutex
	conn    *pgx.Conn         // holds the leases' session locks
	leases  map[string]*lease // by gate key
	tried   map[string]time.Time
	claimed map[string]struct{} // aggregates of owned batches in flight
	closed  bool
}

// lease is one gate key's lease.
type lease struct {
	key       string
	token     int64
	foreign   int64               // the other writers' count the memory is valid for
	pending   map[string]struct{} // aggregates without a row whose version rows may hold something
	stale     bool                // pending must be read again
	rereading bool                // a batch is reading it
	readAt    time.Time
	gap       time.Duration // between reads: doubles while other writers keep writing
	// during holds, while a batch reads the memory again, what the owned
	// commits meanwhile did to it (true: entered, false: left), applied
	// to what the read returns: it may have read before them.
	during map[string]bool
}

// ownership is what an owned batch holds: per projection index, the lease
// of its gate key (nil where it owns none), and whether each lease's
// memory allows dropping guards.
type ownership struct {
	leases []*leaseView
	aggs   []string
}

// leaseView is a lease as a batch saw it when it began.
type leaseView struct {
	key            string
	token, foreign int64
	unguard        bool                // the memory is valid: guards of aggregates not pending may go
	pending        map[string]struct{} // a copy, for the batch's aggregates
}

func newOwner(p *Processor) *owner {
	host, _ := os.Hostname()
	return &owner{p: p, holder: host + ":" + strconv.Itoa(os.Getpid()), leases: map[string]*lease{},
		tried: map[string]time.Time{}, claimed: map[string]struct{}{}}
}

// ownerKey and fenceKey are the advisory lock keys of a gate key's lease
// and fence.
func (p *Processor) ownerKey(key string) int64 {
	return advisoryKey64("inorder.owner\x00" + p.cfg.Schema + "\x00" + key)
}

func (p *Processor) fenceKey(key string) int64 {
	return advisoryKey64("inorder.fence\x00" + p.cfg.Schema + "\x00" + key)
}

// begin returns what batch bt, run by proc (the owner's processor, or the
// view of the generations it feeds), owns (nil: nothing), taking the
// leases it may and reading stale memories first. The caller calls end
// once the batch is done, committed or not.
func (o *owner) begin(ctx context.Context, proc *Processor, bt *batch) *ownership {
	if o == nil || bt.DryRun || len(bt.aggs) == 0 {
		return nil
	}
	for _, r := range proc.projs {
		if r.inlineTable() == nil {
			continue
		}
		o.mu.Lock()
		l, closed := o.leases[r.key], o.closed
		reread := l != nil && l.stale && !l.rereading && time.Since(l.readAt) >= l.gap
		if reread {
			l.rereading, l.during = true, map[string]bool{}
		}
		o.mu.Unlock()
		switch {
		case closed:
			return nil
		case l == nil:
			// One take at a time: the batches that come meanwhile wait
			// for it rather than write as others.
			o.connMu.Lock()
			o.mu.Lock()
			due := o.leases[r.key] == nil && time.Since(o.tried[r.key]) >= ownerRetry
			if due {
				o.tried[r.key] = time.Now()
			}
			o.mu.Unlock()
			if due {
				o.take(ctx, r)
			}
			o.connMu.Unlock()
		case reread:
			o.reread(ctx, r, l)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	for _, agg := range bt.aggs {
		if _, ok := o.claimed[agg]; ok {
			return nil // another owned batch has one: run as another writer would
		}
	}
	own := &ownership{leases: make([]*leaseView, len(proc.projs)), aggs: bt.aggs}
	any := false
	for _, r := range proc.projs {
		l := o.leases[r.key]
		if l == nil || r.inlineTable() == nil {
			continue
		}
		v := &leaseView{key: l.key, token: l.token, foreign: l.foreign, unguard: !l.stale}
		if v.unguard {
			v.pending = map[string]struct{}{}
			for _, agg := range bt.aggs {
				if _, ok := l.pending[agg]; ok {
					v.pending[agg] = struct{}{}
				}
			}
		}
		own.leases[r.index] = v
		any = true
	}
	if !any {
		return nil
	}
	for _, agg := range bt.aggs {
		o.claimed[agg] = struct{}{}
	}
	return own
}

// end releases own's claims; committed, it keeps in the leases' memories
// what the batch's commit left (news: the rows it wrote).
func (o *owner) end(own *ownership, committed bool, news rowNews) {
	if own == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, agg := range own.aggs {
		delete(o.claimed, agg)
	}
	if !committed {
		return
	}
	n := len(own.leases)
	for i, v := range own.leases {
		if v == nil {
			continue
		}
		l := o.leases[v.key]
		if l == nil || l.token != v.token {
			continue
		}
		// An aggregate whose row the commit wrote has a row; any other
		// may have a version row that holds something now.
		wrote := map[string]bool{}
		for k, agg := range news.aggs {
			if news.news[k*n+i].kind == rowApplied {
				wrote[agg] = true
			}
		}
		for _, agg := range own.aggs {
			if wrote[agg] {
				delete(l.pending, agg)
			} else {
				l.pending[agg] = struct{}{}
			}
			if l.rereading {
				l.during[agg] = !wrote[agg]
			}
		}
		if len(l.pending) > ownerPendingBound {
			l.stale, l.pending = true, map[string]struct{}{}
		}
	}
}

// take tries to take the lease of r's gate key (o.connMu held).
func (o *owner) take(ctx context.Context, r *registered) {
	p := o.p
	key := r.key
	if err := o.connect(ctx); err != nil {
		p.log.WarnContext(ctx, "owner: no connection for the leases", "projection", r.name, "error", err)
		return
	}
	ok, err := p.store.Locks.TrySession(ctx, o.conn, p.ownerKey(key))
	if err != nil {
		o.disconnect(ctx)
		p.log.WarnContext(ctx, "owner: cannot try the lease", "projection", r.name, "error", err)
		return
	}
	if !ok {
		return // another process owns it
	}
	l := &lease{key: key, gap: ownerRereadMin}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// The other writers in flight saw no owner; wait for them.
		if err := p.store.Locks.Exclusive(ctx, tx, p.fenceKey(key)); err != nil {
			return err
		}
		var err error
		if l.token, l.foreign, err = p.store.Owners.Take(ctx, tx, key, o.holder); err != nil {
			return err
		}
		l.pending, err = o.readPending(ctx, tx, r)
		return err
	})
	if err != nil {
		if _, rerr := p.store.Locks.Release(ctx, o.conn, p.ownerKey(key)); rerr != nil {
			o.disconnect(ctx)
		}
		p.log.WarnContext(ctx, "owner: cannot take the lease", "projection", r.name, "error", err)
		return
	}
	l.readAt = time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.leases[key] = l
	p.log.InfoContext(ctx, "owner: took the lease", "projection", r.name, "gate_key", key, "token", l.token, "pending", len(l.pending))
}

// reread reads a stale lease's memory again, with the count it is valid
// for; a lease another owner took is dropped.
func (o *owner) reread(ctx context.Context, r *registered, l *lease) {
	p := o.p
	var token, foreign int64
	var pending map[string]struct{}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var err error
		if token, foreign, err = p.store.Owners.Check(ctx, tx, l.key); err != nil {
			return err
		}
		pending, err = o.readPending(ctx, tx, r)
		return err
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	during := l.during
	l.rereading, l.during = false, nil
	switch {
	case errors.Is(err, pgx.ErrNoRows) || err == nil && token != l.token:
		o.lost(l)
	case err != nil:
		p.log.WarnContext(ctx, "owner: cannot read the lease's memory", "projection", r.name, "error", err)
	case o.leases[l.key] == l:
		for agg, in := range during {
			if in {
				pending[agg] = struct{}{}
			} else {
				delete(pending, agg)
			}
		}
		l.foreign, l.pending, l.stale, l.readAt = foreign, pending, false, time.Now()
	}
}

// readPending reads the aggregates of r's gate key that an owner must
// guard when they come new.
func (o *owner) readPending(ctx context.Context, tx pgx.Tx, r *registered) (map[string]struct{}, error) {
	rows, err := o.p.store.Versions.PendingInline(ctx, tx, r.key, r.inlineTable().ref())
	if err != nil {
		return nil, err
	}
	aggs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	m := make(map[string]struct{}, len(aggs))
	for _, a := range aggs {
		m[a] = struct{}{}
	}
	return m, nil
}

// lost drops lease l (o.mu held): another owner took it, or its row went.
// The session lock stays with the connection: taking the lease again
// takes it again (advisory locks count per session).
func (o *owner) lost(l *lease) {
	if o.leases[l.key] != l {
		return
	}
	delete(o.leases, l.key)
	o.p.log.Warn("owner: lost the lease", "gate_key", l.key, "token", l.token)
}

// connect opens the leases' connection if it is not open.
func (o *owner) connect(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn != nil && !o.conn.IsClosed() {
		return nil
	}
	if o.conn != nil { // the connection went: so did its session locks
		for _, l := range o.leases {
			o.lost(l)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, o.p.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	// The connection sits idle between takes: a server (or role, or
	// database) with idle_session_timeout would end it, and the leases
	// with it, while the owner still believes it holds them. The setting
	// exists from PostgreSQL 14 on; older servers have nothing to turn off.
	if _, err := conn.Exec(ctx, `SELECT set_config(name, '0', false) FROM pg_settings WHERE name = 'idle_session_timeout'`); err != nil {
		_ = conn.Close(ctx)
		return fmt.Errorf("turn idle_session_timeout off: %w", err)
	}
	o.conn = conn
	return nil
}

// disconnect closes the leases' connection: every lease goes.
func (o *owner) disconnect(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range o.leases {
		o.lost(l)
	}
	if o.conn != nil {
		_ = o.conn.Close(ctx)
		o.conn = nil
	}
}

// close ends every lease (its row vacated, so that other writers stop
// bumping it) and closes the connection.
func (o *owner) close(ctx context.Context) error {
	if o == nil {
		return nil
	}
	o.connMu.Lock()
	defer o.connMu.Unlock()
	o.mu.Lock()
	o.closed = true
	leases := make([]*lease, 0, len(o.leases))
	for _, l := range o.leases {
		leases = append(leases, l)
	}
	clear(o.leases)
	conn := o.conn
	o.conn = nil
	o.mu.Unlock()
	var errs []error
	for _, l := range leases {
		if err := o.p.store.Owners.Drop(ctx, o.p.pool, l.key, l.token); err != nil {
			errs = append(errs, err)
		}
	}
	if conn != nil {
		errs = append(errs, conn.Close(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("projection: end the leases: %w", err)
	}
	return nil
}

// queueFence queues, first in attempt a's transaction, for each inline
// projection: the lease's check if the batch owns its key, the fence and
// the bump of the other writers' count if not.
func (a *attempt) queueFence(b *pgx.Batch) {
	p := a.p
	for _, r := range p.projs {
		if r.inlineTable() == nil {
			continue
		}
		v := a.own.lease(r)
		if v == nil {
			p.queueForeign(b, r.key)
			continue
		}
		p.store.Owners.QueueCheck(b, v.key).Query(func(rows pgx.Rows) error {
			token, foreign, found := int64(0), int64(0), false
			for rows.Next() {
				if err := rows.Scan(&token, &foreign); err != nil {
					return err
				}
				found = true
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if found && token == v.token && foreign == v.foreign {
				return nil
			}
			p.owner.moved(v, found && token == v.token, foreign)
			if found && token == v.token && !v.unguard {
				// Another writer wrote, and this attempt keeps every
				// guard: it need not fail (nor starve while others keep
				// writing).
				return nil
			}
			return fmt.Errorf("%w: gate key %s", errOwnership, v.key)
		})
	}
}

// queueForeign queues the fence and the bump of another writer of gate key
// key's state.
func (p *Processor) queueForeign(b *pgx.Batch, key string) {
	p.store.Owners.QueueBump(b, p.fenceKey(key), key).Exec(func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() > 0 {
			p.vacancies.held(key)
		}
		return nil
	})
}

// fenceForeign is queueForeign for a transaction that runs its statements
// one by one (an operator's action).
func (p *Processor) fenceForeign(ctx context.Context, tx pgx.Tx, key string) error {
	held, err := p.store.Owners.Bump(ctx, tx, p.fenceKey(key), key)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if held {
		p.vacancies.held(key)
	}
	return nil
}

// moved records what an owned attempt's check found: another writer wrote
// (the memory is stale, valid from foreign on) or another owner took the
// lease.
func (o *owner) moved(v *leaseView, stillOwn bool, foreign int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.leases[v.key]
	if l == nil || l.token != v.token {
		return
	}
	if !stillOwn {
		o.lost(l)
		return
	}
	if foreign > l.foreign {
		if time.Since(l.readAt) < 10*l.gap {
			l.gap = min(2*l.gap, ownerRereadMax) // other writers keep writing
		} else {
			l.gap = ownerRereadMin
		}
		l.foreign, l.stale, l.pending = foreign, true, map[string]struct{}{}
	}
}

// lease returns the lease own holds for r, nil if none.
func (own *ownership) lease(r *registered) *leaseView {
	if own == nil || r.index >= len(own.leases) {
		return nil
	}
	return own.leases[r.index]
}

// unguarded reports whether an owned attempt may take aggregate agg, new to
// projection r, without its guard row.
func (a *attempt) unguarded(r *registered, agg string) bool {
	v := a.own.lease(r)
	if v == nil || !v.unguard {
		return false
	}
	_, pending := v.pending[agg]
	return !pending
}
