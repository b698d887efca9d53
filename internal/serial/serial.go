package serial

import (
	"context"
	"slices"
	"sync"
)

// Queue runs jobs of type T one at a time (see the package comment). The
// zero value is not ready: make one with New.
type Queue[T comparable] struct {
	run    func(ctx context.Context, job T)
	start  func(func())
	latest bool

	mu      sync.Mutex
	jobs    []T
	running bool
	stopped bool
	cancel  context.CancelFunc // of the job running
}

// Option tunes a Queue.
type Option func(*options)

type options struct {
	start  func(func())
	latest bool
}

// Latest keeps only the newest job queued: a job asked for while another
// waits replaces it.
func Latest() Option { return func(o *options) { o.latest = true } }

// Go starts the Queue's goroutine with start (a sync.WaitGroup's Go, say,
// so that its owner can wait for it), instead of a go statement.
func Go(start func(func())) Option { return func(o *options) { o.start = start } }

// New returns a Queue that runs each job with run. run's context is
// cancelled by Stop.
func New[T comparable](run func(ctx context.Context, job T), opts ...Option) *Queue[T] {
	o := options{start: func(f func()) { go f() }}
	for _, opt := range opts {
		opt(&o)
	}
	return &Queue[T]{run: run, start: o.start, latest: o.latest}
}

// Add queues job, unless it is queued already or the Queue is stopped,
// and reports whether it queued it.
func (q *Queue[T]) Add(job T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped || slices.Contains(q.jobs, job) {
		return false
	}
	if q.latest {
		q.jobs = q.jobs[:0]
	}
	q.jobs = append(q.jobs, job)
	if !q.running {
		q.running = true
		q.start(q.loop)
	}
	return true
}

// loop runs the queued jobs until none is left.
func (q *Queue[T]) loop() {
	for {
		q.mu.Lock()
		if len(q.jobs) == 0 || q.stopped {
			q.running = false
			q.mu.Unlock()
			return
		}
		job := q.jobs[0]
		q.jobs = slices.Delete(q.jobs, 0, 1)
		ctx, cancel := context.WithCancel(context.Background())
		q.cancel = cancel
		q.mu.Unlock()

		q.run(ctx, job)
		cancel()
		q.mu.Lock()
		q.cancel = nil
		q.mu.Unlock()
	}
}

// Stop cancels the job running, drops the others, and refuses new ones.
func (q *Queue[T]) Stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.jobs = nil
	if q.cancel != nil {
		q.cancel()
	}
}
