package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
)

// ReadyTimeout bounds one readiness check: a GET /readyz, or the scrape of
// StoreReady.
const ReadyTimeout = 2 * time.Second

// CheckReady returns nil when store is ready: its Ready method, for a
// store that has one, returns nil and its watermark can be read. Otherwise
// it returns why, as the store says it. GET /readyz answers 503 with this
// error and StoreReady is 0 while it fails: one check, so that what
// Prometheus sees is what a probe sees. It does not block beyond ctx.
func CheckReady(ctx context.Context, store audit.Store) error {
	if rd, ok := store.(interface{ Ready() error }); ok {
		if err := rd.Ready(); err != nil {
			return err
		}
	}
	if _, err := store.Watermark(ctx); err != nil {
		return fmt.Errorf("cannot read the watermark: %w", err)
	}
	return nil
}

// WatchWithdrawals has reg export WithdrawalsWaiting, read from waiting
// (pipeline.Pipeline.WithdrawalsWaiting of every tenant) at each scrape.
func WatchWithdrawals(reg prometheus.Registerer, waiting func() int) error {
	f := family(WithdrawalsWaiting)
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: f.Name, Help: f.Help}, func() float64 {
		return float64(waiting())
	}))
}

// WatchReady has reg export StoreReady for store, checked (CheckReady) at
// each scrape: every store can stop being ready, so every store exports it.
func WatchReady(reg prometheus.Registerer, store audit.Store) error {
	f := family(StoreReady)
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: f.Name, Help: f.Help}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
		defer cancel()
		if CheckReady(ctx, store) != nil {
			return 0
		}
		return 1
	}))
}
