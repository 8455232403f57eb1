package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"go.yaml.in/yaml/v3"
)

// Config is the mcpaudit configuration file. Every section is optional;
// NewDefaultConfig gives the documented defaults.
type Config struct {
	// Dialects chooses the dialect of each server name and names the write
	// tools of generic servers.
	Dialects dialect.Config `yaml:"dialects"`
	// Detect sets the event-time windows of the detector.
	Detect detect.Config `yaml:"detect"`
}

// NewDefaultConfig returns the configuration used when no file is given.
func NewDefaultConfig() Config {
	return Config{Detect: detect.NewDefaultConfig()}
}

// Validate checks every section and joins the errors, each with its key
// path.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Dialects.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("dialects.%w", err))
	}
	if err := c.Detect.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("detect.%w", err))
	}
	return errors.Join(errs...)
}

// LoadConfig reads a YAML configuration file strictly (unknown keys are
// errors), expanding ${VAR} environment references first, over the
// defaults.
func LoadConfig(path string) (Config, error) {
	cfg := NewDefaultConfig()
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("cannot read config: %w", err)
	}
	expanded := os.Expand(string(raw), func(k string) string {
		if k == "$" {
			return "$"
		}
		return os.Getenv(k)
	})
	dec := yaml.NewDecoder(bytes.NewReader([]byte(expanded)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("cannot decode config %s: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("invalid config %s: %w", path, err)
	}
	return cfg, nil
}
