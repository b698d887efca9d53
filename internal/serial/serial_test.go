package serial

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestQueueOneAtATime: jobs run in order, one at a time, each once while
// queued; a Latest queue runs, of a burst, the first and the last.
func TestQueueOneAtATime(t *testing.T) {
	for _, latest := range []bool{false, true} {
		var running, most atomic.Int32
		var mu sync.Mutex
		var ran []int
		gate, started := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		opts := []Option{Go(wg.Go)}
		if latest {
			opts = append(opts, Latest())
		}
		q := New(func(_ context.Context, j int) {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if j == 0 {
				close(started)
				<-gate
			}
			mu.Lock()
			ran = append(ran, j)
			mu.Unlock()
			running.Add(-1)
		}, opts...)
		q.Add(0)
		<-started
		for _, j := range []int{1, 2, 2, 3} {
			q.Add(j)
		}
		close(gate)
		wg.Wait()
		want := []int{0, 1, 2, 3}
		if latest {
			want = []int{0, 3}
		}
		if len(ran) != len(want) {
			t.Fatalf("latest=%v: ran %v, want %v", latest, ran, want)
		}
		for i := range want {
			if ran[i] != want[i] {
				t.Fatalf("latest=%v: ran %v, want %v", latest, ran, want)
			}
		}
		if most.Load() != 1 {
			t.Errorf("latest=%v: %d jobs ran at once, want 1", latest, most.Load())
		}
	}
}

// TestQueueStop: Stop cancels the job running, drops the queued ones and
// refuses new ones.
func TestQueueStop(t *testing.T) {
	started := make(chan struct{})
	var wg sync.WaitGroup
	var ran atomic.Int32
	q := New(func(ctx context.Context, j int) {
		ran.Add(1)
		if j == 0 {
			close(started)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Error("the running job was not cancelled")
			}
		}
	}, Go(wg.Go))
	q.Add(0)
	q.Add(1)
	<-started
	q.Stop()
	if q.Add(2) {
		t.Error("a stopped queue took a job")
	}
	wg.Wait()
	if ran.Load() != 1 {
		t.Errorf("%d jobs ran, want 1 (the others dropped)", ran.Load())
	}
}
