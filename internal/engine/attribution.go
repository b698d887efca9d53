package engine

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/fsverity"
	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/store"
)

// mountUse says whose work the requests of a workspace's FUSE mount are
// (the workspace mount on fuse, the lower view on overlay): a request, and
// the Store work it causes (a tree loaded, a content materialized into the
// cache), is counted in the account of the exec it was made for.
//
// A FUSE request names the process that made it (kernel overlayfs passes
// on the pid of the process reading the workspace). Only the workspace's
// sandboxes and this host see the mount, and every sandbox has a PID
// namespace of its own (local: one per exec; docker: the workspace's
// container). So a request from a process outside the daemon's PID
// namespace is of an exec of this workspace: of the exec, when one runs.
// When several run at once, which of them a process belongs to is not
// known here (the platforms do not name an exec's processes): their
// requests go on no exec's account, and each of those execs' receipts says
// so (wire.Receipt.SharedMount). Requests of processes in the daemon's
// namespace (the daemon's own file calls, a shell on the host) and of the
// kernel itself (pid 0: FORGET) are on no exec's account either. Whatever
// is on no account is still in the daemon's totals and the mount's.
type mountUse struct {
	mu    sync.Mutex
	execs []*execUse
	sole  atomic.Pointer[account.Account] // the account of the one exec running, or nil
	// seen caches the processes looked up, each at its pid modulo the
	// size: pid<<1, plus 1 when it is in a sandbox (0: none). Cleared
	// whenever an exec starts or ends.
	seen [64]atomic.Uint64
}

// execUse is one exec's use of the mount.
type execUse struct {
	acct   *account.Account
	shared bool // another exec of the workspace ran at the same time; mountUse.mu
}

// enter records that an exec whose account is a started.
func (u *mountUse) enter(a *account.Account) *execUse {
	x := &execUse{acct: a}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.execs = append(u.execs, x)
	if len(u.execs) > 1 {
		for _, o := range u.execs {
			o.shared = true
		}
	}
	u.changed()
	return x
}

// leave records that x's exec ended, and reports whether another exec of
// the workspace ran while it did.
func (u *mountUse) leave(x *execUse) (shared bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, o := range u.execs {
		if o == x {
			u.execs = append(u.execs[:i], u.execs[i+1:]...)
			break
		}
	}
	u.changed()
	return x.shared
}

// changed updates sole after the execs changed; mu held.
func (u *mountUse) changed() {
	if len(u.execs) == 1 {
		u.sole.Store(u.execs[0].acct)
	} else {
		u.sole.Store(nil)
	}
	for i := range u.seen {
		u.seen[i].Store(0)
	}
}

// account returns the account a request of process pid is counted in, or
// nil: fusefs.Options.Account.
func (u *mountUse) account(pid uint32) *account.Account {
	a := u.sole.Load()
	if a == nil || pid == 0 || !u.inSandbox(pid) {
		return nil
	}
	return a
}

// inSandbox reports whether process pid is outside the daemon's PID
// namespace. A process gone before it is looked up is taken to be in one:
// the processes that end while their requests are served are an exec's,
// killed or ending with it.
func (u *mountUse) inSandbox(pid uint32) bool {
	slot := &u.seen[pid%uint32(len(u.seen))]
	if l := slot.Load(); l>>1 == uint64(pid) {
		return l&1 == 1
	}
	var st unix.Stat_t
	own := daemonPidNS()
	in := unix.Stat("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/ns/pid", &st) != nil ||
		st.Dev != own.Dev || st.Ino != own.Ino
	l := uint64(pid) << 1
	if in {
		l |= 1
	}
	slot.Store(l)
	return in
}

// daemonPidNS is the daemon's PID namespace file.
var daemonPidNS = sync.OnceValue(func() unix.Stat_t {
	var st unix.Stat_t
	unix.Stat("/proc/self/ns/pid", &st)
	return st
})

// context returns ctx with the account the Store work of a FUSE request
// (whose context ctx is) is counted in; other contexts, which carry their
// request's account already if it has one, are returned as they are.
func (u *mountUse) context(ctx context.Context) context.Context {
	if u.sole.Load() == nil || account.From(ctx) != nil {
		return ctx
	}
	pid, ok := fusefs.CallerPid(ctx)
	if !ok {
		return ctx
	}
	if a := u.account(pid); a != nil {
		return account.With(ctx, a)
	}
	return ctx
}

// accountedLower is the Store as a workspace's mount reads it
// (overlay.Lower): what a read of an exec's process makes the Store do is
// counted in the exec's account (mountUse).
type accountedLower struct {
	db  *store.DB
	use *mountUse
}

func (l accountedLower) Tree(ctx context.Context, id store.ID) (*store.Tree, error) {
	return l.db.Tree(l.use.context(ctx), id)
}

func (l accountedLower) Materialize(ctx context.Context, e *store.Entry) (string, error) {
	return l.db.Materialize(l.use.context(ctx), e)
}

// LoadTrees keeps the Store's bulk load of trees (store.DB.LoadTrees) for
// those who look for it (a metadata image's build).
func (l accountedLower) LoadTrees(ctx context.Context, ids []store.ID) error {
	return l.db.LoadTrees(l.use.context(ctx), ids)
}

// CacheLayer keeps the Store's trusted layer (store.DB.CacheLayer), which
// the overlay reads contents from directly.
func (l accountedLower) CacheLayer() string { return l.db.CacheLayer() }

// Sealed, ContentDigest and Ready keep what the overlay needs of a Store
// whose cache is sealed with fs-verity (kerneloverlay's verity.go).
func (l accountedLower) Sealed() bool { return l.db.Sealed() }

func (l accountedLower) ContentDigest(ctx context.Context, c store.Content) ([fsverity.DigestSize]byte, error) {
	return l.db.ContentDigest(l.use.context(ctx), c)
}

func (l accountedLower) Ready(ctx context.Context, contents []store.Content) (store.ReadyStats, error) {
	return l.db.Ready(l.use.context(ctx), contents)
}
