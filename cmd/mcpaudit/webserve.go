package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/notify"
	"github.com/mcpaudit/mcpaudit/report"
	"github.com/mcpaudit/mcpaudit/web"
)

// WebConfig configures the investigation page and finding notifications
// (serve.web).
type WebConfig struct {
	web.Config `yaml:",inline"`
	// Notify sends a notification per new finding. Off by default.
	Notify notify.Config `yaml:"notify"`
}

// NewDefaultWebConfig returns the defaults: the page on, notifications off.
func NewDefaultWebConfig() WebConfig {
	return WebConfig{Config: web.NewDefaultConfig(), Notify: notify.NewDefaultConfig()}
}

// Validate checks both parts; errors name their key.
func (c *WebConfig) Validate() error {
	var errs []error
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Notify.Validate(); err != nil {
		errs = append(errs, prefixed("notify", err))
	}
	return errors.Join(errs...)
}

// startNotifier starts the notifier when notifications are configured; its
// journal lives in the data dir.
func (s *server) startNotifier() error {
	n := s.cfg.Serve.Web.Notify
	if !n.Enabled() {
		return nil
	}
	base := s.cfg.Serve.Web.BaseURL
	nt, err := notify.New(n, s.cfg.Serve.DataDir, base, s.cfg.Rules.RunbookURL, s.store, s.log)
	if err != nil {
		return err
	}
	s.notifier = nt
	s.log.Info("notifying new findings", "url", n.URL, "format", n.Format, "min_severity", n.MinSeverity)
	return nil
}

// mountWeb serves the investigation page at / and the report at
// /api/v1/report on the API listener.
func (s *server) mountWeb(mux *http.ServeMux, q *api.Server) error {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopWeb = cancel
	parts := func() []detect.PartitionStatus { ps, _ := s.pipe.Status(); return ps }
	status := web.WithPartitions(web.NewMetricsStatus(ctx, s.registry, s.store), parts, s.cfg.Detect.IdleTimeout)
	page, err := web.New(s.store, q, s.cfg.Serve.Web.Config, status, s.log)
	if err != nil {
		cancel()
		return fmt.Errorf("cannot start the page: %w", err)
	}
	page.LinkRunbook(s.cfg.Rules.RunbookURL)
	// Every method: the report answers 405 itself, as the API does.
	mux.Handle("/api/v1/report", report.Handler(s.store, q))
	mux.Handle("/", page.Handler())
	return nil
}
