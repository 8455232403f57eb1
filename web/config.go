package web

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mcpaudit/mcpaudit/internal/conf"
)

// Config configures the page.
type Config struct {
	// BaseURL is the page's address as people reach it, such as
	// https://mcpaudit.example.com. Notifications link to it; rules and
	// dashboards take it as their --web-url. Default empty: links on the
	// page are relative.
	BaseURL string `yaml:"base_url"`
	// Redact lists JSON keys whose values are hidden wherever they occur
	// when raw arguments, results and error data are shown (case does not
	// matter). Default none.
	Redact []string `yaml:"redact"`
	// HidePayloads hides raw arguments and results altogether. Default
	// false.
	HidePayloads bool `yaml:"hide_payloads"`
	// PageSize is how many findings or calls a page shows. Default 50.
	PageSize int `yaml:"page_size"`
}

// NewDefaultConfig returns the defaults.
func NewDefaultConfig() Config { return Config{PageSize: 50} }

// Validate checks the configuration; errors name their key.
func (c *Config) Validate() error {
	var errs []error
	if c.BaseURL != "" {
		if fault := conf.URLFault(c.BaseURL, true, "http", "https"); fault != "" {
			errs = append(errs, fmt.Errorf("base_url: want an http or https URL, such as https://mcpaudit.example.com: %s (the value is not repeated: it may hold a secret)", fault))
		}
	}
	for i, k := range c.Redact {
		if strings.TrimSpace(k) == "" {
			errs = append(errs, fmt.Errorf("redact[%d]: empty key", i))
		}
	}
	if c.PageSize < 0 || c.PageSize > 1000 {
		errs = append(errs, errors.New("page_size: must be between 1 and 1000"))
	}
	return errors.Join(errs...)
}

// Link returns the absolute URL of a page path under base ("" keeps the
// path relative).
func Link(base, path string) string {
	return strings.TrimRight(base, "/") + path
}
