package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/store"
)

// A daemon on a shared Store is one host of a fleet: it records itself in
// the Store with the address it advertises and a heartbeat, so that the
// other hosts' daemons can tell clients where its workspaces are served.

// checkAdvertise checks --advertise: tcp://HOST:PORT (or http://), for a
// daemon that listens on TCP.
func checkAdvertise(addr, tcp string) error {
	if addr == "" {
		return nil
	}
	if tcp == "" {
		return usageError{errors.New("--advertise needs --tcp: other hosts' clients reach this daemon over TCP")}
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "tcp" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
		u.User != nil || u.RawQuery != "" {
		return usageError{fmt.Errorf("--advertise %q: want tcp://HOST:PORT", addr)}
	}
	host, port, err := net.SplitHostPort(u.Host)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n <= 0 || n > 65535 {
		return usageError{fmt.Errorf("--advertise %q: want tcp://HOST:PORT with a port", addr)}
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return usageError{fmt.Errorf("--advertise %q: %s is no address another host can reach; name this host's", addr, host)}
	}
	return nil
}

// heartbeat records this host in the shared Store as answering at addr
// now and every store.NodeHeartbeat until the returned stop, which records
// it as stopped. A failed beat is logged; the next one tries again.
func heartbeat(db *store.DB, addr string, log *slog.Logger) (stop func()) {
	beat := func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, store.NodeHeartbeat)
		defer cancel()
		if err := db.Heartbeat(ctx, addr); err != nil {
			log.Warn("heartbeat", "err", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	beat(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(store.NodeHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				beat(ctx)
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		if err := db.Retire(rctx); err != nil {
			log.Warn("record this host as stopped", "err", err)
		}
	}
}
