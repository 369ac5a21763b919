package accessgate_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// permissions is a permission service whose grants can be revoked, and
// that can hold a lookup until released.
type permissions struct {
	mu      sync.Mutex
	granted map[[2]string]bool
	calls   atomic.Int64
	hold    chan struct{} // when set, each lookup waits on it
	started chan struct{}
}

func (p *permissions) Check(_ context.Context, s, r string) (bool, error) {
	p.calls.Add(1)
	p.mu.Lock()
	ok, hold, started := p.granted[[2]string{s, r}], p.hold, p.started
	p.mu.Unlock()
	if hold != nil {
		started <- struct{}{}
		<-hold
	}
	return ok, nil
}

func (p *permissions) set(s, r string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.granted[[2]string{s, r}] = ok
}

func newPermissionsGate(t *testing.T) (*accessgate.Checker, *permissions) {
	t.Helper()
	p := &permissions{granted: map[[2]string]bool{{"alice", "orders"}: true}}
	g, err := accessgate.New(accessgate.Config{Lookup: p, Clock: newClock(), Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g, p
}

// TestInvalidateDropsARevokedAllow: a revoked permission does not live out
// the allow TTL once the gate is told.
func TestInvalidateDropsARevokedAllow(t *testing.T) {
	g, p := newPermissionsGate(t)
	ctx := context.Background()
	if err := g.Check(ctx, "alice", "orders"); err != nil {
		t.Fatal(err)
	}
	p.set("alice", "orders", false)
	if err := g.Check(ctx, "alice", "orders"); err != nil {
		t.Fatalf("before Invalidate the cached allow answers: %v", err)
	}
	g.Invalidate("alice", "orders")
	if err := g.Check(ctx, "alice", "orders"); !errors.Is(err, accessgate.ErrDenied) {
		t.Fatalf("after Invalidate: %v, want denied", err)
	}
	if n := p.calls.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2", n)
	}
}

// TestInvalidateDuringALookupKeepsItsAnswerOutOfTheCache: a lookup that
// began before the revocation may answer allow; that answer is not cached,
// and a check after Invalidate asks again instead of joining it.
func TestInvalidateDuringALookupKeepsItsAnswerOutOfTheCache(t *testing.T) {
	g, p := newPermissionsGate(t)
	ctx := context.Background()
	p.mu.Lock()
	p.hold, p.started = make(chan struct{}), make(chan struct{}, 2)
	p.mu.Unlock()
	first := make(chan error, 1)
	go func() { first <- g.Check(ctx, "alice", "orders") }()
	<-p.started
	p.set("alice", "orders", false) // the old answer is already on its way
	g.Invalidate("alice", "orders")
	second := make(chan error, 1)
	go func() { second <- g.Check(ctx, "alice", "orders") }()
	<-p.started // the second check has a lookup of its own
	close(p.hold)
	if err := <-first; err != nil {
		t.Fatalf("the check that waited for the old lookup: %v, want its allow", err)
	}
	if err := <-second; !errors.Is(err, accessgate.ErrDenied) {
		t.Fatalf("the check after Invalidate: %v, want denied", err)
	}
	p.mu.Lock()
	p.hold = nil
	p.mu.Unlock()
	if err := g.Check(ctx, "alice", "orders"); !errors.Is(err, accessgate.ErrDenied) {
		t.Fatalf("from the cache: %v, want the deny (the old allow was not cached)", err)
	}
}

// TestFreshChecksSkipTheCache: a check on a Fresh context asks the
// service whatever the cache holds, and refreshes it.
func TestFreshChecksSkipTheCache(t *testing.T) {
	g, p := newPermissionsGate(t)
	ctx := context.Background()
	if err := g.Check(ctx, "alice", "orders"); err != nil {
		t.Fatal(err)
	}
	p.set("alice", "orders", false)
	if err := g.Check(accessgate.Fresh(ctx), "alice", "orders"); !errors.Is(err, accessgate.ErrDenied) {
		t.Fatalf("fresh: %v, want denied", err)
	}
	if err := g.Check(ctx, "alice", "orders"); !errors.Is(err, accessgate.ErrDenied) {
		t.Fatalf("after a fresh check the cache holds its answer: %v, want denied", err)
	}
	if n := p.calls.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2", n)
	}
}

// TestAStaleLookupNeverOverwritesAFreshAnswer: a normal lookup that began
// before a revocation answers allow after a Fresh check (which began later)
// has cached the deny. The older answer must not replace the newer one: the
// revoked subject stays denied, from the cache, for the checks that follow.
func TestAStaleLookupNeverOverwritesAFreshAnswer(t *testing.T) {
	var granted atomic.Bool
	granted.Store(true)
	release, started := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	lookup := accessgate.LookupFunc(func(context.Context, string, string) (bool, error) {
		ok := granted.Load()
		if calls.Add(1) == 1 {
			close(started)
			<-release // the old answer is on its way while the revocation happens
		}
		return ok, nil
	})
	g, err := accessgate.New(accessgate.Config{Lookup: lookup, Clock: newClock(), Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	ctx := context.Background()
	old := make(chan error, 1)
	go func() { old <- g.Check(ctx, "alice", "orders") }()
	<-started
	granted.Store(false)
	if err := g.Check(accessgate.Fresh(ctx), "alice", "orders"); !errors.Is(err, accessgate.ErrDenied) {
		t.Fatalf("fresh check: %v, want denied", err)
	}
	close(release)
	if err := <-old; err != nil {
		t.Fatalf("the check that waited for the old lookup: %v, want its allow", err)
	}
	if err := g.Check(ctx, "alice", "orders"); !errors.Is(err, accessgate.ErrDenied) {
		t.Fatalf("after both answers: %v, want the fresh deny (the older allow must not replace it)", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2 (the last check answered from the cache)", n)
	}
}
